"""A hostile worker's model calls: the supervisor, which pays for them, keeps the limits.

S-PROF-7 (maxTurns really limits a child's model turns), S-SEC-8 (one worker
cannot take without bound) and S-SEC-3 (a subagent cannot lift limits): the
turn limit, one call at a time, the accounting of every call sent, and the
sampling knobs are the supervisor's, whatever the worker sends.

Real workers run against the real local provider server. A worker turns
hostile at the protocol level in one of two ways: it is told to run beyond
what the supervisor decided (``agent.run`` rewritten on its way to the
worker: a larger ``max_turns``, or two runs at once, so the real agent loop
makes calls the supervisor never asked for), or its ``model.call`` frames
carry what an honest worker never sends (rewritten where the supervisor
receives them, before its request server).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol import AGENT_RUN, ModelCallRequest, WorkerRequest
from supervisor import RootSession, Subvisor, SubvisorSettings, WorkerHandle
from supervisor.delegation._agent_requests import AgentRequestPolicy, AgentRequestServer
from supervisor.kernel._errors import WorkerRequestError
from tests.support.delegation import agent_call, home_for, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer


def _answer(*, tool_call: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "still looking"}
    if tool_call:
        message["tool_calls"] = [
            {
                "id": "call_ls",
                "type": "function",
                "function": {"name": "LS", "arguments": json.dumps({"path": "."})},
            }
        ]
    return {
        "choices": [{"message": message, "finish_reason": "tool_calls" if tool_call else "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


def _held(hold: threading.Event) -> CannedResponse:
    """An answer the server sends only once the test sets ``hold``."""
    return CannedResponse(
        headers={"content-type": "application/json"},
        chunks=(json.dumps(_answer()).encode(),),
        holds=((0, hold),),
    )


def _settings(tmp_path: Path, server: ProviderServer, **extra: Any) -> SubvisorSettings:
    return SubvisorSettings.model_validate(
        {
            "home": home_for(tmp_path),
            "gateway": {
                "providers": {
                    "openai": {"api": "openai", "base_url": server.base_url, "streaming": False}
                }
            },
            **extra,
        }
    )


def _root(host: Subvisor, tmp_path: Path, model: str) -> RootSession:
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("child", "look around")]},
                {"text": "{{tool_result}}"},
            ]
        },
    )
    root = RootSession(host, model=scenario, cwd=tmp_path)
    # The child runs on the HTTP provider; the root stays scripted.
    root.agent_tool._current_model = lambda: model  # type: ignore[method-assign]
    return root


AgentRunRewrite = Callable[[WorkerHandle, Any, Any], Any]


def _rewrite_agent_run(monkeypatch: pytest.MonkeyPatch, rewrite: AgentRunRewrite) -> None:
    """Send every ``agent.run`` through ``rewrite(handle, send, spec)`` on its way to the worker."""
    original = WorkerHandle.request

    async def request(self: WorkerHandle, method: Any, params: Any) -> Any:
        if method is not AGENT_RUN:
            return await original(self, method, params)

        async def send(spec: Any) -> Any:
            return await original(self, method, spec)

        return await rewrite(self, send, params)

    monkeypatch.setattr(WorkerHandle, "request", request)


async def test_s_prof_7_a_worker_past_its_max_turns_gets_no_more_model_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-PROF-7, S-SEC-8: a worker that ignores max_turns = 2 has its third call refused.

    Its agent loop is told it may take 6 turns and the model always asks for a
    tool: the provider still sees 2 calls, the record counts 2, and the run
    fails saying why.
    """
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-KEY")

    async def more_turns(_: WorkerHandle, send: Any, spec: Any) -> Any:
        return await send(spec.model_copy(update={"max_turns": 6}))

    _rewrite_agent_run(monkeypatch, more_turns)
    with ProviderServer() as server:
        server.enqueue(*(CannedResponse.json(_answer(tool_call=True)) for _ in range(6)))
        async with Subvisor(_settings(tmp_path, server, max_turns=2)) as host:
            root = _root(host, tmp_path, "openai:gpt-test")
            await root.run("go")
            [record] = host.registry.list(root.session_id)
        sent = len(server.requests)
    assert sent == 2
    assert record.usage.model_calls == 2
    assert record.status == "failed" and record.error is not None
    assert "max_turns" in record.error


