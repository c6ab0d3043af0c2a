"""S-SEC-2, S-OBS-1: no line a control client sends ends the session it asks.

The control channel answers this user's processes outside any worker tree; one
of them that sends a malformed line (a ``list`` page whose row offset overflows
SQLite, JSON nested deeper than Python parses) gets one error line, and the
live ``subvisor run``, its channel and its running subagent go on. A bug in
answering a request ends that connection alone, with one ``internal_error`` line.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor import RootSession
from supervisor.cli._control import _ControlServer, serve_control
from supervisor.cli._control_channel import socket_address
from supervisor.cli._control_client import control_request
from supervisor.cli._control_ops import (
    MAX_PAGE,
    ControlRequestError,
    SessionOp,
    TasksOp,
    parse_request,
)
from supervisor.state._store import MAX_PAGE_SIZE
from tests.security.test_control_channel import _running, _start_run, _wait_running, _waiter
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

#: Lines a same-uid client outside the worker trees sent, each of which ended the run.
BAD_LINES = {
    "bigpage": b'{"op":"list","page":4611686018427387904,"page_size":100}',
    "lastpage": json.dumps({"op": "list", "page": MAX_PAGE + 1, "page_size": 1}).encode(),
    "deepjson": b"[" * 60000,
    "deepobject": b'{"op":"task","task_id":' + b"[" * 60000,
    "deepfield": b'{"op":"task","task_id":' + b"[" * 900 + b"]" * 900 + b"}",
}


def _ask_raw(address: str, line: bytes) -> list[bytes]:
    """Send ``line`` on a fresh connection; every line the channel sends before it closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect(socket_address(address))
        conn.sendall(line + b"\n")
        conn.shutdown(socket.SHUT_WR)  # one request: the channel then closes
        with conn.makefile("rb") as lines:
            return lines.readlines()


def test_s_sec_2_a_malformed_control_line_ends_neither_the_run_nor_its_subagent(
    tmp_path: Path,
) -> None:
    """S-SEC-2, S-OBS-1: while a real `subvisor run`'s subagent runs, a client sends each
    line that ended the run (a list page past MAX_PAGE, JSON nested 60000 deep) and more:
    each gets one error line, the channel still answers, the subagent completes and the
    run exits 0."""
    home, project = home_for(tmp_path), tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "go-on"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("sleeper", "sleep")]}, {"text": "root done"}],
            "sleeper": _waiter(marker),
        },
    )
    run = _start_run(home, project, model)
    with _running(run):
        session = _wait_running(home, run, {"sleeper"}, set())
        replies = {name: _ask_raw(session.address, line) for name, line in BAD_LINES.items()}
        still = control_request(session.address, TasksOp())
        marker.touch()
        out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    for name, lines in replies.items():
        assert len(lines) == 1, (name, lines)
        reply = json.loads(lines[0])
        assert reply["ok"] is False and reply["code"] == "bad_request", (name, reply)
    assert "page" in json.loads(replies["bigpage"][0])["error"]
    assert [t["status"] for t in still["tasks"]] == ["running"]
    [task] = json.loads(out)["tasks"]
    assert task["status"] == "completed" and "Traceback" not in err


async def test_s_obs_1_a_request_that_fails_unexpectedly_ends_only_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-OBS-1: a request whose answer raises (a bug) gets one internal_error line and its
    connection is closed; the channel keeps answering other connections and the session
    goes on."""

    def broken(self: _ControlServer) -> dict[str, object]:
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    project = tmp_path / "project"
    project.mkdir()
    model = write_scenario(tmp_path / "s.yaml", {"root": [{"text": "hello"}]})
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=project)
        async with serve_control(host, root.session_id, root=root) as session:
            monkeypatch.setattr(_ControlServer, "_session", broken)
            failed = await trio.to_thread.run_sync(
                _ask_raw, session.address, b'{"op":"session"}\n{"op":"tasks"}'
            )
            monkeypatch.undo()
            answered = await trio.to_thread.run_sync(control_request, session.address, SessionOp())
            outcome = await root.run("go")
    assert len(failed) == 1
    reply = json.loads(failed[0])
    assert reply["ok"] is False and reply["code"] == "internal_error"
    assert "OverflowError" in reply["error"]
    assert answered["ok"] is True
    assert outcome.text == "hello"


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=512),
        st.integers(min_value=0, max_value=70000).map(lambda n: b"[" * n),
        st.integers(min_value=0, max_value=70000).map(lambda n: b'{"op":"list","page":' + b"{" * n),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["op", "page", "page_size", "task_id"]), inner)
            ),
        ).map(lambda value: json.dumps(value).encode()),
        st.fixed_dictionaries(
            {"op": st.sampled_from(["list", "transcript", "task"])},
            optional={
                "page": st.integers(),
                "page_size": st.integers(),
                "after_seq": st.integers(),
                "limit": st.integers(),
                "task_id": st.text(max_size=4),
            },
        ).map(lambda value: json.dumps(value).encode()),
    )
)
def test_s_sec_2_any_line_parses_to_a_request_or_one_error_line(line: bytes) -> None:
    """S-SEC-2: parse_request turns any bytes into a request or a ControlRequestError of one
    line, never another exception; a list page it accepts keeps its row offset a 64-bit
    integer at the largest page size."""
    try:
        request = parse_request(line)
    except ControlRequestError as exc:
        assert "\n" not in str(exc)
        return
    page = getattr(request, "page", 1)
    assert page * MAX_PAGE_SIZE < 2**63
