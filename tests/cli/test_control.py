"""The control channel of a live session: a real Subvisor, real workers, a real Unix socket.

S-OBS-1 (a paged list of the session's subagents, finished ones too, refreshed on
lifecycle events), S-OBS-2 (a read-only transcript of a running child), and where
the channel is: an abstract socket named in an owner-only address file (S-SEC-2;
who may connect is tested in ``tests/security/test_control_channel.py``).
"""

from __future__ import annotations

import functools
import json
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from supervisor import RootSession, Subvisor
from supervisor.cli._control import MAX_REQUEST_BYTES, serve_control
from supervisor.cli._control_channel import (
    LiveSession,
    address_file,
    read_address_file,
    socket_address,
)
from supervisor.cli._control_client import control_request
from supervisor.cli._control_ops import CONTROL_OPS, SessionOp
from supervisor.delegation._lifecycle import LIFECYCLE_EVENTS
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
    return readme_project(tmp_path)


class Lines:
    """A raw client connection: JSON lines out, JSON lines in."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send(self, request: dict[str, Any]) -> None:
        await self.send_raw(json.dumps(request).encode() + b"\n")

    async def receive(self) -> dict[str, Any] | None:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        await self.send(request)
        reply = await self.receive()
        assert reply is not None, f"the server closed the connection on {request}"
        return reply


@asynccontextmanager
async def connect(session: LiveSession) -> AsyncIterator[Lines]:
    stream = await trio.open_unix_socket(socket_address(session.address))
    async with stream:
        yield Lines(stream)


@asynccontextmanager
async def served_session(
    tmp_path: Path, project: Path, agents: dict[str, list[dict[str, Any]]]
) -> AsyncIterator[tuple[Subvisor, RootSession, LiveSession]]:
    model = write_scenario(tmp_path / "scenario.yaml", agents)
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=project)
        async with serve_control(host, root.session_id, root=root) as session:
            yield host, root, session


def quick_agents(n: int) -> dict[str, list[dict[str, Any]]]:
    agents: dict[str, list[dict[str, Any]]] = {
        "root": [
            {"tool_calls": [agent_call(f"job {i}", f"do job {i}") for i in range(n)]},
            {"text": "all done"},
        ]
    }
    for i in range(n):
        agents[f"job {i}"] = [{"tool_calls": [READ_README]}, {"text": f"job {i} read it"}]
    return agents


def _abstract_names() -> set[str]:
    """The abstract socket names ``/proc/net/unix`` lists, ``@`` for the leading NUL."""
    with open("/proc/net/unix") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return {row[7] for row in rows if len(row) > 7 and row[7].startswith("@")}


async def test_the_address_file_is_owner_only_and_names_an_abstract_socket(
    tmp_path: Path, project: Path
) -> None:
    """S-SEC-2: the run dir is 0700 (even when it existed with looser bits), the address file
    0600 and the only trace in it; the socket is abstract (no file to connect to), its name
    random per session; both are gone with the session."""
    run_dir = home_for(tmp_path) / "run"
    run_dir.mkdir(parents=True)
    run_dir.chmod(0o755)
    async with served_session(tmp_path, project, quick_agents(0)) as (host, root, session):
        path = address_file(home_for(tmp_path), root.session_id)
        assert read_address_file(path) == session
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert [p.name for p in run_dir.iterdir()] == [path.name]
        assert session.address in _abstract_names()
        async with serve_control(host, "another_session", home=home_for(tmp_path)) as other:
            assert other.address != session.address
    assert not path.exists()  # gone with the session ...
    assert session.address not in _abstract_names()  # ... and so is its socket


async def test_list_pages_the_children_finished_ones_too(tmp_path: Path, project: Path) -> None:
    """S-OBS-1: the store's child sessions in creation order, paged; bad pages are refused."""
    async with served_session(tmp_path, project, quick_agents(5)) as (host, root, session):
        await root.run("go")
        projected = [row.session_id for row in host.store.list_child_sessions(root.session_id)]
        async with connect(session) as conn:
            first = await conn.ask({"op": "list"})
            assert first["ok"] and first["page_size"] == 20 and first["total"] == 5
            assert [a["child_session_id"] for a in first["agents"]] == projected
            pages = [await conn.ask({"op": "list", "page": n, "page_size": 2}) for n in (1, 2, 3)]
            assert [p["pages"] for p in pages] == [3, 3, 3]
            assert [len(p["agents"]) for p in pages] == [2, 2, 1]
            paged = [a["child_session_id"] for p in pages for a in p["agents"]]
            assert paged == projected
            assert all(
                a["status"] == "completed" and not a["live"] for p in pages for a in p["agents"]
            )
            row = pages[0]["agents"][0]
            assert row["turns"] == 2 and row["tool_calls"] == 1 and row["tokens"] > 0
            assert row["rss_bytes"] > 0 and row["type"] == "general-purpose"
            beyond = await conn.ask({"op": "list", "page": 4, "page_size": 2})
            assert beyond["ok"] and beyond["agents"] == [] and beyond["total"] == 5
            at_most_100 = await conn.ask({"op": "list", "page_size": 100})
            assert at_most_100["ok"] and len(at_most_100["agents"]) == 5
            for bad in ({"page_size": 101}, {"page_size": 0}, {"page": 0}, {"page": "2"}):
                reply = await conn.ask({"op": "list", **bad})
                assert not reply["ok"] and reply["code"] == "bad_request"
                assert next(iter(bad)) in reply["error"]
            too_big = await conn.ask({"op": "list", "page_size": 101})
            assert too_big["error"] == (
                "list: page_size: Input should be less than or equal to 100, not 101"
            )


