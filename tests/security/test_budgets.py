"""S-SEC-8 Budgets: one worker cannot grow the store or the supervisor's memory without bound.

Real workers flood for real: the kernel's ``flood`` command, and a subagent
whose scripted turn orders the ``flood`` fault (valid transcript messages and
tool events, as fast as the pipe takes them, forever). Each is stopped with
"event budget exceeded", and what the store holds for it stays within the
budget; a normal run under the same budget is untouched.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import trio

from protocol import (
    KERNEL_ECHO,
    KERNEL_FLOOD,
    KERNEL_FORBIDDEN,
    MAX_JSON_CONTAINERS,
    EchoParams,
    FloodItem,
    FloodParams,
    ForbiddenFrame,
    ForbiddenParams,
    ResourceLimits,
)
from supervisor import (
    EventBudgetLimits,
    ExitKind,
    RootSession,
    Supervisor,
    SupervisorConfig,
    WorkerExitedError,
)
from supervisor.state._paths import database_path
from supervisor.state._task_record import TaskRecord
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

_MB = 1024 * 1024
#: A safety net only: a flood the budget failed to stop ends here, as a wall timeout.
_WALL = ResourceLimits(memory_mb=1024, idle_timeout_s=30, wall_timeout_s=120)


async def test_s_sec_8_a_worker_flooding_events_is_stopped_for_its_budget() -> None:
    """S-SEC-8: a real worker writing events past its budget is stopped, and the exit says so."""
    config = SupervisorConfig(event_budget=EventBudgetLimits(max_events=1000))
    async with Supervisor(config) as sup:
        handle = await sup.spawn()
        received = 0
        async with trio.open_nursery() as nursery:

            async def consume() -> None:
                nonlocal received
                async for _ in handle.events():
                    received += 1

            nursery.start_soon(consume)
            with pytest.raises(WorkerExitedError) as raised:
                await handle.request(KERNEL_FLOOD, FloodParams(count=1_000_000, size=64))
        exit = raised.value.exit
        assert exit.kind is ExitKind.EVENT_BUDGET
        assert exit.reason.startswith("event budget exceeded: 1000 events / 64 MB")
        assert received == 1000  # not one event past the budget reached a consumer


async def test_s_sec_8_control_a_flood_within_the_budget_is_delivered_whole() -> None:
    """Control: the same worker and budget, a flood below it: every event arrives, the
    worker lives on."""
    config = SupervisorConfig(event_budget=EventBudgetLimits(max_events=1000))
    async with Supervisor(config) as sup:
        handle = await sup.spawn()
        seen: list[int] = []
        async with trio.open_nursery() as nursery:

            async def consume() -> None:
                async for event in handle.events():
                    assert isinstance(event.data, FloodItem)
                    seen.append(event.data.seq)

            nursery.start_soon(consume)
            assert (
                await handle.request(KERNEL_FLOOD, FloodParams(count=999, size=64))
            ).count == 999
            assert (await handle.request(KERNEL_ECHO, EchoParams(value="alive"))).value == "alive"
            await handle.shutdown()
        assert seen == list(range(999))


def _stored_bytes(home: Path, session_id: str) -> int:
    """The text stored for one session: its events and its transcript."""
    with sqlite3.connect(database_path(home)) as db:
        events = db.execute(
            "SELECT COALESCE(SUM(length(name) + length(data)), 0) FROM events WHERE session_id = ?",
            (session_id,),
        ).fetchone()[0]
        messages = db.execute(
            "SELECT COALESCE(SUM(length(message)), 0) FROM messages WHERE session_id = ?",
            (session_id,),
        ).fetchone()[0]
    return int(events) + int(messages)


def _files_size(home: Path) -> int:
    db = database_path(home)
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


async def _delegate(
    tmp_path: Path, turns: list[dict[str, object]], **settings: object
) -> TaskRecord:
    """A root that delegates once to ``worker``, whose turns are ``turns``; its record."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [{"tool_calls": [agent_call("worker", "go")]}, {"text": "{{tool_result}}"}],
            "worker": turns,
        },
    )
    async with subvisor(home_for(tmp_path), subagent_limits=_WALL, **settings) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
    return record


