"""Streamable HTTP for ``subvisor mcp --http HOST:PORT`` (S-SRV-1).

Served by Hypercorn on trio, in the supervisor's own event loop, with the
SDK's stateful session manager: each client's ``Mcp-Session-Id`` is its own
connection, hence its own seat (S-SRV-5).

Invariants:

- Loopback is the default and needs nothing more; any other address must be
  asked for (``--allow-remote``) and comes with a bearer token, checked on
  every request in constant time before the SDK sees it.
- On loopback the SDK's DNS-rebinding guard stays on (Host and Origin must
  be loopback ones), so a web page cannot drive the server.
- On loopback without a token, each connection's peer is found through the
  kernel (``_tcp_peer``) and served only if it runs as our uid outside every
  subvisor worker tree: a subagent with network access must not call the
  Agent tool from below (S-SEC-2). Nor is a process any supervisor started,
  this one or another session's (one named ``subvisor-sup`` above it,
  ``supervisor.kernel._supervisor_mark``): the MCP servers a supervisor lends
  to its agents run outside every worker tree, and one that fetches a URL an
  agent names would otherwise be a subagent's way in, to this session or to
  any other. Anything that cannot be told is refused.
- Another uid is refused on the uid ``/proc/net/tcp`` gives, before any walk
  of ``/proc``; at most ``_WALKERS`` walks run at once, on threads of their
  own, so a flood of connections cannot take every worker thread.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework
from mcp.server.lowlevel import Server

from ..kernel import descends_from, in_worker_tree, socket_holders, tcp_socket
from ._control_peer import started_by_a_supervisor

__all__ = [
    "BearerTokenGate",
    "HttpEndpoint",
    "LoopbackPeerGate",
    "is_loopback",
    "parse_endpoint",
    "serve_http",
]

#: Where the SDK's streamable HTTP app answers.
MCP_PATH = "/mcp"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpEndpoint:
    """Where to listen."""

    host: str
    port: int

    @property
    def bind(self) -> str:
        """Hypercorn's bind string (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str) -> HttpEndpoint:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (loopback); ValueError says what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(
            f"--http {text!r}: expected HOST:PORT with a port from 0 to 65535 "
            "(for example 127.0.0.1:8765, or :8765 for loopback)"
        )
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    return HttpEndpoint(host, int(port_text))


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class BearerTokenGate:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer TOKEN`` get 401."""

    def __init__(self, app: AsgiApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass lifespan events and authorized requests through; refuse the rest."""
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                error = "missing or wrong bearer token (Authorization: Bearer TOKEN)"
                challenge = (b"www-authenticate", b'Bearer realm="subvisor"')
                await _refuse(send, 401, error, (challenge,))
                return
        await self._app(scope, receive, send)


async def _refuse(
    send: Send, status: int, error: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """Answer the request with ``status`` and ``{"error": error}`` (JSON)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps({"error": error}).encode()})


class LoopbackPeerGate:
    """ASGI middleware: a request whose connection is not from a process of ours, outside
    every worker tree, gets 403 (see the module's invariants)."""

    #: Verdicts kept, by socket inode: a connection is checked once.
    _KEPT = 1024
    #: Walks of ``/proc`` at once (each takes a thread while it runs).
    _WALKERS = 4

    def __init__(self, app: AsgiApp) -> None:
        self._app = app
        self._verdicts: dict[int, str | None] = {}
        self._walkers = trio.CapacityLimiter(self._WALKERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass lifespan events and requests from allowed peers through; refuse the rest."""
        if scope["type"] == "http":
            refusal = await self._refusal(scope.get("client"), scope.get("server"))
            if refusal is not None:
                await _refuse(send, 403, refusal)
                return
        await self._app(scope, receive, send)

    async def _refusal(self, client: Any, server: Any) -> str | None:
        if not client or not server:
            return "the connecting process cannot be told on this transport"
        found = tcp_socket((client[0], int(client[1])), (server[0], int(server[1])))
        if found is None:
            return f"no socket of {client[0]}:{client[1]} is connected here"
        uid, inode = found
        if uid != os.geteuid():
            # Known from the socket table: another user costs no walk of /proc.
            return f"uid {uid} is not this server's owner (uid {os.geteuid()})"
        if inode not in self._verdicts:
            # A walk of every process's fds and ancestries: off the event loop.
            verdict = await trio.to_thread.run_sync(_holders_refusal, inode, limiter=self._walkers)
            if len(self._verdicts) >= self._KEPT:
                self._verdicts.pop(next(iter(self._verdicts)))
            self._verdicts[inode] = verdict
        return self._verdicts[inode]


def _holders_refusal(inode: int) -> str | None:
    return _peer_refusal(socket_holders(inode))


def _peer_refusal(holders: tuple[int, ...]) -> str | None:
    if not holders:
        return (
            "the connecting process cannot be checked (gone, or not ours to see), and a "
            "subagent must not reach this server"
        )
    inside = [pid for pid in holders if in_worker_tree(pid)]
    if inside:
        return (
            f"process {inside[0]} runs inside a subvisor worker tree: subagents cannot use "
            "this server (S-SEC-2)"
        )
    ours = [pid for pid in holders if descends_from(pid, os.getpid())]
    if ours:
        return (
            f"process {ours[0]} was started by this server (an MCP server it lends to its "
            "agents): agents cannot use this server through it (S-SEC-2)"
        )
    for pid in holders:
        why = started_by_a_supervisor(pid)
        if why is not None:
            return f"{why}: it cannot use this server (S-SEC-2)"
    return None


async def serve_http(
    server: Server[Any],
    endpoint: HttpEndpoint,
    *,
    token: str | None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``server`` until cancelled; ``task_status`` gets the bound URLs."""
    # `host` turns on the SDK's DNS-rebinding guard for loopback names.
    app: AsgiApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=endpoint.host if is_loopback(endpoint.host) else ""
    )
    if token:
        app = BearerTokenGate(app, token)
    elif is_loopback(endpoint.host):
        app = LoopbackPeerGate(app)
    config = Config()
    config.bind = [endpoint.bind]
    config.accesslog = None
    config.errorlog = logging.getLogger("subvisor.http")
    await serve(cast(ASGIFramework, app), config, task_status=task_status)
