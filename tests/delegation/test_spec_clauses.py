"""SPEC sub-clauses end to end: real workers, a scripted root, each clause's own effect.

S-PROF-7 (a profile's maxTurns, the default 4), S-MODEL-1 (profile model, the
parent's effort, the session's model), S-MSG-1 (21 tries 10 ms apart), S-RUN-2
(session before SubagentSpawned), S-RUN-3 (SubagentStopped, the default idle
timeout), S-RUN-4 (``background: true``), S-MCP-1 (per-profile scope, no
computer-use), S-APR-1 (the root's identity at every layer), S-PROF-5 (skills),
S-POL-3 (acceptEdits, bypassPermissions), S-RUN-7 (the worker's own tool table).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from pydantic import BaseModel

from protocol import (
    AGENT_STEER,
    CommandSpec,
    ModelRequest,
    ModelResult,
    ResourceLimits,
    SteerReceipt,
    ToolCall,
)
from supervisor import RootSession, Subvisor, SubvisorSettings
from supervisor.delegation._mcp import McpServerConfig
from supervisor.policy._approvals import ApprovalDecision, ApprovalRequest
from supervisor.state._store import SessionStore
from tests.support.cli import run_cli
from tests.support.delegation import (
    READ_README,
    agent_call,
    home_for,
    readme_project,
    subvisor,
    write_scenario,
)
from tests.support.mcp import everything_server

#: What no child's worker may offer its model (S-POL-1, S-RUN-7): delegation,
#: plan mode, and scheduled or idle-turn tools.
_NEVER_IN_A_WORKER = {
    "Agent",
    "Task",
    "EnterPlanMode",
    "ExitPlanMode",
    "ScheduleWakeup",
    "CronCreate",
    "CronDelete",
    "CronList",
}


def _record_model_requests(host: Subvisor) -> list[ModelRequest]:
    """Every model request that reaches ``host``'s gateway, root's and workers' alike.

    A child's request carries the tools its model is offered: the supervisor
    sets them from the launch (the tools its worker was given), whatever the
    worker sent.
    """
    requests: list[ModelRequest] = []
    call: Callable[..., Awaitable[ModelResult]] = host.gateway.call

    async def recording(request: ModelRequest, on_delta: Any = None, **options: Any) -> ModelResult:
        requests.append(request)
        return await call(request, on_delta, **options)

    host.gateway.call = recording  # type: ignore[method-assign]
    return requests


def _child_requests(requests: list[ModelRequest], key: str) -> list[ModelRequest]:
    return [r for r in requests if r.agent_keys and r.agent_keys[0] == key]


def _profile(directory: Path, name: str, frontmatter: str, body: str = "Do it.") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: {name} agent\n{frontmatter}---\n{body}\n"
    )


# --- S-PROF-7: maxTurns --------------------------------------------------------------

_LOOP_TURN = {"tool_calls": [{"name": "LS", "input": {"path": "."}}], "text": "still looking"}


async def test_s_prof_7_a_profiles_own_max_turns_and_the_default_of_4(tmp_path: Path) -> None:
    """S-PROF-7: a profile's ``maxTurns: 2`` stops its child after 2 model turns; a child
    whose profile says nothing stops after the default 4 (no settings given)."""
    _profile(tmp_path / ".claude" / "agents", "brief", "maxTurns: 2\n")
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("bounded", "look", subagent_type="brief"),
                        agent_call("defaulted", "look"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "bounded": [_LOOP_TURN] * 10,
            "defaulted": [_LOOP_TURN] * 10,
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        records = {r.description: r for r in host.registry.list(root.session_id)}
    assert records["bounded"].usage.model_calls == 2
    assert records["defaulted"].usage.model_calls == 4
    assert "stopped after reaching maxTurns=2" in outcome.text
    assert "stopped after reaching maxTurns=4" in outcome.text
    assert outcome.text.count("status: partial") == 2


# --- S-MODEL-1: which model a child runs on --------------------------------------------


async def test_s_model_1_a_valid_profile_model_wins_over_the_parents(tmp_path: Path) -> None:
    """S-MODEL-1: the profile's explicit model runs the child, not the root's."""
    pinned = write_scenario(tmp_path / "pinned.yaml", {"default": [{"text": "from the pin"}]})
    _profile(tmp_path / ".claude" / "agents", "pinned", f"model: {pinned}\n")
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("p", "x", subagent_type="pinned")]},
                {"text": "{{tool_result}}"},
            ],
            "p": [{"text": "from the parent's model"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
    assert record.model == pinned
    assert "from the pin" in outcome.text and "from the parent's model" not in outcome.text


async def test_s_model_1_a_child_inherits_the_parents_model_with_its_effort(
    tmp_path: Path,
) -> None:
    """S-MODEL-1: without an explicit model, the child's model calls go out on the parent's
    model string, reasoning effort included (the gateway turns ``$high`` into the request's
    effort)."""
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("heir", "x")]}, {"text": "{{tool_result}}"}],
            "heir": [{"text": "inherited"}],
        },
    )
    root_model = f"{scenario}$high"
    async with subvisor(home_for(tmp_path)) as host:
        requests = _record_model_requests(host)
        root = RootSession(host, model=root_model, cwd=tmp_path)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
    [child_request] = _child_requests(requests, "heir")
    assert "inherited" in outcome.text
    assert record.model == root_model
    assert child_request.model == root_model
    assert host.gateway.resolve(child_request.model)[0].effort == "high"


def test_s_model_1_the_sessions_model_selection_reaches_the_child(tmp_path: Path) -> None:
    """S-MODEL-1, last resort: no --model, no profile model: the session's model (here
    the user's config.toml) runs the root and, inherited, its child."""
    project = readme_project(tmp_path)
    home = home_for(tmp_path)
    home.mkdir()
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("reader", "read")]}, {"text": "{{tool_result}}"}],
            "reader": [{"tool_calls": [READ_README]}, {"text": "it says {{tool_result}}"}],
        },
    )
    (home / "config.toml").write_text(f"model = {json.dumps(model)}\n")
    run = run_cli(home, "run", "--json", "look", cwd=project)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    [task] = report["tasks"]
    assert task["status"] == "completed"
    assert "# demo project" in report["answer"] and "it says" in report["answer"]
    with SessionStore(home / "subvisor.db") as store:
        record = store.find_task(task["agentId"])
        assert record is not None and record.child_session_id is not None
        child = store.get_session(record.child_session_id)
        root = store.get_session(record.parent_session_id)
    assert child is not None and root is not None
    assert child.model == root.model == model


