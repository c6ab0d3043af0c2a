"""Delegation end to end: a root agent, the Agent tool, real worker processes.

S-TOOL-1..6, S-RUN-1..4, S-RUN-8, S-NOTE-1..3, S-PROF-1, S-PROF-7, S-POL-1.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol import ToolCall
from supervisor import RootSession
from supervisor.delegation import _subagents as subagents
from tests.support.delegation import (
    READ_README,
    agent_call,
    home_for,
    readme_project,
    subvisor,
    write_scenario,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    for i in range(8):
        (root / f"module_{i}.py").write_text(f"def handler_{i}():\n    return 'secret-{i}'\n")
    return root


async def test_eight_parallel_foreground_explore_agents_all_report_back(
    tmp_path: Path, project: Path
) -> None:
    """Acceptance: 8 foreground Explore agents in one message; every answer reaches the root."""
    agents: dict[str, list[dict[str, object]]] = {
        "root": [
            {
                "tool_calls": [
                    agent_call(f"scan module {i}", f"Find handler_{i}", subagent_type="Explore")
                    for i in range(8)
                ]
            },
            {"text": "Summary:\n{{tool_result}}"},
        ]
    }
    for i in range(8):
        agents[f"scan module {i}"] = [
            {
                "tool_calls": [
                    {"name": "Grep", "input": {"pattern": f"secret-{i}", "output_mode": "content"}}
                ]
            },
            {"text": "found {{tool_result}}"},
        ]
    model = write_scenario(tmp_path / "scenario.yaml", agents)
    async with subvisor(home_for(tmp_path)) as host:
        with host.lifecycle.subscribe() as feed:
            root = RootSession(host, model=model, cwd=project)
            outcome = await root.run("scan everything")
            started = {}
            while True:
                try:
                    event = feed.receive_nowait()
                except trio.WouldBlock:
                    break
                if event["event"] == "task.started":
                    started[event["agentId"]] = event["pid"]
        records = host.registry.list(root.session_id)
        spawned = host.store.events(root.session_id)
    assert outcome.status == "completed"
    for i in range(8):
        assert f"module_{i}.py:2:    return 'secret-{i}'" in outcome.text
    assert len(records) == 8 and all(r.status == "completed" for r in records)
    # Eight different worker processes ran them, none of them this one.
    assert set(started) == {r.task_id for r in records}
    assert len(set(started.values())) == 8 and os.getpid() not in started.values()
    # S-RUN-2: every concurrent spawn is announced, each with its own saved child
    # session (the order of the two: test_s_run_2_each_child_session_is_saved_before...).
    announced = {e.data["agentId"]: e.data for e in spawned if e.name == "SubagentSpawned"}
    assert set(announced) == {r.task_id for r in records}
    assert all(announced[r.task_id]["child_session_id"] == r.child_session_id for r in records)


async def test_hundred_background_agents_with_segfaults_notify_exactly_once(tmp_path: Path) -> None:
    """Acceptance: 100 background agents, 10 segfault: 100 notifications, each once."""
    calls = [agent_call(f"job {i}", f"do job {i}", run_in_background=True) for i in range(100)]
    agents: dict[str, list[dict[str, object]]] = {
        "root": [{"tool_calls": calls}, {"text": "launched"}]
        + [{"text": f"noted batch {n}"} for n in range(100)],
    }
    for i in range(100):
        agents[f"job {i}"] = [{"fault": "segfault"}] if i % 10 == 3 else [{"text": f"done {i}"}]
    model = write_scenario(tmp_path / "scenario.yaml", agents)
    notifications: list[str] = []
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("launch the jobs")
        for message in root.loop.messages:
            if message.role == "user" and "<task-notification>" in message.content:
                assert message.content.startswith("[SYSTEM NOTIFICATION - NOT USER INPUT]")
                notifications.extend(message.content.split("<task-notification>")[1:])
        records = host.registry.list(root.session_id)
        stored = host.store.tasks_for_session(root.session_id)
    ids = [n.split("<task-id>")[1].split("</task-id>")[0] for n in notifications]
    assert len(ids) == 100 and len(set(ids)) == 100
    failed = [r for r in records if r.status == "failed"]
    assert len(failed) == 10
    assert all("SIGSEGV" in (r.error or "") for r in failed)
    assert sum("<status>failed</status>" in n for n in notifications) == 10
    # The store agrees with the registry, and every task is notified and terminal.
    assert {(r.task_id, r.status, r.notified) for r in stored} == {
        (r.task_id, r.status, True) for r in records
    }


async def test_api_keys_never_reach_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Model calls cross the pipe to the supervisor; no key is in a worker's env or any frame."""
    from supervisor import Subvisor, SubvisorSettings
    from tests.support.provider_server import CannedResponse, ProviderServer

    secret = "sk-test-NEVER-IN-A-WORKER"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    frames: list[bytes] = []
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("ask the model", "hi")]},
                {"text": "{{tool_result}}"},
            ]
        },
    )
    with ProviderServer() as server:
        server.enqueue(
            CannedResponse.json(
                {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": "child answer"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                }
            )
        )
        settings = SubvisorSettings.model_validate(
            {
                "home": home_for(tmp_path),
                "gateway": {
                    "providers": {
                        "openai": {"api": "openai", "base_url": server.base_url, "streaming": False}
                    }
                },
            }
        )
        async with Subvisor(settings, wire_tap=lambda _w, frame: frames.append(frame)) as host:
            root = RootSession(host, model=scenario, cwd=tmp_path)
            # The child runs on the HTTP provider; the root stays scripted.
            root.agent_tool._current_model = lambda: "openai:gpt-test"  # type: ignore[method-assign]
            outcome = await root.run("go")
        sent = server.requests
    assert "child answer" in outcome.text
    assert sent[0].headers["authorization"] == f"Bearer {secret}"
    assert frames and not any(secret.encode() in frame for frame in frames)


async def test_max_turns_ends_the_run_as_partial_with_a_marker(tmp_path: Path) -> None:
    """S-PROF-7: maxTurns really limits the child's model turns."""
    loop_turn = {"tool_calls": [{"name": "LS", "input": {"path": "."}}], "text": "still looking"}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("endless", "look")]}, {"text": "{{tool_result}}"}],
            "endless": [loop_turn] * 10,
        },
    )
    async with subvisor(home_for(tmp_path), max_turns=3) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
    assert "stopped after reaching maxTurns=3" in outcome.text
    assert "status: partial" in outcome.text
    assert record.usage.model_calls == 3


