"""Clients of a live session's control channel (``supervisor._control``).

- ``live_sessions(home)``: the sessions whose supervisor answers now, newest first;
  a socket nobody serves (its process died) is skipped.
- ``control_request``: one blocking request, for the short ``subvisor ps``/``logs``/
  ``stop``/``bg`` commands.
- ``ControlClient``: asyncio, for ``subvisor top`` (Textual runs on asyncio): requests
  on one connection, ``subscribe`` on another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "AgentPage",
    "AgentRow",
    "ControlClient",
    "ControlError",
    "LiveSession",
    "control_request",
    "live_sessions",
]

#: Replies (a page, a transcript chunk) can be long; requests never are.
_MAX_REPLY_BYTES = 64 * 1024 * 1024


class ControlError(Exception):
    """The session answered ``ok: false``; the message is its error, ``code`` its kind."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class LiveSession:
    """A session whose supervisor serves its control socket now."""

    session_id: str
    socket_path: Path
    #: When its socket was created (epoch seconds): about when the session started.
    started_at: float


#: A socket nobody listens on, older than this, was left by a supervisor that
#: was killed (SIGKILL cannot clean up); a younger one may be between bind and listen.
_STALE_AFTER_S = 30.0


def _answers(path: Path) -> bool | None:
    """True if a supervisor accepts on ``path``; None if nobody listens there at all."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return None
        except OSError:
            return False
    return True


def live_sessions(home: Path) -> list[LiveSession]:
    """Sessions under ``home/run`` whose supervisor accepts a connection, newest first.

    Sockets of supervisors that are gone are removed on the way.
    """
    found = []
    for path in (home / "run").glob("*.sock"):
        try:
            started = path.stat().st_mtime
        except OSError:
            continue  # it ended meanwhile
        answers = _answers(path)
        if answers:
            found.append(LiveSession(path.stem, path, started))
        elif answers is None and time.time() - started > _STALE_AFTER_S:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(found, key=lambda s: s.started_at, reverse=True)


def control_request(
    path: Path, request: dict[str, Any], *, timeout: float = 30.0
) -> dict[str, Any]:
    """Send one request and return its ``ok`` reply.

    Raises ``ControlError`` for an error reply, ``OSError`` when nobody serves ``path``.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(path))
        conn.sendall(json.dumps(request).encode() + b"\n")
        with conn.makefile("rb") as lines:
            line = lines.readline(_MAX_REPLY_BYTES)
    if not line.endswith(b"\n"):
        raise ConnectionError(f"{path} closed the connection without a whole reply")
    return _checked(json.loads(line))


def _checked(reply: Any) -> dict[str, Any]:
    if not isinstance(reply, dict):
        raise ControlError(f"unexpected reply {reply!r}")
    if not reply.get("ok"):
        raise ControlError(
            str(reply.get("error") or "the request failed"), str(reply.get("code") or "error")
        )
    return reply


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
    """An asyncio client of one session's control socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def request(self, op: str, **params: Any) -> dict[str, Any]:
        """One request on the shared connection (opened on first use); its ``ok`` reply.

        Raises ``ControlError`` for an error reply, ``ConnectionError`` when the
        session has ended.
        """
        async with self._lock:
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_unix_connection(
                    str(self.path), limit=_MAX_REPLY_BYTES
                )
            assert self._reader is not None
            self._writer.write(json.dumps({"op": op, **params}).encode() + b"\n")
            await self._writer.drain()
            line = await self._reader.readline()
            if not line.endswith(b"\n"):
                await self._close_connection()
                raise ConnectionError(f"the session closed its control socket ({self.path})")
        return _checked(json.loads(line))

    async def page(self, page: int, page_size: int) -> AgentPage:
        """One page of the session's subagents."""
        return AgentPage.from_reply(await self.request("list", page=page, page_size=page_size))

    async def subscribe(self) -> AsyncIterator[dict[str, Any]]:
        """The session's lifecycle events as they happen; ends when the session does."""
        reader, writer = await asyncio.open_unix_connection(str(self.path), limit=_MAX_REPLY_BYTES)
        try:
            writer.write(b'{"op": "subscribe"}\n')
            await writer.drain()
            first = await reader.readline()
            if not first:
                raise ConnectionError(f"the session closed its control socket ({self.path})")
            _checked(json.loads(first))
            while line := await reader.readline():
                yield json.loads(line)
        finally:
            writer.close()

    async def _close_connection(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def aclose(self) -> None:
        """Close the request connection."""
        async with self._lock:
            await self._close_connection()