# --- S-MSG-1: the 21 x 10 ms delivery retry ----------------------------------------------


def _unstarted_run(host: Subvisor, root: RootSession) -> Any:
    """A subagent run of ``root`` planned as the Agent tool would, that nothing drives:
    the test gives it a worker and ends it."""
    from supervisor.delegation._agent_tool_schema import AgentToolInput
    from supervisor.delegation._subagents import SubagentRun

    launch = root.agent_tool._plan(
        AgentToolInput(description="idle", prompt="p"), tool_use_id=None, override=None
    )
    parent = launch.parent_session_id
    return SubagentRun(
        launch,
        host.run_services,
        launch_order=host.launch_order(parent),
        parent_queue=host.command_queue(parent),
        output_dir=host.output_dir(parent, launch.agent_id),
    )


async def test_s_msg_1_no_active_turn_is_retried_21_times_10_ms_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-MSG-1: a running child's real worker that has no active turn is asked 21 times,
    with a 10 ms pause after each try; then delivery has failed (``undelivered``), and
    SendMessage queues it for a new turn (the next test)."""
    model = write_scenario(tmp_path / "s.yaml", {"root": [{"text": "unused"}]})
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        run = _unstarted_run(host, root)
        launch = run.launch
        handle = await host.fleet.spawn(launch.limits)
        try:
            # A real worker, ready, that runs no agent: it has no active turn.
            run.handle = handle
            run.ready.set()
            answers: list[BaseModel] = []
            request = handle.request

            async def counted(method: CommandSpec[Any, Any], params: BaseModel) -> BaseModel:
                answer = await request(method, params)
                if method is AGENT_STEER:
                    answers.append(answer)
                return answer

            monkeypatch.setattr(handle, "request", counted)
            pauses: list[float] = []
            sleep = trio.sleep

            async def noted_sleep(seconds: float) -> None:
                if trio.lowlevel.current_task().name == "steering":
                    pauses.append(seconds)
                await sleep(seconds)

            monkeypatch.setattr(trio, "sleep", noted_sleep)
            outcome: list[str] = []
            async with trio.open_nursery() as nursery:

                async def steer() -> None:
                    outcome.append(await run.steer("check X"))

                nursery.start_soon(steer, name="steering")
            monkeypatch.undo()
        finally:
            await handle.shutdown(grace_s=2.0)
    assert answers == [SteerReceipt(delivered=False, reason="no active turn")] * 21
    assert pauses == [0.01] * 21
    assert outcome == ["undelivered"]


async def _the_next_run(host: Any, after: Any) -> Any:
    """The run started after ``after`` (a resumed child is a new run, with its history)."""
    with host.lifecycle.subscribe() as events, trio.fail_after(60):
        async for event in events:
            found = host.runs.get(event["agentId"])
            if found is not None and found is not after:
                return found
    raise AssertionError("no new run")


async def test_s_msg_1_delivery_fails_so_it_is_queued_and_given_in_a_new_turn(
    tmp_path: Path,
) -> None:
    """S-MSG-1: SendMessage to a child whose turn is ending (its real worker has no active
    turn) answers ``queued`` at once; when that turn has ended, the child gets the message
    in a new turn, in the background, and its end is a notification."""
    from protocol import ToolCall
    from supervisor.delegation._messaging import SendMessageTool

    model = write_scenario(
        tmp_path / "s.yaml",
        {"root": [{"text": "unused"}], "idle": [{"text": "second turn: read the message"}]},
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        run = _unstarted_run(host, root)
        launch = run.launch
        run.register()
        host.runs[run.task_id] = run
        # A real worker, ready, that runs no agent: its turn has no room for a message.
        run.handle = await host.fleet.spawn(launch.limits)
        run.launch_order.pass_turn(run.ticket)  # it has its worker: later launches go on
        run.ready.set()
        try:
            send = SendMessageTool(
                launch.parent_session_id,
                root.agent_tool,
                runs=host.runs,
                registry=host.registry,
                store=host.store,
                spawn=host.spawn_background,
            )
            with trio.fail_after(30):  # at once: it does not wait for the turn to end
                answer = await send(
                    ToolCall(
                        id="c1", name="SendMessage", input={"to": run.task_id, "message": "check X"}
                    )
                )
            assert answer.text.startswith(f"queued: agent {run.task_id} is ending its turn")
            # The turn ends.
            await run.handle.shutdown(grace_s=2.0)
            run._finish("completed", "first answer", None, None, None)
        finally:
            run.done.set()  # never leave the host waiting on this hand-made run
        resumed = await _the_next_run(host, after=run)
        with trio.fail_after(60):
            await resumed.done.wait()
        messages = [m for _, m in host.store.messages_after(resumed.launch.child_session_id)]
        record = host.registry.get(resumed.task_id)
    assert record is not None and record.status == "completed"
    assert record.result == "second turn: read the message"
    assert any("check X" in m.content and "<coordinator-message>" in m.content for m in messages)


# --- S-RUN-2 / S-RUN-3: the order of a launch's effects ------------------------------------


async def test_s_run_2_each_child_session_is_saved_before_its_subagent_spawned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-RUN-2: for five concurrent spawns, the store is asked to save each child session
    before SubagentSpawned names it; S-RUN-3: SubagentStopped comes last, after the
    registry holds the run's terminal record."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call(f"c{i}", "x") for i in range(5)]},
                {"text": "done"},
            ],
            "default": [{"text": "ok"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        store = host.store
        writes: list[tuple[str, str]] = []
        create_session, append_event = store.create_session, store.append_event

        def noted_session(session_id: str, **kw: Any) -> Any:
            writes.append(("session", session_id))
            return create_session(session_id, **kw)

        def noted_event(session_id: str, name: str, data: dict[str, Any]) -> Any:
            if name == "SubagentSpawned":
                writes.append(("spawned", data["child_session_id"]))
            if name == "SubagentStopped":
                record = host.registry.get(data["agentId"])
                assert record is not None and record.is_terminal
                writes.append(("stopped", f"sess_subagent_{data['agentId']}"))
            return append_event(session_id, name, data)

        monkeypatch.setattr(store, "create_session", noted_session)
        monkeypatch.setattr(store, "append_event", noted_event)
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        records = host.registry.list(root.session_id)
        stopped = [
            e.data for e in host.store.events(root.session_id) if e.name == "SubagentStopped"
        ]
    children = {r.child_session_id for r in records}
    assert len(children) == 5
    for child in children:
        steps = [kind for kind, session in writes if session == child]
        assert steps == ["session", "spawned", "stopped"], (child, writes)
    assert sorted((d["agentId"], d["status"]) for d in stopped) == sorted(
        (r.task_id, "completed") for r in records
    )


async def test_s_run_3_the_default_idle_timeout_is_600_s_on_the_worker(tmp_path: Path) -> None:
    """S-RUN-3: with no settings, a child's worker is spawned with a 600 s activity
    watchdog (the watchdog itself firing: the ``hang`` fault test)."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {"root": [{"tool_calls": [agent_call("a", "x")]}, {"text": "{{tool_result}}"}]},
    )
    async with Subvisor(SubvisorSettings(home=home_for(tmp_path))) as host:
        spawned: list[ResourceLimits] = []
        spawn = host.fleet.spawn

        async def noted_spawn(limits: ResourceLimits, **kw: Any) -> Any:
            spawned.append(limits)
            return await spawn(limits, **kw)

        host.fleet.spawn = noted_spawn  # type: ignore[method-assign]
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
    assert [limits.idle_timeout_s for limits in spawned] == [600]


