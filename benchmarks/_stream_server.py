"""A local OpenAI-compatible streaming server for the relay benchmark.

``python -m benchmarks._stream_server --chunks 200 --rate 50`` listens on
127.0.0.1, prints its port on stdout and answers every ``POST`` (any path)
with a Chat Completions SSE stream: ``--chunks`` content chunks at
``--rate`` chunks per second, a last chunk with ``finish_reason`` and
usage, then ``[DONE]``, in chunked transfer encoding on a keep-alive
connection. It stops when its stdin closes. With ``--cert FILE --key FILE``
it speaks HTTPS (TLS in asyncio's ``ssl`` transport).

Each chunk's text is ``<T> ``, ``T`` being ``time.monotonic()`` when it was
written. The clock is the machine's, so whoever reads the text subtracts T
from its own ``time.monotonic()`` to get the chunk's lag.

One asyncio loop and one ticker serve every stream: a stream's chunks are
due at fixed times from its start, so streams started apart stay apart, and
the server costs a write per chunk, not a task wake-up per chunk. Deliberately
light on imports: it should cost little next to what it feeds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time

__all__ = ["main"]

_TICK_S = 0.002
_HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def _sse_chunk(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _content(stamp: float) -> bytes:
    return (
        b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
        b'"model":"bench","choices":[{"index":0,"delta":{"content":"<%.6f> "},'
        b'"finish_reason":null}]}' % stamp
    )


_LAST = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 200, "total_tokens": 210},
    },
    separators=(",", ":"),
).encode()
_END = _sse_chunk(_LAST) + _sse_chunk(b"[DONE]") + b"0\r\n\r\n"


class _Stream:
    __slots__ = ("due", "sent", "transport")

    def __init__(self, transport: asyncio.Transport, start: float) -> None:
        self.transport = transport
        self.due = start
        self.sent = 0


class _Server:
    def __init__(self, chunks: int, rate: float) -> None:
        self.chunks = chunks
        self.interval = 1.0 / rate
        self.streams: set[_Stream] = set()

    async def tick(self) -> None:
        while True:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            for stream in list(self.streams):
                transport = stream.transport
                if transport.is_closing():
                    self.streams.discard(stream)
                    continue
                while stream.due <= now and stream.sent < self.chunks:
                    transport.write(_sse_chunk(_content(time.monotonic())))
                    stream.sent += 1
                    stream.due += self.interval
                if stream.sent >= self.chunks:
                    transport.write(_END)
                    self.streams.discard(stream)


class _Connection(asyncio.Protocol):
    def __init__(self, server: _Server) -> None:
        self._server = server
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            head_end = self._buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self._buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self._buffer) < end:
                return
            self._buffer = self._buffer[end:]
            assert self._transport is not None
            self._transport.write(_HEADERS)
            start = time.monotonic() + self._server.interval
            self._server.streams.add(_Stream(self._transport, start))


async def _serve(chunks: int, rate: float, tls: ssl.SSLContext | None) -> None:
    server = _Server(chunks, rate)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: _Connection(server), "127.0.0.1", 0, backlog=4096, reuse_address=True, ssl=tls
    )
    port = listener.sockets[0].getsockname()[1]
    print(port, flush=True)
    ticker = asyncio.ensure_future(server.tick())
    stdin_closed = loop.run_in_executor(None, sys.stdin.buffer.read)
    await stdin_closed
    ticker.cancel()
    listener.close()


def main() -> None:
    """Serve until stdin closes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--cert", help="PEM certificate chain: serve HTTPS")
    parser.add_argument("--key", help="PEM private key of --cert")
    args = parser.parse_args()
    tls = None
    if args.cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.cert, args.key)
    asyncio.run(_serve(max(1, args.chunks), max(0.1, args.rate), tls))


if __name__ == "__main__":
    main()