async def test_subscribe_streams_lifecycle_events_never_tokens(
    tmp_path: Path, project: Path
) -> None:
    """S-OBS-1: one line per lifecycle step of every child, in order, until the client leaves."""
    async with served_session(tmp_path, project, quick_agents(2)) as (host, root, session):
        async with connect(session) as conn:
            ack = await conn.ask({"op": "subscribe"})
            assert ack["ok"] and set(ack["events"]) == LIFECYCLE_EVENTS
            await root.run("go")
            events: list[dict[str, Any]] = []
            with trio.fail_after(30):
                while sum(e["event"] == "task.ended" for e in events) < 2:
                    event = await conn.receive()
                    assert event is not None
                    events.append(event)
        records = host.registry.list(root.session_id)
        for record in records:
            mine = [e["event"] for e in events if e["agentId"] == record.task_id]
            assert mine[0] == "task.registered" and mine[1] == "task.started"
            assert mine[-1] == "task.ended"
            assert mine.count("turn.finished") == record.usage.model_calls == 2
            assert mine.count("tool.finished") == record.usage.tool_calls == 1
            assert record.child_session_id is not None
            transcript = host.store.messages(record.child_session_id)
            assert mine.count("message.appended") == len(transcript)
        assert {e["event"] for e in events} <= LIFECYCLE_EVENTS
        assert all(e["session_id"] == root.session_id for e in events)


async def test_a_subscriber_that_fell_behind_is_told_to_resync_and_misses_nothing_after(
    tmp_path: Path, project: Path
) -> None:
    """S-OBS-1: a client that stops reading is dropped by the feed rather than stall the
    supervisor; it then gets what was buffered, a ``resync``, and every event after it."""
    published = 20_000
    agents = quick_agents(0)
    async with (
        served_session(tmp_path, project, agents) as (host, root, session),
        connect(session) as conn,
    ):
        ack = await conn.ask({"op": "subscribe"})
        assert ack["ok"]
        # No checkpoint: the server forwards nothing while these are published.
        for i in range(published):
            host.lifecycle.publish("task.started", root.session_id, f"t_{i}")
        before: list[dict[str, Any]] = []
        with trio.fail_after(60):
            while (event := await conn.receive()) is not None and event["event"] != "resync":
                before.append(event)
        assert event is not None and event["session_id"] == root.session_id
        assert 0 < len(before) < published
        assert [e["agentId"] for e in before] == [f"t_{i}" for i in range(len(before))]
        host.lifecycle.publish("task.ended", root.session_id, "t_after")
        with trio.fail_after(30):
            after = await conn.receive()
        assert after is not None and after["agentId"] == "t_after"


async def test_transcript_is_read_only_and_incremental_from_a_seq(
    tmp_path: Path, project: Path
) -> None:
    """S-OBS-2: a child's messages after a seq; asking again from the last seq gives nothing."""
    async with served_session(tmp_path, project, quick_agents(1)) as (host, root, session):
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        assert record.child_session_id is not None
        stored = host.store.messages(record.child_session_id)
        async with connect(session) as conn:
            whole = await conn.ask({"op": "transcript", "task_id": record.task_id[:12]})
            assert whole["ok"] and whole["ended"] and whole["status"] == "completed"
            assert [m["seq"] for m in whole["messages"]] == list(range(1, len(stored) + 1))
            assert [m["content"] for m in whole["messages"]] == [m.content for m in stored]
            assert "# demo project" in whole["messages"][2]["content"]
            rest = await conn.ask({"op": "transcript", "task_id": record.task_id, "after_seq": 2})
            assert [m["seq"] for m in rest["messages"]] == list(range(3, len(stored) + 1))
            nothing = await conn.ask(
                {"op": "transcript", "task_id": record.task_id, "after_seq": whole["after_seq"]}
            )
            assert nothing["messages"] == [] and nothing["after_seq"] == whole["after_seq"]
        assert host.store.messages(record.child_session_id) == stored  # reading changed nothing