# --- S-RUN-4: a profile's background: true ----------------------------------------------------


async def test_s_run_4_a_background_profile_runs_in_the_background(tmp_path: Path) -> None:
    """S-RUN-4: an Agent call without run_in_background, for a ``background: true``
    profile, returns async_launched while the child still runs; the parent's turn ends
    without it (an abort of that turn does not touch it); its end is a notification."""
    _profile(tmp_path / ".claude" / "agents", "watcher", "background: true\n")
    # The child waits (bounded, against a hang) for a file the test makes after the abort.
    wait = "for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; ls go"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("watch", "x", subagent_type="watcher")]},
                {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 60"}}]},
            ],
            "watch": [
                {"tool_calls": [{"name": "Bash", "input": {"command": wait}}]},
                {"text": "watched {{tool_result}}"},
            ],
        },
    )
    async with subvisor(home_for(tmp_path), permission={"*": "allow"}) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.ask, "go")
            # The Agent call has returned once the root's turn holds its result.
            while not any(m.role == "tool" for m in root.loop.messages):  # noqa: ASYNC110
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()  # abort the parent's turn
        [run] = host.runs.values()
        launched = next(m.content for m in root.loop.messages if m.role == "tool")
        running_after_abort = not run.done.is_set()
        (tmp_path / "go").touch()
        await run.done.wait()
        record = host.registry.get(run.task_id)
        [notification] = root.queue.take()
    assert launched.startswith("async_launched")
    assert running_after_abort
    assert record is not None and record.background and record.status == "completed"
    assert "<result>watched go" in notification.text