async def test_subagent_type_matching_and_errors(tmp_path: Path) -> None:
    """S-TOOL-2: normalised match; unknown types list what exists. S-TOOL-5: hidden Task alias."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("one", "x", subagent_type="EXPLORE"),
                        agent_call("two", "x", subagent_type="General_Purpose"),
                        agent_call("three", "x", subagent_type="nope"),
                        {"name": "Task", "input": {"description": "four", "prompt": "x"}},
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "default": [{"text": "ok"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        spec_names = [spec.name for spec in root.loop._tools.specs]
        await root.run("go")
        records = {r.description: r for r in host.registry.list(root.session_id)}
        results = [m for m in root.loop.messages if m.role == "tool"]
    assert "Task" not in spec_names and "Agent" in spec_names
    assert records["one"].subagent_type == "Explore"
    assert records["two"].subagent_type == "general-purpose"
    assert records["four"].subagent_type == "general-purpose"
    assert "three" not in records
    unknown = results[2]
    assert unknown.is_error and "nope" in unknown.content and "Explore" in unknown.content


@pytest.mark.parametrize(
    ("rules", "refusal"),
    [
        # The derived rules deny `task` to a child (S-POL-2)...
        ({"*": "allow"}, "permission denied: task 'general-purpose' is denied by the rule task"),
        # ...and where the rules let it through, the worker has no Agent tool to run
        # (S-RUN-7): the refusal is the worker's own.
        ({"*": "allow", "task": "allow"}, "no tool named 'Agent' is available"),
    ],
)
async def test_children_never_get_the_agent_tool(
    tmp_path: Path, rules: dict[str, str], refusal: str
) -> None:
    """S-POL-1/S-RUN-7: refused twice over. The tool table a child's worker offers its
    model has no Agent, Task, plan-mode, scheduled or idle-turn tool, and a child calling
    Agent is refused whether or not its rules allow ``task``; no grandchild exists."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("child", "try")]}, {"text": "{{tool_result}}"}],
            "child": [
                {"tool_calls": [agent_call("grandchild", "x")]},
                {"text": "child saw: {{tool_result}}"},
            ],
        },
    )
    async with subvisor(home_for(tmp_path), permission=rules) as host:
        offered: list[set[str]] = []
        call = host.gateway.call

        async def recording(request: Any, on_delta: Any = None, **options: Any) -> Any:
            if request.agent_keys[0] == "child":
                offered.append({spec.name for spec in request.tools})
            return await call(request, on_delta, **options)

        host.gateway.call = recording  # type: ignore[method-assign]
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        records = host.registry.list()
    forbidden = {"Agent", "Task", "EnterPlanMode", "ExitPlanMode"}
    forbidden |= {"ScheduleWakeup", "CronCreate", "CronDelete", "CronList"}
    assert len(offered) == 2 and "Read" in offered[0]
    assert all(forbidden.isdisjoint(tools) for tools in offered)
    assert refusal in outcome.text
    assert [r.description for r in records] == ["child"]