async def test_bad_requests_get_clear_errors_and_the_server_lives_on(
    tmp_path: Path, project: Path
) -> None:
    """Malformed lines, unknown ops and ids: an error line each, the same connection goes on."""
    async with served_session(tmp_path, project, quick_agents(0)) as (_, root, session):
        async with connect(session) as conn:
            await conn.send_raw(b"this is not json\n")
            reply = await conn.receive()
            assert reply is not None and not reply["ok"] and reply["code"] == "bad_request"
            assert "malformed request" in reply["error"] and '{"op": "list"}' in reply["error"]
            await conn.send_raw(b"[1, 2]\n")
            reply = await conn.receive()
            assert reply is not None and "JSON object" in reply["error"]
            no_op = await conn.ask({"page": 1})
            assert no_op["code"] == "unknown_op" and "has no 'op'" in no_op["error"]
            unknown = await conn.ask({"op": "frobnicate"})
            assert unknown["code"] == "unknown_op"
            assert all(op in unknown["error"] for op in CONTROL_OPS)
            for op in ("stop", "background", "transcript", "task"):
                missing = await conn.ask({"op": op, "task_id": "agent_nope"})
                assert missing["code"] == "unknown_task" and "agent_nope" in missing["error"]
            no_id = await conn.ask({"op": "stop"})
            assert no_id["code"] == "bad_request" and "task_id" in no_id["error"]
            about = await conn.ask({"op": "session"})
            assert about["ok"] and about["session_id"] == root.session_id
        async with connect(session) as conn:
            await conn.send_raw(b"x" * (MAX_REQUEST_BYTES + 10))
            reply = await conn.receive()
            assert reply is not None and "longer than" in reply["error"]
            assert await conn.receive() is None  # that connection is closed ...
        reply = await trio.to_thread.run_sync(
            functools.partial(control_request, session.address, SessionOp())
        )
        assert reply["ok"]  # ... and the server lives on


async def test_stop_over_the_socket_kills_the_running_worker(tmp_path: Path, project: Path) -> None:
    """stop: the live worker process ends and the record says why; its transcript was readable
    while it ran (S-OBS-2)."""
    agents = {
        "root": [
            {"tool_calls": [agent_call("sleeper", "wait here", run_in_background=True)]},
            {"text": "waiting"},
            {"text": "the sleeper ended"},
        ],
        "sleeper": [{"tool_calls": [READ_README]}, {"text": "never", "latency_ms": 600_000}],
    }
    async with served_session(tmp_path, project, agents) as (host, root, session):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.run, "go")
            async with connect(session) as conn:
                with trio.fail_after(60):
                    while True:  # until the sleeper has read the README and waits on its model
                        rows = (await conn.ask({"op": "list"}))["agents"]
                        if rows and rows[0]["tool_calls"] == 1:
                            break
                        await trio.sleep(0.05)
                [row] = rows
                assert row["live"] and row["status"] == "running" and row["pid"]
                transcript = await conn.ask({"op": "transcript", "task_id": row["agentId"]})
                assert not transcript["ended"]
                assert transcript["messages"][0]["content"] == "wait here"
                assert "# demo project" in transcript["messages"][2]["content"]
                worker = psutil.Process(row["pid"])
                stopped = await conn.ask({"op": "stop", "task_id": row["agentId"]})
                assert stopped == {"ok": True, "task_id": row["agentId"], "status": "killed"}
                again = await conn.ask({"op": "stop", "task_id": row["agentId"]})
                assert again["code"] == "not_running" and "killed" in again["error"]
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
        record = host.registry.get(row["agentId"])
        assert record is not None and record.error == "stopped by request"


async def test_background_over_the_socket_moves_a_foreground_agent(
    tmp_path: Path, project: Path
) -> None:
    """background (S-RUN-5): the root's turn goes on; a second request is refused clearly."""
    agents = {
        "root": [
            {"tool_calls": [agent_call("holder", "hold on")]},
            {"text": "moved on: {{tool_result}}"},
            {"text": "the holder ended"},
        ],
        "holder": [{"text": "late", "latency_ms": 600_000}],
    }
    async with served_session(tmp_path, project, agents) as (_, root, session):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.run, "go")
            async with connect(session) as conn:
                with trio.fail_after(60):
                    while True:
                        agents_now = (await conn.ask({"op": "list"}))["agents"]
                        if agents_now and agents_now[0]["status"] == "running":
                            break
                        await trio.sleep(0.05)
                agent_id = agents_now[0]["agentId"]
                moved = await conn.ask({"op": "background", "task_id": agent_id})
                assert moved["ok"]
                again = await conn.ask({"op": "background", "task_id": agent_id})
                assert again["code"] == "not_running" and "background" in again["error"]
                [row] = (await conn.ask({"op": "list"}))["agents"]
                assert row["background"] and row["status"] == "running"
                await conn.ask({"op": "stop", "task_id": agent_id})
        assert any(
            m.role == "assistant" and m.content.startswith("moved on") for m in root.loop.messages
        )