# --- S-MCP-1: which MCP servers a child sees -----------------------------------------------


async def test_s_mcp_1_a_profiles_mcp_servers_scope_and_computer_use_is_never_lent(
    tmp_path: Path,
) -> None:
    """S-MCP-1: three servers connected (one named computer-use). A profile with
    ``mcpServers: [other]`` lends its child exactly ``other``'s tools; a profile without
    the field lends every server but computer-use; even a profile naming computer-use gets
    none of its tools; the root itself has all three. A child calling a tool it was not
    lent gets an error, and the server is not called."""
    server = McpServerConfig(command=str(everything_server()), args=("stdio",))
    agents = tmp_path / ".claude" / "agents"
    _profile(agents, "scoped", "mcpServers: [other]\n")
    _profile(agents, "screen", "mcpServers: [computer-use]\n")
    echo = {"name": "mcp__everything__echo", "input": {"message": "out of scope"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("scoped", "x", subagent_type="scoped"),
                        agent_call("unscoped", "x"),
                        agent_call("screen", "x", subagent_type="screen"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "scoped": [{"tool_calls": [echo]}, {"text": "scoped: {{tool_result}}"}],
            "default": [{"text": "ok"}],
        },
    )
    settings = SubvisorSettings(
        home=home_for(tmp_path),
        mcp_servers={"everything": server, "other": server, "computer-use": server},
        subagent_limits=ResourceLimits(idle_timeout_s=60),
    )
    async with Subvisor(settings) as host:
        requests = _record_model_requests(host)
        root = RootSession(host, model=model, cwd=tmp_path)
        root_tools = {spec.name for spec in root.loop._tools.specs}
        outcome = await root.run("go")

    def servers(key: str) -> set[str]:
        [first, *_] = _child_requests(requests, key)
        return {t.name.split("__")[1] for t in first.tools if t.name.startswith("mcp__")}

    assert {name.split("__")[1] for name in root_tools if name.startswith("mcp__")} == {
        "everything",
        "other",
        "computer-use",
    }
    assert servers("scoped") == {"other"}
    assert servers("unscoped") == {"everything", "other"}
    assert servers("screen") == set()
    assert "scoped: Error" in outcome.text and "Echo: out of scope" not in outcome.text


# --- S-APR-1: the root's identity at every layer -------------------------------------------


async def test_s_apr_1_every_childs_ask_carries_the_roots_identity_and_its_own_origin(
    tmp_path: Path,
) -> None:
    """S-APR-1: a child's ask crosses its worker's pipe, its run's wrapper and the host to
    the root's handler: it arrives with the root's session id and the innermost requester
    (the child, its session, the tool call that launched it). A child resumed by the
    root's SendMessage is wrapped anew: its ask names the SendMessage call, not the first
    launch, and still the root's session. (With subagent_depth at most 1 there is no
    deeper layer to stack.)"""
    touch = {"name": "Bash", "input": {"command": "touch asked.txt"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("asker", "x")]}, {"text": "done"}],
            "asker": [
                {"tool_calls": [touch]},
                {"text": "first"},
                {"tool_calls": [touch]},
                {"text": "second"},
            ],
        },
    )
    seen: list[ApprovalRequest] = []

    async def handler(request: ApprovalRequest) -> ApprovalDecision:
        seen.append(request)
        return "allow_once"

    settings = SubvisorSettings(
        home=home_for(tmp_path),
        permission={"*": "allow", "bash": "ask"},
        subagent_limits=ResourceLimits(idle_timeout_s=30),
    )
    async with Subvisor(settings, approval_handler=handler) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [first] = host.registry.list(root.session_id)
        agent_call_id = next(
            m.tool_calls[0].id for m in root.loop.messages if m.role == "assistant" and m.tool_calls
        )
        sent = await root.loop._tools.call(
            ToolCall(
                id="call_send", name="SendMessage", input={"to": first.task_id, "message": "again"}
            )
        )
        assert sent.text.startswith("resumed_background"), sent.text
        resumed_run = next(r for r in host.runs.values() if r.task_id != first.task_id)
        await resumed_run.done.wait()
        resumed = host.registry.get(resumed_run.task_id)
        assert resumed is not None
        parent_events = [
            e.data for e in host.store.events(root.session_id) if e.name == "PermissionRequested"
        ]
    assert [r.session_id for r in seen] == [root.session_id] * 2
    assert [(r.origin.kind, r.origin.agent_id) for r in seen] == [
        ("subagent", first.task_id),
        ("subagent", resumed.task_id),
    ]
    assert [r.origin.session_id for r in seen] == [
        first.child_session_id,
        resumed.child_session_id,
    ]
    assert [r.origin.parent_tool_call_id for r in seen] == [agent_call_id, "call_send"]
    assert [e["agentId"] for e in parent_events] == [first.task_id, resumed.task_id]


