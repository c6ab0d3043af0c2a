"""The one client of a live session's control channel (``supervisor.cli._control``).

- ``live_sessions(home)``: the sessions whose supervisor answers now, newest
  first, found through their address files (``supervisor.cli._control_channel``);
  a file whose address nobody serves (its supervisor was killed) is removed.
- ``control_request``: one request on its own connection, its reply. Every
  client uses it: ``subvisor ps``/``logs``/``stop``/``bg`` directly, ``subvisor
  top`` (asyncio, under Textual) through ``ControlClient``, which adds the
  one streaming op, ``subscribe``; ``follow_task`` streams one task
  (``subvisor logs -f``).

A process the channel refuses (another uid, or one inside a worker tree:
S-SEC-2) gets ``ControlError`` with code ``refused``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kernel import SubvisorError
from ._control_channel import LiveSession, read_address_file, socket_address
from ._control_ops import ControlRequest, FollowOp, ListOp, SubscribeOp

__all__ = [
    "AgentPage",
    "AgentRow",
    "ControlClient",
    "ControlError",
    "control_request",
    "follow_task",
    "live_sessions",
]

#: Replies (a page, a transcript chunk) can be long; requests never are.
_MAX_REPLY_BYTES = 64 * 1024 * 1024


class ControlError(SubvisorError):
    """The session answered ``ok: false``; the message is its error, ``code`` its kind."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.code = code


def _connect(address: str, timeout: float) -> socket.socket:
    """A blocking connection to the channel at ``address``.

    Raises ``ConnectionRefusedError`` when nobody serves that address.
    """
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        conn.connect(socket_address(address))
    except BaseException:
        conn.close()
        raise
    return conn


def _answers(address: str) -> bool | None:
    """True if a supervisor accepts at ``address``; None if nobody serves it at all."""
    try:
        _connect(address, timeout=1.0).close()
    except ConnectionRefusedError:
        return None
    except OSError:
        return False
    return True


def live_sessions(home: Path) -> list[LiveSession]:
    """Sessions under ``home/run`` whose supervisor accepts a connection, newest first.

    Address files of supervisors that are gone are removed on the way: an
    address file is written only once its socket listens, so a refused
    connection means the session's supervisor has ended.
    """
    found = []
    for path in (home / "run").glob("*.addr"):
        session = read_address_file(path)
        if session is None:
            continue  # it ended meanwhile, or is not ours
        answers = _answers(session.address)
        if answers:
            found.append(session)
        elif answers is None:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(found, key=lambda s: s.started_at, reverse=True)


def _request_line(request: ControlRequest) -> bytes:
    return request.model_dump_json().encode() + b"\n"


def _reply(line: bytes, address: str) -> dict[str, Any]:
    """The ``ok`` reply on ``line``; raises ``ControlError`` for an error or a garbled one."""
    if not line.endswith(b"\n"):
        raise ConnectionError(f"the session at {address} closed the connection without a reply")
    try:
        reply = json.loads(line)
    except ValueError:
        raise ControlError(f"unreadable reply from {address}: {line[:200]!r}") from None
    if not isinstance(reply, dict):
        raise ControlError(f"unexpected reply from {address}: {reply!r}")
    if not reply.get("ok"):
        raise ControlError(
            str(reply.get("error") or "the request failed"), str(reply.get("code") or "error")
        )
    return reply


def control_request(
    address: str, request: ControlRequest, *, timeout: float = 30.0
) -> dict[str, Any]:
    """Send ``request`` to the channel at ``address``; its ``ok`` reply.

    Raises ``ControlError`` for an error reply (a refusal included), ``OSError``
    when nobody serves ``address`` or no reply comes within ``timeout`` seconds.
    """
    with _connect(address, timeout) as conn:
        # A refused client may find the connection closed before its request is
        # sent; the refusal line is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(_request_line(request))
        with conn.makefile("rb") as lines:
            line = lines.readline(_MAX_REPLY_BYTES)
    return _reply(line, address)