async def test_output_files_and_child_session(tmp_path: Path) -> None:
    """S-RUN-1/S-RUN-2: output dir files, child session id and parent link."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("writer", "x")]}, {"text": "done"}],
            "writer": [
                {"tool_calls": [{"name": "LS", "input": {"path": "."}}]},
                {"text": "final words"},
            ],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        child = host.store.get_session(record.child_session_id or "")
        transcript = host.store.messages(record.child_session_id or "")
    out = Path(record.output_dir)
    assert out == home_for(tmp_path) / "agents" / root.session_id / record.task_id
    assert json.loads((out / "metadata.json").read_text())["status"] == "completed"
    assert (out / "output.txt").read_text() == "final words"
    assert "[tool] LS" in (out / "task.output").read_text()
    assert child is not None and child.parent_id == root.session_id
    assert child.task_type == "subagent_child"
    assert record.child_session_id == f"sess_subagent_{record.task_id}"
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]


async def test_foreground_abort_cancels_the_child_but_not_a_background_one(tmp_path: Path) -> None:
    """S-RUN-3 / S-RUN-4."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("bg", "x", run_in_background=True)]},
                {"tool_calls": [agent_call("fg", "x")]},
            ],
            "bg": [{"text": "bg finished", "latency_ms": 1500}],
            "fg": [{"tool_calls": [{"name": "Bash", "input": {"command": "sleep 60"}}]}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        with trio.move_on_after(1.0):
            await root.ask("go")
        records = {r.description: r for r in host.registry.list(root.session_id)}
        assert records["fg"].status == "killed"
        assert "aborted" in (records["fg"].error or "")
        bg = host.runs[records["bg"].task_id]
        await bg.done.wait()
        assert host.registry.get(bg.task_id).status == "completed"  # type: ignore[union-attr]


async def test_resume_with_task_id_continues_the_earlier_conversation(tmp_path: Path) -> None:
    """S-TOOL-1: task_id continues an earlier child with its context."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("first", "remember 42")]},
                {"text": "ok"},
            ],
            "first": [{"text": "I will remember 42"}, {"text": "you said 42 before"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.ask("go")
        [first] = host.registry.list(root.session_id)
        result = await root.agent_tool.invoke(
            {"description": "first", "prompt": "what did I say?", "task_id": first.task_id}
        )
        records = host.registry.list(root.session_id)
        second = records[-1]
        transcript = host.store.messages(second.child_session_id or "")
    assert "you said 42 before" in result.text
    assert [m.content for m in transcript][:2] == ["remember 42", "I will remember 42"]


async def test_s_tool_1_task_id_resumes_only_an_agent_of_the_same_session(
    tmp_path: Path,
) -> None:
    """S-TOOL-1, S-SRV-5: a root that passes another session's task_id (a concurrent MCP
    client's, an earlier run's) is told there is no such agent, and its new child's
    history holds nothing of the other session's."""
    secret = write_scenario(
        tmp_path / "a.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("secret", "the code is SECRET-4711")]},
                {"text": "ok"},
            ],
            "secret": [{"text": "noted SECRET-4711"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        first = RootSession(host, model=secret, cwd=tmp_path)
        await first.ask("session A")
        [theirs] = host.registry.list(first.session_id)
        thief = write_scenario(tmp_path / "b.yaml", {"root": [{"text": "x"}]})
        second = RootSession(host, model=thief, cwd=tmp_path)
        result = await second.agent_tool.invoke(
            {"description": "thief", "prompt": "what did you note?", "task_id": theirs.task_id}
        )
        children = host.registry.list(second.session_id)
        histories = [host.store.messages(c.child_session_id or "") for c in children]
    assert result.is_error and "no earlier agent" in result.text
    assert not any("SECRET-4711" in (m.content or "") for h in histories for m in h)


async def test_opencode_result_style(tmp_path: Path) -> None:
    """S-TOOL-6: opencode's <task><task_result> form."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("a", "x")]}, {"text": "{{tool_result}}"}],
            "a": [{"text": "the answer"}],
        },
    )
    async with subvisor(home_for(tmp_path), result_style="opencode") as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
    assert '<task id="agent_' in outcome.text
    assert 'state="completed"><task_result>the answer</task_result></task>' in outcome.text


async def test_running_out_of_scripted_turns_fails_the_child_naming_the_key(tmp_path: Path) -> None:
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("short", "x")]}, {"text": "{{tool_result}}"}],
            "short": [{"tool_calls": [{"name": "LS", "input": {"path": "."}}]}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
    assert "failed" in outcome.text and "'short'" in outcome.text
    assert (home_for(tmp_path) / "subvisor.db").is_file()


async def test_background_bash_shares_the_task_registry(tmp_path: Path) -> None:
    """S-RUN-6: background shell commands and agents: one list, output and stop interface."""
    bash = {"name": "Bash", "input": {"command": "echo started; sleep 0.2; echo finished"}}
    bash["input"]["run_in_background"] = True  # type: ignore[index]
    forever = {"name": "Bash", "input": {"command": "sleep 60", "run_in_background": True}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [bash, forever]},
                {"text": "launched: {{tool_result}}"},
                {"text": "noted"},
            ]
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        bash_specs = [s for s in root.loop._tools.specs if s.name == "Bash"]
        await root.ask("go")
        shell, sleeper = host.registry.list(root.session_id)
        assert shell.kind == sleeper.kind == "local_bash"
        await host.registry.wait(shell.task_id)
        stopped = await root.loop._tools.call(
            ToolCall(id="c1", name="TaskStop", input={"task_id": sleeper.task_id})
        )
        output = await root.loop._tools.call(
            ToolCall(id="c2", name="TaskOutput", input={"task_id": shell.task_id})
        )
        commands = root.queue.take()
    assert len(bash_specs) == 1 and "run_in_background" in str(bash_specs[0].input_schema)
    assert "killed" in stopped.text
    assert "status: completed" in output.text and "finished" in output.text
    texts = [c.text for c in commands]
    assert sum("<status>completed</status>" in t for t in texts) == 1
    assert sum("<status>killed</status>" in t for t in texts) == 1


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("exit", "exited with code 1"),
        ("oom", "memory cap exceeded"),
        ("hang", "idle watchdog"),
    ],
)
async def test_scripted_faults_really_happen_and_are_named(
    tmp_path: Path, fault: str, reason: str
) -> None:
    """A scripted fault crashes the real worker; the parent gets a failure naming why."""
    from protocol import ResourceLimits

    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("victim", "x")]}, {"text": "{{tool_result}}"}],
            "victim": [{"fault": fault}],
        },
    )
    # Only the hang waits for the idle watchdog: on a loaded machine, filling 200 MB can take
    # longer than its half second, and the watchdog must not win the race for the others.
    limits = ResourceLimits(memory_mb=200, idle_timeout_s=0.5 if fault == "hang" else 60)
    async with subvisor(home_for(tmp_path), subagent_limits=limits) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
    assert record.status == "failed"
    assert reason in (record.worker_exit or "")
    assert reason in outcome.text


async def test_session_rules_reach_the_root_and_its_children(tmp_path: Path) -> None:
    """S-POL-2: a configured deny holds in the root and, inherited, in every child."""
    rm = {"name": "Bash", "input": {"command": "rm -f important.txt"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [rm, agent_call("cleaner", "clean up")]},
                {"text": "{{tool_result}}"},
            ],
            "cleaner": [{"tool_calls": [rm]}, {"text": "child: {{tool_result}}"}],
        },
    )
    (tmp_path / "important.txt").write_text("keep me")
    rules = {"*": "allow", "bash": {"*": "allow", "rm *": "deny"}}
    async with subvisor(home_for(tmp_path), permission=rules) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [child] = host.registry.list(root.session_id)
        denied = [
            e
            for e in host.store.events(child.child_session_id or "")
            if e.name == "PermissionDenied"
        ]
    assert (tmp_path / "important.txt").read_text() == "keep me"
    assert outcome.text.count("permission denied: bash 'rm -f important.txt' is denied") == 2
    assert len(denied) == 1


async def test_task_deny_hides_an_agent_type(tmp_path: Path) -> None:
    """S-TOOL-4: an agent whose task permission is deny is not listed and cannot launch."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("look", "x", subagent_type="Explore")]},
                {"text": "{{tool_result}}"},
            ]
        },
    )
    rules = {"*": "allow", "task": {"*": "allow", "Explore": "deny"}}
    async with subvisor(home_for(tmp_path), permission=rules) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        description = root.agent_tool.spec.description
        outcome = await root.run("go")
        launched = host.registry.list(root.session_id)
    assert "- Explore:" not in description and "- general-purpose:" in description
    assert "permission denied: task 'Explore' is denied" in outcome.text
    assert launched == []