def _readme_text() -> str:
    return (Path(__file__).resolve().parents[2] / "README.md").read_text()


# --- S-PROF-5: skills --------------------------------------------------------------------------


async def test_s_prof_5_skills_give_no_skill_tool_as_the_readme_says(tmp_path: Path) -> None:
    """S-PROF-5: subvisor has no Skill tool (the README says so): a Claude Code profile
    with ``skills`` and no ``tools`` still loads, and its child's worker offers only what
    every child has (RespondToCoordinator, AskUserQuestion), never a Skill that cannot run;
    with ``tools`` listed the child gets those tools."""
    readme = _readme_text()
    assert "`skills`" in readme and "no Skill tool" in readme
    agents = tmp_path / ".claude" / "agents"
    _profile(agents, "skilled", "skills: code-review\n")
    _profile(agents, "skilled-reader", "skills: code-review\ntools: Read\n")
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("only skills", "x", subagent_type="skilled"),
                        agent_call("reader", "x", subagent_type="skilled-reader"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "default": [{"text": "ok"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        requests = _record_model_requests(host)
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        records = host.registry.list(root.session_id)
    assert [r.status for r in records] == ["completed", "completed"]
    [skills_only] = _child_requests(requests, "only skills")
    [reader] = _child_requests(requests, "reader")
    assert {t.name for t in skills_only.tools} == {"RespondToCoordinator", "AskUserQuestion"}
    assert {t.name for t in reader.tools} == {"Read", "RespondToCoordinator", "AskUserQuestion"}


# --- S-POL-3: permission modes end to end ------------------------------------------------------

_WRITE = {"name": "Write", "input": {"file_path": "made.txt", "content": "x"}}
_TOUCH = {"name": "Bash", "input": {"command": "touch touched.txt"}}
_RM = {"name": "Bash", "input": {"command": "rm -f keep.txt"}}


def _mode_scenario(tmp_path: Path, **agent: Any) -> str:
    return write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [_WRITE]},
                {"tool_calls": [agent_call("child", "x", **agent)]},
                {"text": "root: {{tool_result}}"},
            ],
            "child": [
                {"tool_calls": [_WRITE, _TOUCH, _RM]},
                {"text": "child: {{tool_result}}"},
            ],
        },
    )


