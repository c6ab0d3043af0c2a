"""A real local HTTP server that plays a model provider in tests.

Tests queue canned responses (JSON, or SSE streamed with chunked encoding,
optionally dropped mid-body) and afterwards read what was sent: method, path,
headers and body of every request, and the most requests ever in flight.
It runs ``http.server.ThreadingHTTPServer`` on 127.0.0.1 in a thread, so the
code under test goes through a real socket, httpx's real transport and all.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import trustme

__all__ = [
    "CannedResponse",
    "ProviderServer",
    "RecordedRequest",
    "localhost_tls",
    "sse_bytes",
    "unused_base_url",
]


@dataclass(frozen=True)
class CannedResponse:
    """One queued answer.

    With ``chunks`` the body is sent with chunked transfer encoding, one
    flushed chunk each; ``drop_connection`` then closes the socket before the
    body is complete. ``delay_s`` waits before answering. ``holds`` pairs a
    chunk's index with an event: that chunk waits until the test sets it (a
    stream held mid-answer for as long as the test needs).
    """

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    chunks: tuple[bytes, ...] = ()
    drop_connection: bool = False
    delay_s: float = 0.0
    holds: tuple[tuple[int, threading.Event], ...] = ()

    @classmethod
    def json(
        cls, document: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> CannedResponse:
        """A JSON body."""
        return cls(
            status=status,
            body=json.dumps(document).encode(),
            headers={"content-type": "application/json", **(headers or {})},
        )

    @classmethod
    def sse(
        cls,
        events: Iterable[tuple[str | None, Any]],
        *,
        piece_size: int | None = None,
        drop_connection: bool = False,
    ) -> CannedResponse:
        """A text/event-stream body of ``(event name or None, data)`` pairs.

        ``data`` that is not a string is JSON-encoded. ``piece_size`` cuts the
        stream into chunks of that many bytes, ignoring line boundaries.
        """
        payloads = [sse_bytes(name, data) for name, data in events]
        if piece_size is not None:
            stream = b"".join(payloads)
            payloads = [stream[i : i + piece_size] for i in range(0, len(stream), piece_size)]
        return cls(
            headers={"content-type": "text/event-stream"},
            chunks=tuple(payloads),
            drop_connection=drop_connection,
        )


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: headers are keyed in lower case.

    ``client_port`` identifies the connection, to see whether it was reused.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    client_port: int

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def sse_bytes(event: str | None, data: Any) -> bytes:
    """One server-sent event, encoded."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event is not None else ""
    lines = "".join(f"data: {line}\n" for line in text.split("\n"))
    return (head + lines + "\n").encode()


def unused_base_url() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens, so connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def localhost_tls(ca: trustme.CA) -> ssl.SSLContext:
    """A server TLS context with a certificate for 127.0.0.1 that ``ca`` issued."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


class ProviderServer:
    """The scripted provider stand-in; use as a context manager.

    With ``tls`` (a server ``SSLContext``) it speaks HTTPS.
    """

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._queue: deque[CannedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        if tls is not None:
            # The handshake happens in each request's thread (``_Handler.setup``):
            # a client that refuses the certificate must not stall the accept loop.
            self._httpd.socket = tls.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` of this server (``https`` with TLS)."""
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self._tls else 'http'}://{host!s}:{port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def max_in_flight(self) -> int:
        """The most requests ever being handled at the same time."""
        with self._lock:
            return self._max_in_flight

    def enqueue(self, *responses: CannedResponse) -> None:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._queue.extend(responses)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _begin(self, request: RecordedRequest) -> CannedResponse | None:
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            return self._queue.popleft() if self._queue else None

    def _end(self) -> None:
        with self._lock:
            self._in_flight -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client hangs up (over TLS too); report anything else."""
        if isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLEOFError):
            return
        super().handle_error(request, client_address)

    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], owner: ProviderServer
    ) -> None:
        super().__init__(address, handler)
        self.owner = owner


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm and
    # delayed ACKs every response would stall for ~40 ms.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    def do_POST(self) -> None:
        self._answer()

    def do_GET(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        request = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=self.rfile.read(length),
            client_port=self.client_address[1],
        )
        owner = self.server.owner
        canned = owner._begin(request)
        try:
            if canned is None:
                # A 4xx that is never retried, so a missing response fails fast.
                canned = CannedResponse.json(
                    {"error": {"message": "provider_server: no canned response queued"}},
                    status=418,
                )
            if canned.delay_s:
                time.sleep(canned.delay_s)
            self._write(canned)
        finally:
            owner._end()

    def _write(self, canned: CannedResponse) -> None:
        self.send_response(canned.status)
        for name, value in canned.headers.items():
            self.send_header(name, value)
        if not canned.chunks:
            self.send_header("content-length", str(len(canned.body)))
            self.end_headers()
            self.wfile.write(canned.body)
            self.wfile.flush()
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        holds = dict(canned.holds)
        for index, chunk in enumerate(canned.chunks):
            if index in holds:
                holds[index].wait()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        if canned.drop_connection:
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