@pytest.mark.parametrize("max_event_mb", [2.0, None], ids=["2MB", "default"])
async def test_s_sec_8_a_subagent_flooding_its_transcript_is_stopped_and_the_store_bounded(
    tmp_path: Path, max_event_mb: float | None
) -> None:
    """S-SEC-8: a subagent's worker that floods valid transcript messages and tool events
    (16 KB of model text or tool output each) is stopped with "event budget exceeded";
    the store holds no more than the budget for it, and the parent goes on (also with the
    default budget, 64 MB)."""
    limits = EventBudgetLimits() if max_event_mb is None else EventBudgetLimits(max_event_mb=2)
    record = await _delegate(tmp_path, [{"fault": "flood"}], event_budget=limits)
    assert record.status == "failed"
    assert record.worker_exit is not None
    assert record.worker_exit.startswith(f"event budget exceeded: {limits.describe()}")
    assert record.error is not None and "event budget exceeded" in record.error
    assert record.child_session_id is not None
    budget = int(limits.max_event_mb * _MB)
    child = _stored_bytes(home_for(tmp_path), record.child_session_id)
    mirrored = _stored_bytes(home_for(tmp_path), record.parent_session_id)
    # Something was recorded (it flooded), and no more than the budget (one worker's share
    # of the parent's timeline included).
    assert budget // 2 < child + mirrored <= budget
    # The files: the budget, plus what SQLite keeps besides (pages, indexes, the WAL).
    assert _files_size(home_for(tmp_path)) < 3 * budget + 16 * _MB


async def test_s_sec_8_a_subagent_flooding_its_coordinator_is_stopped(tmp_path: Path) -> None:
    """S-SEC-8: a subagent sending 5 MB of messages to its coordinator under a 2 MB budget
    is stopped, and the parent's transcript (where they would end up, after waiting in the
    supervisor's memory) does not hold them: each call's tool event and each queued
    message are charged to the worker's budget."""
    big = "y" * (100 * 1024)
    calls = [{"name": "RespondToCoordinator", "input": {"message": big}} for _ in range(50)]
    limits = EventBudgetLimits(max_event_mb=2)
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [{"tool_calls": [agent_call("worker", "go")]}, {"text": "done"}] * 3,
            "worker": [{"tool_calls": calls}, {"text": "sent"}],
        },
    )
    async with subvisor(home_for(tmp_path), subagent_limits=_WALL, event_budget=limits) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        delivered = sum(m.content.count("y" * 1024) for m in root.loop.messages) * 1024
    assert record.status == "failed"
    assert record.worker_exit is not None
    assert record.worker_exit.startswith("event budget exceeded: 100000 events / 2 MB")
    assert delivered <= 2 * _MB


async def test_s_sec_8_control_a_normal_subagent_under_the_same_budget_completes(
    tmp_path: Path,
) -> None:
    """Control: a subagent that works normally (Bash, a sizeable output, messages to its
    coordinator) under the 2 MB budget completes, untouched."""
    turns = [
        {
            "tool_calls": [
                {"name": "Bash", "input": {"command": "seq 1 20000"}},
                {"name": "RespondToCoordinator", "input": {"message": "halfway"}},
            ]
        },
        {"text": "counted"},
    ]
    record = await _delegate(tmp_path, turns, event_budget=EventBudgetLimits(max_event_mb=2))
    assert record.status == "completed", record.error
    assert record.worker_exit is None
    assert record.result == "counted"