async def test_s_sec_8_a_worker_gets_one_model_call_in_flight_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-8, S-PROF-7: a second model call while the first is in flight is refused.

    The worker runs two agent loops at once; the first call is held at the
    provider until the second loop has ended: it ended refused, and the
    provider never saw its call.
    """
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-KEY")
    hold = threading.Event()
    ended: list[BaseException | None] = []

    async def twice(_: WorkerHandle, send: Any, spec: Any) -> Any:
        outcomes: list[Any] = []

        async def one() -> None:
            try:
                outcomes.append(await send(spec))
                ended.append(None)
            except WorkerRequestError as exc:
                ended.append(exc)
            if len(ended) == 1:
                hold.set()  # the first loop to end lets the held answer go

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
        return outcomes[0]

    _rewrite_agent_run(monkeypatch, twice)
    with ProviderServer() as server:
        try:
            server.enqueue(_held(hold), CannedResponse.json(_answer()))
            async with Subvisor(_settings(tmp_path, server)) as host:
                root = _root(host, tmp_path, "openai:gpt-test")
                await root.run("go")
                [record] = host.registry.list(root.session_id)
        finally:
            hold.set()
        sent = len(server.requests)
    refused = [exc for exc in ended if exc is not None]
    assert len(refused) == 1, ended
    assert isinstance(refused[0], WorkerRequestError)
    assert refused[0].code == "model_call_in_flight"
    assert sent == 1
    assert record.usage.model_calls == 1


async def test_s_sec_8_a_model_call_cut_off_by_the_workers_exit_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-8: a call the provider got counts, though the worker ended before its answer."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-KEY")
    hold = threading.Event()
    with ProviderServer() as server:
        try:
            server.enqueue(_held(hold))
            async with Subvisor(_settings(tmp_path, server)) as host:
                root = _root(host, tmp_path, "openai:gpt-test")
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(root.run, "go")
                    while not server.requests:  # noqa: ASYNC110 (the server's thread)
                        await trio.sleep(0.01)
                    [run] = host.runs.values()
                    assert run.handle is not None
                    await run.handle.kill("the worker exits mid-call")
                [record] = host.registry.list(root.session_id)
        finally:
            hold.set()
    assert record.status == "failed"
    assert record.usage.model_calls == 1


async def test_s_sec_3_a_workers_effort_max_tokens_and_temperature_never_reach_the_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3, S-MODEL-1: the effort is the user's model string's, max_tokens is capped.

    The worker's ``model.call`` asks for effort xhigh, 200000 tokens and a
    temperature; the user chose ``openai:gpt-test$low``.
    """
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-KEY")
    original = AgentRequestServer.serve

    async def serve(
        self: AgentRequestServer,
        policy: AgentRequestPolicy,
        handle: WorkerHandle,
        request: WorkerRequest,
    ) -> Any:
        if isinstance(request, ModelCallRequest):
            asked = request.params.model_copy(
                update={"effort": "xhigh", "max_tokens": 200_000, "temperature": 1.7}
            )
            request = request.model_copy(update={"params": asked})
        return await original(self, policy, handle, request)

    monkeypatch.setattr(AgentRequestServer, "serve", serve)
    with ProviderServer() as server:
        server.enqueue(CannedResponse.json(_answer()))
        async with Subvisor(_settings(tmp_path, server)) as host:
            await _root(host, tmp_path, "openai:gpt-test$low").run("go")
        [sent] = server.requests
    body = sent.json()
    assert body["reasoning_effort"] == "low"
    assert body["max_tokens"] == 4096
    assert "temperature" not in body