async def test_s_pol_3_accept_edits_lets_a_child_edit_but_not_run_commands(
    tmp_path: Path,
) -> None:
    """S-POL-3 acceptEdits: under rules that ask for everything, with nobody to answer, a
    child in an acceptEdits session writes in the project; its Bash calls still ask, and
    are refused."""
    (tmp_path / "keep.txt").write_text("keep")
    async with subvisor(
        home_for(tmp_path), permission={"*": "ask"}, permission_mode="acceptEdits"
    ) as host:
        root = RootSession(host, model=_mode_scenario(tmp_path), cwd=tmp_path)
        outcome = await root.run("go")
    assert (tmp_path / "made.txt").read_text() == "x"
    assert not (tmp_path / "touched.txt").exists()
    assert (tmp_path / "keep.txt").exists()
    assert outcome.text.count("nobody can approve") == 2


async def test_s_pol_3_bypass_permissions_runs_everything_but_what_a_rule_denies(
    tmp_path: Path,
) -> None:
    """S-POL-3 bypassPermissions: the child's asks are all allowed (Write, Bash) but a
    deny rule still holds (``rm *``), as in Claude Code."""
    (tmp_path / "keep.txt").write_text("keep")
    rules = {"*": "ask", "bash": {"*": "ask", "rm *": "deny"}}
    async with subvisor(
        home_for(tmp_path), permission=rules, permission_mode="bypassPermissions"
    ) as host:
        root = RootSession(host, model=_mode_scenario(tmp_path), cwd=tmp_path)
        outcome = await root.run("go")
    assert (tmp_path / "made.txt").read_text() == "x"
    assert (tmp_path / "touched.txt").exists()
    assert (tmp_path / "keep.txt").read_text() == "keep"
    assert "permission denied: bash 'rm -f keep.txt' is denied" in outcome.text


async def test_s_pol_3_a_user_profiles_mode_applies_to_its_child_only(tmp_path: Path) -> None:
    """S-POL-3 with S-PROF-4: a user-level profile's ``permissionMode: acceptEdits`` lets
    its child write while the default-mode root, under the same rules, may not."""
    home = home_for(tmp_path)
    _profile(home / "agents", "editor", "permissionMode: acceptEdits\n")
    project = tmp_path / "project"
    project.mkdir()
    async with subvisor(home, permission={"*": "ask"}) as host:
        model = _mode_scenario(tmp_path, subagent_type="editor")
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
    assert record.subagent_type == "editor" and record.status == "completed"
    assert (project / "made.txt").read_text() == "x"
    # The root's own Write (before the child's) was refused: nobody could approve it.
    assert "permission denied: edit 'made.txt'" in next(
        m.content for m in root.loop.messages if m.role == "tool"
    )