def follow_task(address: str, task_id: str) -> Iterator[dict[str, Any]]:
    """The ``follow`` op's reply, then its events as they come, until the session closes it.

    Blocking: each item waits for the next line. Raises ``ControlError`` for an
    error reply (an unknown task), ``OSError`` when nobody serves ``address``.
    """
    with _connect(address, timeout=30.0) as conn:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(_request_line(FollowOp(task_id=task_id)))
        with conn.makefile("rb") as lines:
            yield _reply(lines.readline(_MAX_REPLY_BYTES), address)
            conn.settimeout(None)  # a task may stream nothing for a long while
            while line := lines.readline(_MAX_REPLY_BYTES):
                if not line.endswith(b"\n"):
                    return  # cut off: the session ended mid-line
                yield json.loads(line)


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One subagent as the ``list`` op shows it (S-OBS-1)."""

    agent_id: str
    type: str | None
    description: str | None
    status: str
    background: bool
    turns: int
    tokens: int
    tool_calls: int
    rss_bytes: int | None
    cpu_percent: float | None
    elapsed_s: float
    live: bool
    note: str | None

    @classmethod
    def from_reply(cls, item: dict[str, Any]) -> AgentRow:
        """Read one entry of a ``list`` reply's ``agents``."""
        return cls(
            agent_id=item["agentId"],
            type=item.get("type"),
            description=item.get("description"),
            status=item["status"],
            background=bool(item.get("background")),
            turns=int(item.get("turns") or 0),
            tokens=int(item.get("tokens") or 0),
            tool_calls=int(item.get("tool_calls") or 0),
            rss_bytes=item.get("rss_bytes"),
            cpu_percent=item.get("cpu_percent"),
            elapsed_s=float(item.get("elapsed_s") or 0.0),
            live=bool(item.get("live")),
            note=item.get("note"),
        )


@dataclass(frozen=True, slots=True)
class AgentPage:
    """A ``list`` reply: one page of the session's subagents and the session's figures."""

    session_id: str
    session_status: str
    page: int
    pages: int
    page_size: int
    total: int
    agents: tuple[AgentRow, ...]
    counts: dict[str, int]
    usage: dict[str, Any]

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> AgentPage:
        """Read a ``list`` reply."""
        return cls(
            session_id=reply["session_id"],
            session_status=reply["session_status"],
            page=reply["page"],
            pages=reply["pages"],
            page_size=reply["page_size"],
            total=reply["total"],
            agents=tuple(AgentRow.from_reply(item) for item in reply["agents"]),
            counts=dict(reply["counts"]),
            usage=dict(reply["usage"]),
        )


class ControlClient:
    """``control_request`` for asyncio (``subvisor top``), plus the ``subscribe`` stream."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def request(self, request: ControlRequest) -> dict[str, Any]:
        """One request, on a thread so the event loop runs on; its ``ok`` reply.

        Raises ``ControlError`` for an error reply, ``OSError`` when the session has ended.
        """
        return await asyncio.to_thread(control_request, self.address, request)

    async def page(self, page: int, page_size: int) -> AgentPage:
        """One page of the session's subagents."""
        return AgentPage.from_reply(await self.request(ListOp(page=page, page_size=page_size)))

    async def subscribe(
        self, on_subscribed: Callable[[], None] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The session's lifecycle events as they happen; ends when the session does.

        ``on_subscribed`` is called once the server has subscribed us: state
        read after it misses none of the events that follow.
        """
        async for event in self._stream(SubscribeOp(), on_subscribed):
            yield event

    async def follow(self, task_id: str) -> AsyncIterator[dict[str, Any]]:
        """One task's messages and streamed text (the ``follow`` op), until it ends."""
        async for event in self._stream(FollowOp(task_id=task_id)):
            yield event

    async def _stream(
        self, request: SubscribeOp | FollowOp, on_ok: Callable[[], None] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The lines after ``request``'s ``ok`` reply: its events, until either end closes."""
        conn = await asyncio.to_thread(_connect, self.address, 30.0)
        reader, writer = await asyncio.open_unix_connection(sock=conn, limit=_MAX_REPLY_BYTES)
        try:
            writer.write(_request_line(request))
            await writer.drain()
            _reply(await reader.readline(), self.address)
            if on_ok is not None:
                on_ok()
            while line := await reader.readline():
                yield json.loads(line)
        finally:
            writer.close()