async def test_s_prof_7_a_workflow_actors_worker_past_its_max_turns_gets_no_more_model_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-PROF-7, S-ACT-1: an actor's worker ignoring max_turns = 2 has its third call refused."""
    from supervisor.state._paths import database_path
    from supervisor.workflow import WorkflowJournal, run_workflow

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-KEY")

    async def more_turns(_: WorkerHandle, send: Any, spec: Any) -> Any:
        return await send(spec.model_copy(update={"max_turns": 6}))

    _rewrite_agent_run(monkeypatch, more_turns)
    script = tmp_path / "look.py"
    script.write_text(
        "from supervisor.workflow import agent, workflow\n\n"
        "@workflow\n"
        "async def look(ctx):\n"
        "    looker = agent('looker', system='You look around.', max_turns=2)\n"
        "    try:\n"
        "        return await looker.ask('Look around.')\n"
        "    except Exception as exc:\n"
        "        return f'failed: {exc}'\n"
    )
    home = home_for(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    with ProviderServer() as server:
        server.enqueue(*(CannedResponse.json(_answer(tool_call=True)) for _ in range(6)))
        async with Subvisor(_settings(tmp_path, server)) as host:
            with WorkflowJournal(database_path(home)) as journal:
                outcome = await run_workflow(
                    host, script, journal=journal, parent_model="openai:gpt-test", cwd=project
                )
                [ask] = journal.asks(outcome.run_id)
        sent = len(server.requests)
    assert str(outcome.value).startswith("failed:")
    assert sent == 2, outcome.value
    assert (ask.status, ask.model_calls) == ("failed", 2)


async def test_s_act_1_an_ask_cancelled_mid_model_call_leaves_the_next_ask_its_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-ACT-1, S-SEC-8: a script cancels an ask while its model call is held at the
    provider; that call is cancelled with the ask (a worker cannot cancel its own
    request), so the next ask of the same actor gets its call and its answer."""
    from supervisor.state._paths import database_path
    from supervisor.workflow import WorkflowJournal, run_workflow

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-KEY")
    go = tmp_path / "first-call-sent"
    script = tmp_path / "twice.py"
    script.write_text(
        "import os\n\n"
        "import trio\n\n"
        "from supervisor.workflow import agent, workflow\n\n"
        "@workflow\n"
        "async def twice(ctx):\n"
        "    looker = agent('looker', system='You look around.', max_turns=2)\n\n"
        "    async def first(scope):\n"
        "        await looker.ask('Look around.')\n\n"
        "    with trio.CancelScope() as scope:\n"
        "        async with trio.open_nursery() as nursery:\n"
        "            nursery.start_soon(first, scope)\n"
        f"            while not os.path.exists({str(go)!r}):\n"
        "                await trio.sleep(0.01)\n"
        "            scope.cancel()\n"
        "    return await looker.ask('Look again.')\n"
    )
    hold = threading.Event()
    home = home_for(tmp_path)
    project = tmp_path / "project"
    project.mkdir()

    async def when_first_call_sent(server: ProviderServer) -> None:
        # The server's thread appends each request it got: there is no event to wait on.
        while not server.requests:  # noqa: ASYNC110
            await trio.sleep(0.01)
        go.touch()

    with ProviderServer() as server:
        try:
            server.enqueue(_held(hold), CannedResponse.json(_answer()))
            async with Subvisor(_settings(tmp_path, server)) as host:
                with WorkflowJournal(database_path(home)) as journal:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(when_first_call_sent, server)
                        outcome = await run_workflow(
                            host,
                            script,
                            journal=journal,
                            parent_model="openai:gpt-test",
                            cwd=project,
                        )
        finally:
            hold.set()
        sent = len(server.requests)
    assert outcome.value == "still looking", outcome.value
    assert sent == 2