#: A Bash barrier: each child marks itself, then waits (a bounded while, only against a
#: hang) until all three have, and prints how many it saw.
_BARRIER = (
    "mkdir -p barrier && touch barrier/{name} && for i in $(seq 400); do "
    '[ "$(ls barrier | wc -l)" -ge 3 ] && break; sleep 0.05; done; ls barrier | wc -l'
)


async def test_parallel_agent_calls_of_one_message_overlap_on_real_workers(
    tmp_path: Path,
) -> None:
    """S-TOOL-3 (concurrency-safe): three Agent calls of one message run at once, each in
    its own worker: each child's Bash sees all three alive before any ends, and the last
    launch starts before the first one ends (run one after another, the first would see
    itself alone and end before the next started)."""
    names = ("one", "two", "three")
    children = {
        name: [
            {"tool_calls": [{"name": "Bash", "input": {"command": _BARRIER.format(name=name)}}]},
            {"text": f"{name} saw {{{{tool_result}}}}"},
        ]
        for name in names
    }
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call(name, "wait for the others") for name in names]},
                {"text": "{{tool_result}}"},
            ],
            **children,
        },
    )
    async with subvisor(home_for(tmp_path), permission={"*": "allow"}) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        records = host.registry.list(root.session_id)
    assert sorted(r.description for r in records) == sorted(names)
    assert all(r.status == "completed" for r in records), [r.error for r in records]
    assert {(r.result or "").strip() for r in records} == {f"{name} saw 3" for name in names}
    ended = [r.ended_at for r in records]
    assert None not in ended
    assert max(r.created_at for r in records) < min(e for e in ended if e is not None)


