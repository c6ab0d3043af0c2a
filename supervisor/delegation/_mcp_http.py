"""A streamable-HTTP MCP transport whose JSON answers are bounded in size (S-MCP-1),
and whose servers on this machine are never a subagent's (S-SEC-1).

The SDK reads a JSON (not SSE) response whole, however large; its SSE events
are already bounded (``max_sse_event_size``). Here every ``application/json``
body is counted as it arrives and, past ``MAX_MCP_MESSAGE_BYTES``, the read
fails: the SDK turns that into an error answer to that one request, and the
connection stays up.

A server at a local URL (``http://localhost:8931/mcp``) is a port any process
may take while the server is down: a subagent under network allow that took
it would get every request (with its headers) and write the tools, and the
results, every agent borrows. Each new connection is therefore checked
before its first request (``kernel.LocalServerCheck``), as the model
gateway's are.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpcore2
import httpx2

from ..kernel import LocalServerCheck, SubvisorError
from ._mcp_stdio import MAX_MCP_MESSAGE_BYTES

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams

__all__ = ["McpAnswerTooLargeError", "bounded_http_client"]


class McpAnswerTooLargeError(SubvisorError, httpx2.StreamError):
    """A JSON answer over the limit (a ``StreamError``, which the SDK reports per request)."""


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, url: str, limit: int) -> None:
        self._inner, self._url, self._limit = inner, url, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for chunk in self._inner:
            received += len(chunk)
            if received > self._limit:
                raise McpAnswerTooLargeError(
                    f"the MCP server at {self._url} sent an answer over"
                    f" {self._limit // (1024 * 1024)} MiB; it was not read"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _CappedBody(response.stream, str(request.url), self._limit)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CheckedBackend(httpcore2.AsyncNetworkBackend):
    """Connects as ``inner`` does; a connection to a server a subagent holds is closed unused."""

    def __init__(self, inner: httpcore2.AsyncNetworkBackend) -> None:
        self._inner = inner
        self._servers = LocalServerCheck()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (the backend's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        sock = stream.get_extra_info("socket")
        refusal = await self._servers.verdict(sock.getpeername()[:2], sock.getsockname()[:2])
        if refusal is not None:
            await stream.aclose()
            raise httpcore2.ConnectError(
                f"refused to send a request to the MCP server at {host}:{port}: {refusal}; "
                "a subagent may hold the port while its server is down (S-SEC-1)"
            )
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (the backend's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _checked_transport() -> httpx2.AsyncHTTPTransport:
    """httpx2's transport (its defaults), over a pool that checks each new connection."""
    transport = httpx2.AsyncHTTPTransport()
    # httpx2 takes no network backend: its pool is made again with one (public
    # httpcore2 arguments, httpx2's default limits).
    limits = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_CheckedBackend(httpcore2.AnyIOBackend()),
    )
    return transport


class _ReportedAsAnError(logging.Filter):
    """Drops the SDK's traceback for an answer over the limit: the caller gets an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, McpAnswerTooLargeError)


_FILTER = _ReportedAsAnError()


@asynccontextmanager
async def bounded_http_client(
    url: str, max_message_bytes: int = MAX_MCP_MESSAGE_BYTES
) -> AsyncIterator[TransportStreams]:
    """The SDK's ``streamable_http_client`` on an HTTP client (with the SDK's
    timeouts) whose JSON answers are cut off past ``max_message_bytes``."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    logging.getLogger("mcp.client.streamable_http").addFilter(_FILTER)  # idempotent
    client = httpx2.AsyncClient(
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_CappedTransport(_checked_transport(), max_message_bytes),
    )
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams
