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
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework
from mcp.server.lowlevel import Server

__all__ = ["BearerTokenGate", "HttpEndpoint", "is_loopback", "parse_endpoint", "serve_http"]

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
                body = json.dumps(
                    {"error": "missing or wrong bearer token (Authorization: Bearer TOKEN)"}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="subvisor"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


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
    config = Config()
    config.bind = [endpoint.bind]
    config.accesslog = None
    config.errorlog = logging.getLogger("subvisor.http")
    await serve(cast(ASGIFramework, app), config, task_status=task_status)