async def test_the_agent_tool_never_asks_for_approval(tmp_path: Path) -> None:
    """S-TOOL-3 (no approval): under rules that make every tool ask, with nobody to
    approve, each other tool is refused (the root's Read and the child's own Read) but the
    Agent call runs: launching asks no one, the child's own calls are what is checked."""
    project = readme_project(tmp_path)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [READ_README]},
                {"tool_calls": [agent_call("reader", "read the README")]},
                {"text": "{{tool_result}}"},
            ],
            "reader": [{"tool_calls": [READ_README]}, {"text": "child: {{tool_result}}"}],
        },
    )
    async with subvisor(home_for(tmp_path), permission={"*": "ask"}) as host:
        root = RootSession(host, model=model, cwd=project)
        outcome = await root.run("go")
        [child] = host.registry.list(root.session_id)
        root_denied = [
            e.data for e in host.store.events(root.session_id) if e.name == "PermissionDenied"
        ]
        child_denied = [
            e.data
            for e in host.store.events(child.child_session_id or "")
            if e.name == "PermissionDenied"
        ]
    assert child.status == "completed", child.error
    assert "child: Error: permission denied: read '" in outcome.text
    # The child's text reaches the root escaped (S-NOTE-1): its "->" reads "-&gt;".
    assert "is set to ask by the rule * '*' -&gt; ask; nobody can approve" in outcome.text
    # The root's own Read, and the child's (mirrored to the parent: S-APR-2); no Agent.
    assert [(d["tool"], d["origin"]) for d in root_denied] == [
        ("Read", "root"),
        ("Read", "subagent"),
    ]
    assert [d["tool"] for d in child_denied] == ["Read"]


async def test_subagent_depth_zero_removes_the_agent_tool(tmp_path: Path) -> None:
    """S-POL-4: subagent_depth = 0 disables delegation."""
    model = write_scenario(tmp_path / "s.yaml", {"root": [{"text": "alone"}]})
    async with subvisor(home_for(tmp_path), subagent_depth=0) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        names = [spec.name for spec in root.loop._tools.specs]
    assert "Agent" not in names and "Read" in names


async def test_plan_mode_parent_keeps_children_read_only(tmp_path: Path) -> None:
    """S-POL-3: a plan-mode session's children cannot write either."""
    write = {"name": "Write", "input": {"file_path": "new.txt", "content": "x"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("writer", "write")]}, {"text": "{{tool_result}}"}],
            "writer": [{"tool_calls": [write]}, {"text": "child: {{tool_result}}"}],
        },
    )
    async with subvisor(home_for(tmp_path), permission_mode="plan") as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
    assert not (tmp_path / "new.txt").exists()
    assert "permission denied: edit 'new.txt'" in outcome.text