async def test_s_sec_8_an_event_of_many_empty_containers_is_refused_before_it_is_recorded(
    tmp_path: Path,
) -> None:
    """S-SEC-8: a worker's tool.started whose input is 32,000 empty lists (64 KB, within
    every frame limit, but 100 ms of the supervisor's CPU to validate and record, where a
    normal event takes tens of microseconds) is a protocol violation naming
    MAX_JSON_CONTAINERS: it ends the worker, and nothing of it is recorded or delivered."""
    received: list[object] = []
    async with Supervisor() as sup:
        handle = await sup.spawn()
        async with trio.open_nursery() as nursery:

            async def consume() -> None:
                async for event in handle.events():
                    received.append(event)

            nursery.start_soon(consume)
            # A hang guard, not a measure: an accepted event would leave the worker waiting.
            with trio.fail_after(60), pytest.raises(WorkerExitedError) as raised:
                await handle.request(KERNEL_FORBIDDEN, ForbiddenParams(kind="container_event"))
    exit = raised.value.exit
    assert exit.kind is ExitKind.PROTOCOL_VIOLATION
    assert f"MAX_JSON_CONTAINERS ({MAX_JSON_CONTAINERS})" in exit.reason
    assert received == []


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("container_permission_check", "params.input"),
        ("container_mcp_call", "params.arguments"),
    ],
)
async def test_s_sec_8_a_request_of_many_empty_containers_ends_its_worker_not_a_sibling(
    kind: ForbiddenFrame, field: str
) -> None:
    """S-SEC-8: a worker's permission.check or mcp.call_tool whose JSON is 32,000 empty
    lists (64 KB, within every frame limit, but 80 ms of the supervisor's CPU to validate,
    match and serialise, again for every such frame) is a protocol violation naming
    MAX_JSON_CONTAINERS: it ends that worker, and a sibling worker is answered as before."""
    async with Supervisor() as sup:
        hostile, sibling = await sup.spawn(), await sup.spawn()
        # A hang guard, not a measure: an accepted request would leave the worker waiting.
        with trio.fail_after(60), pytest.raises(WorkerExitedError) as raised:
            await hostile.request(KERNEL_FORBIDDEN, ForbiddenParams(kind=kind))
        answer = await sibling.request(KERNEL_ECHO, EchoParams(value="still here"))
    exit = raised.value.exit
    assert exit.kind is ExitKind.PROTOCOL_VIOLATION
    assert f"{field}: " in exit.reason
    assert f"MAX_JSON_CONTAINERS ({MAX_JSON_CONTAINERS})" in exit.reason
    assert answer.value == "still here"


async def test_s_sec_8_control_a_model_input_of_many_containers_is_shown_not_refused(
    tmp_path: Path,
) -> None:
    """Control: an honest subagent whose model wrote a tool input past
    MAX_JSON_CONTAINERS completes; its transcript keeps the whole input, its timeline's
    tool.started a note of its size in place of it."""
    rows = [[index] for index in range(2 * MAX_JSON_CONTAINERS)]
    turns = [
        {"tool_calls": [{"name": "Bash", "input": {"command": "true", "rows": rows}}]},
        {"text": "done"},
    ]
    record = await _delegate(tmp_path, turns)
    assert record.status == "completed", record.error
    assert record.child_session_id is not None
    with sqlite3.connect(database_path(home_for(tmp_path))) as db:
        [started] = db.execute(
            "SELECT data FROM events WHERE session_id = ? AND name = 'tool.started'",
            (record.child_session_id,),
        ).fetchall()
        transcript = db.execute(
            "SELECT message FROM messages WHERE session_id = ?", (record.child_session_id,)
        ).fetchall()
    assert json.loads(started[0])["input"] == {
        "omitted": f"more than {MAX_JSON_CONTAINERS} JSON maps and arrays"
    }
    calls = [c for (m,) in transcript for c in json.loads(m).get("tool_calls", [])]
    assert [c["input"]["rows"] for c in calls] == [rows]


async def test_s_sec_8_control_a_model_input_past_the_bound_is_a_tool_error_not_a_violation(
    tmp_path: Path,
) -> None:
    """Control: an honest subagent whose model wrote a tool input past MAX_JSON_CONTAINERS,
    for a call the supervisor must check (a rule denies some Bash commands), is not ended:
    its worker refuses the call before asking, the model reads a tool error naming the
    bound, and the subagent completes."""
    rows = [[index] for index in range(2 * MAX_JSON_CONTAINERS)]
    call = {"name": "Bash", "input": {"command": "touch made", "rows": rows}}
    turns = [{"tool_calls": [call]}, {"text": "{{tool_result}}"}]
    rules = {"*": "allow", "bash": {"rm *": "deny"}}
    record = await _delegate(tmp_path, turns, permission=rules)
    assert record.status == "completed", record.error
    assert record.worker_exit is None
    assert record.result is not None
    assert f"MAX_JSON_CONTAINERS ({MAX_JSON_CONTAINERS})" in record.result
    assert not (tmp_path / "made").exists()
