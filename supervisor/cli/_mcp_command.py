"""``subvisor mcp``: serve the Agent tool and its companions to MCP clients (S-SRV-1).

Over stdio (the default: the client starts ``subvisor mcp`` and talks on its
stdin and stdout) or streamable HTTP (``--http HOST:PORT``).

Order matters on stdio: the SDK's transport claims fds 0 and 1 (pointing
them at /dev/null and stderr for everyone else) before the ``Subvisor``
starts its zygote, so no worker ever inherits the client's pipes: a worker
writing to its stdout cannot corrupt the protocol, and the client sees EOF
when this process ends, not when the last worker does.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

import trio
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server

from ..delegation._settings import SubvisorSettings
from ..delegation._subvisor import Subvisor
from ..kernel import find_exception
from ..providers import ModelError
from ._console import SafeConsole, quoted
from ._interrupt import interruptible
from ._mcp_asks import ElicitedAsks
from ._mcp_http import MCP_PATH, HttpEndpoint, serve_http
from ._mcp_sampling import SAMPLING_PROVIDER, ClientSampling
from ._mcp_server import McpFrontDoor

__all__ = ["McpServeRequest", "mcp_command"]


@dataclass(frozen=True, slots=True)
class McpServeRequest:
    """What ``subvisor mcp`` was asked to serve."""

    #: ``provider:model``, or ``mcp-sampling`` for each client's own model.
    model: str
    cwd: Path
    settings: SubvisorSettings
    #: None: stdio.
    endpoint: HttpEndpoint | None = None
    token: str | None = None
    #: The answer to an ask when the client cannot elicit.
    approve: Literal["allow", "deny"] = "deny"
    #: How long an elicited ask may wait for its answer before it is denied.
    ask_timeout_s: float = 120.0


def _version() -> str:
    try:
        return metadata.version("subvisor")
    except metadata.PackageNotFoundError:
        return "0"


async def _serve(request: McpServeRequest) -> int:
    asks = ElicitedAsks(fallback=request.approve, timeout_s=request.ask_timeout_s)
    async with contextlib.AsyncExitStack() as stack:
        interruption = await stack.enter_async_context(interruptible())
        streams = None
        if request.endpoint is None:
            streams = await stack.enter_async_context(stdio_server())
        sampling = ClientSampling() if request.model == SAMPLING_PROVIDER else None
        host = await stack.enter_async_context(
            Subvisor(
                request.settings,
                approval_handler=asks.approve,
                question_handler=asks.answer,
                providers={SAMPLING_PROVIDER: sampling} if sampling is not None else None,
            )
        )
        if sampling is None:
            host.gateway.resolve(request.model)  # fail now, with the gateway's message
        async with trio.open_nursery() as nursery:
            front = McpFrontDoor(
                host,
                asks,
                model=request.model,
                sampling=sampling,
                cwd=request.cwd,
                nursery=nursery,
                version=_version(),
            )
            nursery.start_soon(interruption.stop_on_signal, host.stop_all, nursery.cancel_scope)
            try:
                if streams is not None:
                    read_stream, write_stream = streams
                    await serve_loop(
                        front.server,
                        read_stream,
                        write_stream,
                        lifespan_state={},
                        init_options=front.server.create_initialization_options(),
                    )
                else:
                    assert request.endpoint is not None
                    serve = functools.partial(serve_http, token=request.token)
                    binds = await nursery.start(serve, front.server, request.endpoint)
                    for url in binds:
                        print(f"subvisor mcp: serving {url}{MCP_PATH}", file=sys.stderr, flush=True)
                    await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await front.close()
                nursery.cancel_scope.cancel()
    return interruption.exit_code if interruption.signum is not None else 0


def mcp_command(request: McpServeRequest) -> int:
    """Serve until the client leaves (stdio) or a signal (HTTP); return the exit code."""
    errors = SafeConsole(stderr=True, soft_wrap=True)
    try:
        return trio.run(_serve, request)
    except BaseException as exc:
        if find_exception(exc, KeyboardInterrupt) is not None:
            return 130
        model_error = find_exception(exc, ModelError)
        if model_error is not None:
            errors.print(f"[red]model error:[/] {quoted(str(model_error))}", highlight=False)
            return 2
        os_error = find_exception(exc, OSError)
        if request.endpoint is not None and os_error is not None:
            errors.print(
                f"[red]cannot serve on {request.endpoint.bind}:[/] {quoted(str(os_error))}",
                highlight=False,
            )
            return 2
        raise