async def test_project_profiles_shape_the_child(tmp_path: Path) -> None:
    """S-PROF-2/3/5/8: a Claude Code project profile sets the child's prompt, tools and memory;
    a broken profile fails only when asked for, with its parse error."""
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "auditor.md").write_text(
        "---\nname: auditor\ndescription: Audits code\ntools: Read, Grep\n"
        "model: sonnet\nmemory: project\n---\nYou audit code carefully.\n"
    )
    (agents / "broken.md").write_text("---\nname: broken\ndescription: [oops\n---\nx\n")
    memory = tmp_path / ".subvisor" / "agent-memory" / "auditor"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("- [style](style.md): prefer small functions\n")
    write = {"name": "Write", "input": {"file_path": "x.txt", "content": "x"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("audit", "audit it", subagent_type="Auditor"),
                        agent_call("fix", "fix it", subagent_type="broken"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "audit": [{"tool_calls": [write]}, {"text": "auditor: {{tool_result}}"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [run] = host.runs.values()
    assert run.launch.subagent_type == "auditor"
    # Listed tools, plus Write and Edit for its memory (S-PROF-8)...
    assert set(run.launch.tools) == {"Read", "Grep", "Write", "Edit"}
    assert "You audit code carefully." in run.launch.system
    assert "prefer small functions" in run.launch.system
    # ...and "sonnet" means: inherit the parent's model (S-PROF-6).
    assert run.launch.model == root.model
    assert (tmp_path / "x.txt").read_text() == "x"
    assert "broken" in outcome.text and "invalid YAML" in outcome.text


@pytest.mark.parametrize(
    ("profile_model", "error"),
    [
        ("claude-4-sonnet", "has no provider part"),
        ("nosuch/model-x", "unknown model provider 'nosuch'"),
    ],
)
async def test_an_unresolvable_profile_model_fails_the_launch(
    tmp_path: Path, profile_model: str, error: str
) -> None:
    """S-MODEL-1: an explicit model that cannot be resolved never falls back to the parent's."""
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "pinned.md").write_text(
        f"---\nname: pinned\ndescription: Pinned\nmodel: {profile_model}\n---\nGo.\n"
    )
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("p", "x", subagent_type="pinned")]},
                {"text": "{{tool_result}}"},
            ]
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        assert host.registry.list(root.session_id) == []
    assert error in outcome.text


async def test_one_shot_model_override_wins(tmp_path: Path) -> None:
    """S-MODEL-1: a harness's one-shot override beats the profile and the parent model."""
    child = write_scenario(tmp_path / "child.yaml", {"default": [{"text": "from the override"}]})
    root_model = write_scenario(tmp_path / "root.yaml", {"root": [{"text": "unused"}]})
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=root_model, cwd=tmp_path)
        result = await root.agent_tool.invoke({"description": "d", "prompt": "p"}, model=child)
        [record] = host.registry.list(root.session_id)
    assert "from the override" in result.text
    assert record.model == child


async def test_project_permission_mode_is_refused_again_at_assembly(tmp_path: Path) -> None:
    """S-PROF-4: even a profile that slipped past the parser is refused when the child is built."""
    from supervisor.profiles._builtin_profiles import BUILTIN_PROFILES
    from supervisor.profiles._profile import AgentProfile
    from supervisor.profiles._profile_catalog import ProfileCatalog, ProfileEntry

    # model_copy skips validation: the way a profile could dodge the parse-time check.
    sneaky = AgentProfile(
        name="sneaky", description="d", prompt="p", scope="user", permission_mode="bypass"
    ).model_copy(update={"scope": "project", "source": "repo/.claude/agents/sneaky.md"})
    catalog = ProfileCatalog(
        [
            *(
                ProfileEntry(name=n, source="built-in", scope="built-in", profile=p)
                for n, p in BUILTIN_PROFILES.items()
            ),
            ProfileEntry(name="sneaky", source=sneaky.source, scope="project", profile=sneaky),
        ]
    )
    model = write_scenario(tmp_path / "s.yaml", {"root": [{"text": "unused"}]})
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, catalog=catalog)
        result = await root.agent_tool.invoke(
            {"description": "d", "prompt": "p", "subagent_type": "sneaky"}
        )
        assert host.registry.list(root.session_id) == []
    assert result.is_error and "project profile that sets permissionMode" in result.text


async def test_auto_background_moves_a_slow_foreground_child(tmp_path: Path) -> None:
    """S-RUN-5: after auto_background_ms the parent's turn goes on; the end is a notification."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("slow", "x")]},
                {"text": "moved on: {{tool_result}}"},
                {"text": "got the notification"},
            ],
            "slow": [{"text": "slow answer", "latency_ms": 800}],
        },
    )
    async with subvisor(home_for(tmp_path), auto_background_ms=100) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
        messages = [m.content for m in root.loop.messages]
    assert outcome.text == "got the notification"
    assert any("moved on: async_launched" in m for m in messages)
    assert sum("<result>slow answer</result>" in m for m in messages) == 1
    assert record.background and record.status == "completed" and record.notified


async def test_explicit_move_to_background(tmp_path: Path) -> None:
    """S-RUN-5: a library call moves a running foreground child; a parent abort then spares it."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("slow", "x")]}, {"text": "{{tool_result}}"}],
            "slow": [{"text": "done late", "latency_ms": 600}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.ask, "go")
            while not host.runs:  # noqa: ASYNC110 (the run does not exist yet)
                await trio.sleep(0.01)
            [run] = host.runs.values()
            await run.ready.wait()
            assert host.move_to_background(run.task_id)
            assert not host.move_to_background(run.task_id)  # already there
        await run.done.wait()
        assert host.registry.get(run.task_id).status == "completed"  # type: ignore[union-attr]
        assert "async_launched" in root.loop.messages[2].content


async def _send(root: RootSession, to: str, message: str) -> str:
    output = await root.loop._tools.call(
        ToolCall(id="send", name="SendMessage", input={"to": to, "message": message})
    )
    assert not output.is_error, output.text
    return output.text


async def test_send_message_steers_queues_and_resumes(tmp_path: Path) -> None:
    """S-MSG-1: running -> delivered into its turn; not started -> queued; finished -> resumed."""
    sleepy = {"name": "Bash", "input": {"command": "sleep 0.5"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"text": "unused"}],
            "busy": [{"tool_calls": [sleepy]}, {"text": "busy done"}, {"text": "busy again"}],
            "waiting": [{"text": "waiting done"}],
        },
    )
    async with subvisor(home_for(tmp_path), max_concurrent_subagents=1) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        tool = root.agent_tool
        await tool.invoke({"description": "busy", "prompt": "work", "run_in_background": True})
        [busy] = host.runs.values()
        # The only worker slot is taken: the next agent waits to start.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                tool.invoke,
                {"description": "waiting", "prompt": "wait", "run_in_background": True},
            )
            while len(host.runs) < 2:  # noqa: ASYNC110 (the run does not exist yet)
                await trio.sleep(0.01)
            waiting = next(r for r in host.runs.values() if r is not busy)
            assert (await _send(root, waiting.task_id, "first note")).startswith("queued")
            assert (await _send(root, busy.task_id, "also check X")).startswith("delivered")
        await busy.done.wait()
        await waiting.done.wait()
        resumed = await _send(root, busy.task_id, "one more thing")
        assert resumed.startswith("resumed_background")
        third = next(r for r in host.runs.values() if r not in (busy, waiting))
        await third.done.wait()
        busy_log = host.store.messages(busy.launch.child_session_id)
        waiting_log = host.store.messages(waiting.launch.child_session_id)
        third_log = host.store.messages(third.launch.child_session_id)
        notified = [c.task_id for c in root.queue.take()]
    assert any("also check X" in m.content and "Address this" in m.content for m in busy_log)
    assert any("first note" in m.content for m in waiting_log)
    # The resumed agent continues its conversation with the new message.
    # S-MSG-3 coordinator_input: the new turn says who sent it.
    resumed_prompt, answer = (m.content for m in third_log[-2:])
    assert "one more thing" in resumed_prompt and "<coordinator-message>" in resumed_prompt
    assert answer == "busy again"
    assert third.task_id in notified


async def test_respond_to_coordinator_and_mirrored_tool_events(tmp_path: Path) -> None:
    """S-MSG-2/3: a child's message reaches the root as a subagent-message turn, framed for a
    peer; S-APR-2: the child's tool calls show in the parent's events under its id."""
    reply = {"name": "RespondToCoordinator", "input": {"message": "halfway: found 3 files"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("scout", "scout", run_in_background=True)]},
                {"text": "waiting"},
                {"text": "noted"},
                {"text": "all done"},
            ],
            "scout": [
                {"tool_calls": [reply, {"name": "LS", "input": {"path": "."}}]},
                {"text": "scouted", "latency_ms": 300},
            ],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        parent_events = host.store.events(root.session_id)
        turns = [m.content for m in root.loop.messages if m.role == "user"]
    message_turn = next(t for t in turns if "<subagent-message" in t)
    assert f'<subagent-message from="{record.task_id}">' in message_turn
    assert "halfway: found 3 files" in message_turn
    assert "permission laundering" in message_turn
    mirrored = [e for e in parent_events if e.data.get("source") == "subagent"]
    assert {e.data["name"] for e in mirrored} == {"RespondToCoordinator", "LS"}
    assert all(e.data["call_id"].startswith(f"tool_subagent_{record.task_id}_") for e in mirrored)


async def test_user_steer_joins_the_running_root_turn(tmp_path: Path) -> None:
    """S-MSG-3 user_steer: a harness's user message reaches the root between its steps."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 0.3"}}]},
                {"text": "ok"},
            ]
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.run, "go")
            await trio.sleep(0.1)
            root.steer("use the staging branch")
        contents = [m.content for m in root.loop.messages if m.role == "user"]
    assert contents[1] == "The user sent this while you were working:\nuse the staging branch"


async def test_max_subagents_per_session_fails_further_launches(tmp_path: Path) -> None:
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call(f"a{i}", "x") for i in range(3)]},
                {"text": "{{tool_result}}"},
            ],
            "default": [{"text": "ok"}],
        },
    )
    async with subvisor(home_for(tmp_path), max_subagents_per_session=2) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        launched = host.registry.list(root.session_id)
    # The calls are planned in the order the model made them: the last one is refused.
    assert [r.description for r in launched] == ["a0", "a1"]
    assert "already launched 2 subagents, its max_subagents_per_session" in outcome.text


async def test_launches_past_max_concurrent_subagents_start_in_call_order(tmp_path: Path) -> None:
    """max_concurrent_subagents: extra launches wait, and start in the order the model made them.

    The Agent calls of one message run as concurrent tasks, which trio starts
    in either order; the launch order must not depend on that.
    """
    calls = [agent_call(f"job {i}", f"do job {i}", run_in_background=i % 2 == 1) for i in range(10)]
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": calls}, {"text": "done"}]
            + [{"text": f"noted {n}"} for n in range(10)],
            "default": [{"text": "ok"}],
        },
    )
    async with subvisor(home_for(tmp_path), max_concurrent_subagents=1) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        runs = [host.runs[r.task_id] for r in host.registry.list(root.session_id)]
        with trio.fail_after(30):
            for run in runs:
                await run.done.wait()
        assert host.launch_order(root.session_id).waiting_behind == 0
    started = sorted(runs, key=lambda run: run.ready_at or 0.0)
    assert [run.launch.description for run in started] == [f"job {i}" for i in range(10)]


async def test_launch_order_skips_tickets_given_up_and_passes_once() -> None:
    """LaunchOrder: a ticket given up early never holds later ones back."""
    from supervisor.delegation._launch_order import LaunchOrder

    order = LaunchOrder()
    first, second, third = order.ticket(), order.ticket(), order.ticket()
    entered: list[int] = []

    async def queue(ticket: int) -> None:
        await order.wait_turn(ticket)
        entered.append(ticket)
        order.pass_turn(ticket)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue, third)
        nursery.start_soon(queue, first)
        await trio.testing.wait_all_tasks_blocked()
        assert entered == [first]  # third waits for second
        order.pass_turn(second)  # its launch failed before queueing
        order.pass_turn(second)  # and is passed again on another path: no effect
    assert entered == [first, third]
    assert order.waiting_behind == 0


async def test_s_run_2_every_event_a_child_sent_before_it_answered_is_recorded(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-RUN-2: the child session and the record hold every tool event the worker sent before
    its answer, though the answer can wake the run before its recorder has taken them all.

    Here the last turn has 1000 tool calls and maxTurns ends the run right after them, and
    the recorder gives the loop back after every event (its time slice is made 0), so the
    answer comes while hundreds are still queued."""
    monkeypatch.setattr(subagents, "_RECORD_SLICE_SECONDS", 0.0)
    reads = [{"name": "Read", "input": {"file_path": f"module_{i % 8}.py"}} for i in range(1000)]
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call(f"reader {n}", "read all") for n in range(3)]},
                {"text": "done"},
            ],
            **{f"reader {n}": [{"tool_calls": reads}] for n in range(3)},
        },
    )
    async with subvisor(home_for(tmp_path), max_turns=1) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        records = host.registry.list(root.session_id)
        events = {r.task_id: host.store.events(r.child_session_id or "") for r in records}
    assert len(records) == 3
    for record in records:
        assert record.status == "completed", record.error
        assert record.usage.tool_calls == 1000
        names = [e.name for e in events[record.task_id]]
        assert names.count("tool.started") == names.count("tool.finished") == 1000
