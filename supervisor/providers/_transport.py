"""``GatewayTransport``: the gateway's HTTP/1.1 under httpx, cheap per streamed chunk.

A model answer streams as hundreds of small HTTP chunks, one network read
each. httpx's own transport (httpcore over h11) costs per chunk an h11
event, a stack of async generators, and per read two context managers and
a cancel scope: most of the supervisor's CPU at fleet scale. This transport
keeps httpx as the client (its API, errors and redirects policy stay) and
does the HTTP/1.1 wire itself where it matters, as below. It does not go through a
proxy: httpx reads ``HTTP(S)_PROXY`` only for transports of its own.

- h11 writes the request and reads the response head (status, headers);
- the body is decoded here, a whole read at a time: chunked framing, a
  ``Content-Length``, or until the server closes; each read yields once,
  however many HTTP chunks it held;
- the body's read-idle timeout is one deadline per response, pushed on by
  every read and checked by one sweeper task per transport, which closes
  the connection of a response past it (its reader then raises
  ``httpx.ReadTimeout``); no cancel scope per read;
- a connection whose response was read to its exact end goes back to a
  keep-alive pool (per scheme, host and port) and is reused with a fresh
  h11 state; any other connection is closed;
- a body can instead be *fed* to a synchronous sink (``FeedableBody``, in the
  response's ``BODY_EXTENSION``): then the sink runs on each read, in the
  transport's one reader task, which waits on every such body of plain
  TCP at once (an epoll set of their sockets, level-triggered, registered
  once). A read costs a ``read(2)`` and the sink's work, and no task wakes
  for it: the one waiting on the body wakes when the sink says it has had
  enough, or the body ends or fails. At fleet scale (hundreds of answers
  streaming at once) that is most of the cost of a chunk gone. A TLS body
  is fed the same way: TLS is a ``TlsStream`` (``_tls``), whose records the
  reader decrypts from the raw bytes it read.

Invariants: a response is framed exactly once (h11 for the head, this
module for the body), so a connection is reused only at a message
boundary; every failure is raised as the ``httpx`` exception httpx's own
transport would raise, with the request attached. A body is read by one
party at a time: its iterator, or the reader task while it is fed; a fed
body leaves the epoll set before its socket is closed, so a recycled fd
number never reaches a stale body.
"""

from __future__ import annotations

import os
import re
import select
import ssl
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import h11
import httpx
import trio

from ..kernel import LocalServerCheck
from ._tls import TlsStream

__all__ = ["BODY_EXTENSION", "BodySink", "FeedableBody", "GatewayTransport"]

#: The response extension holding the body as a ``FeedableBody``.
BODY_EXTENSION = "subvisor.feedable_body"

#: Takes each piece of a body's payload as it is read; True: it has had enough.
BodySink = Callable[[bytes], bool]

_READ_SIZE = 64 * 1024
_MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNK_LINE = 1024
_SWEEP_S = 0.5
#: How long the reader lets reads gather after a busy round (see ``_Reader``).
_BATCH_S = 0.002
_BUSY_ROUND = 8
_HEX = re.compile(rb"[0-9A-Fa-f]+")

_Origin = tuple[str, str, int]


@dataclass(eq=False)
class _Connection:
    """One open connection; ``stream`` is the socket stream, or ``tls`` over it."""

    stream: trio.abc.Stream
    socket: trio.socket.SocketType
    tls: TlsStream | None = None


class ChunkedBody:
    """Decodes a chunked body (RFC 9112 7.1): bytes in, payload and whether it ended out.

    Chunk extensions and trailer fields are read and dropped. A bare LF is
    accepted where CRLF belongs, as most decoders do. ``leftover`` holds what
    followed the body's end in the last bytes fed.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0  # payload bytes left in the current chunk
        self._state = "size"  # size, data, data_end, trailer, done
        self.leftover = b""

    @property
    def finished(self) -> bool:
        """The body's end has been read."""
        return self._state == "done"

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """Take bytes; return the payload they complete and whether the body ended."""
        if self._state == "size" and not self._buffer:
            # The usual read: whole chunks (a streamed event each), nothing held
            # back. They are cut out here; the first thing that is not a whole
            # data chunk (the last chunk, an extension, a cut) is left to the
            # general path below.
            pos, parts = _whole_chunks(data)
            if pos == len(data):
                return b"".join(parts) if len(parts) != 1 else parts[0], False
            if parts:
                rest, ended = self._feed(data[pos:])
                return b"".join(parts) + rest, ended
        return self._feed(data)

    def _feed(self, data: bytes) -> tuple[bytes, bool]:
        buffer = self._buffer + data if self._buffer else data
        out: list[bytes] = []
        pos, size, state = 0, len(buffer), self._state
        while state != "done":
            if state == "data":
                take = min(self._remaining, size - pos)
                if take:
                    out.append(buffer[pos : pos + take])
                    pos += take
                    self._remaining -= take
                if self._remaining:
                    break
                state = "data_end"
            end = buffer.find(b"\n", pos)
            if end < 0:
                if size - pos > _MAX_CHUNK_LINE:
                    raise ValueError("a chunk-size line is too long")
                break
            line = buffer[pos:end].rstrip(b"\r")
            pos = end + 1
            if state == "data_end":
                if line:
                    raise ValueError("a chunk does not end with CRLF")
                state = "size"
            elif state == "size":
                digits = line.split(b";", 1)[0].strip()
                if not _HEX.fullmatch(digits):
                    raise ValueError(f"bad chunk size {digits[:40]!r}")
                self._remaining = int(digits, 16)
                state = "data" if self._remaining else "trailer"
            elif not line:  # the blank line that ends the trailer section
                state = "done"
        self._state = state
        if state == "done":
            self.leftover, self._buffer = buffer[pos:], b""
        else:
            self._buffer = buffer[pos:]
        return b"".join(out) if len(out) != 1 else out[0], state == "done"


def _whole_chunks(data: bytes) -> tuple[int, list[bytes]]:
    """The data chunks that ``data`` starts with, each whole (size line, data, CRLF).

    Returns where the first other thing starts, and the chunks' data. Only a
    plain hex size line ends a size here; anything else stops the scan.
    """
    parts: list[bytes] = []
    pos, available = 0, len(data)
    while True:
        line_end = data.find(b"\r\n", pos, pos + 18)
        if line_end <= pos or not _HEX.fullmatch(data, pos, line_end):
            return pos, parts
        start = line_end + 2
        end = start + int(data[pos:line_end], 16)
        if end == start or end + 2 > available or data[end : end + 2] != b"\r\n":
            return pos, parts
        parts.append(data[start:end])
        pos = end + 2


class _LengthBody:
    def __init__(self, length: int) -> None:
        self._remaining = length
        self.leftover = b""

    @property
    def finished(self) -> bool:
        return self._remaining == 0

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        if len(data) >= self._remaining:
            payload, self.leftover = data[: self._remaining], data[self._remaining :]
            self._remaining = 0
            return payload, True
        self._remaining -= len(data)
        return data, False


class _UntilClose:
    leftover = b""
    finished = False

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        return data, not data


@dataclass(eq=False)
class _Body(httpx.AsyncByteStream):
    """A response body being read; the sweeper fails it once ``deadline`` passes."""

    transport: GatewayTransport
    connection: _Connection
    origin: _Origin
    request: httpx.Request
    decoder: ChunkedBody | _LengthBody | _UntilClose
    first: bytes
    reusable: bool
    read_timeout: float | None
    deadline: float = field(default=float("inf"))
    timed_out: bool = False
    done: bool = False
    #: While fed: the sink, the task waiting for the feed to end, and how it ended.
    _sink: BodySink | None = None
    _feeder: Any = None
    _fed_error: BaseException | None = None
    #: The fd the reader watches for it (None: not watched).
    watched_fd: int | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder, stream, timeout = self.decoder, self.connection.stream, self.read_timeout
        data, self.first = self.first, b""
        try:
            while True:
                if data:
                    payload, ended = self._decode(data)
                    # Set before the last yield: a reader may stop there and close.
                    self.done = ended
                    if payload:
                        yield payload
                    if ended:
                        return
                elif decoder.finished:
                    self.done = True
                    return
                if timeout is not None:
                    self.deadline = trio.current_time() + timeout
                try:
                    data = cast(bytes, await stream.receive_some(_READ_SIZE))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise self._read_error(exc) from exc
                if not data and self._at_eof():
                    return
        finally:
            self.transport._untrack(self)

    async def feed(self, sink: BodySink) -> None:
        """Hand the body's payload to ``sink`` a read at a time, until it has had enough.

        Returns once ``sink`` returned True or the body ended (``done``);
        raises what the iterator would (``httpx.ReadError``, ``ReadTimeout``,
        ``RemoteProtocolError``) and whatever ``sink`` raised. The body may
        then be iterated on from where the sink stopped.
        """
        data, self.first = self.first, b""
        self._sink, self._fed_error = sink, None
        try:
            over = bool(data) and self._take(data)
            tls = self.connection.tls
            if not over and tls is not None and tls.buffered:
                # Records already read from the socket: the reader would not
                # wake for them.
                over = self._take_decrypted(tls, None)
            if self.decoder.finished:
                self.done = True
            elif not over:
                await self._fed_by_reader()
        finally:
            self._sink = None
        if self._fed_error is not None:
            error, self._fed_error = self._fed_error, None
            raise error

    async def _fed_by_reader(self) -> None:
        reader = self.transport._reader
        self._feeder = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._feeder = None
            reader.forget(self)
            return trio.lowlevel.Abort.SUCCEEDED

        reader.watch(self)
        await trio.lowlevel.wait_task_rescheduled(abort)

    def _readable(self, now: float) -> None:
        """The reader task saw the socket readable at ``now``: read it into the sink."""
        fd = self.watched_fd
        assert fd is not None, "only a watched body is readable"
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fed_error = self._read_error(exc)
            self._end_feed()
            return
        if self.read_timeout is not None:
            self.deadline = now + self.read_timeout
        tls = self.connection.tls
        if self._take(data) if tls is None else self._take_decrypted(tls, data):
            self._end_feed()

    def _take_decrypted(self, tls: TlsStream, raw: bytes | None) -> bool:
        """``_take`` for the plaintext of ``raw`` (see ``TlsStream.decrypt``)."""
        try:
            data, ended = tls.decrypt(raw)
        except OSError as exc:  # ssl.SSLError: a broken record
            self._fed_error = self._read_error(exc)
            return True
        if data and self._take(data):
            return True
        return ended and self._take(b"")

    def _take(self, data: bytes) -> bool:
        """Decode ``data`` into the sink; True once the feed is over (how: ``_fed_error``)."""
        try:
            if not data:
                self._at_eof()  # the body ended here, or this raises
                return True
            payload, ended = self._decode(data)
            self.done = ended
            enough = bool(payload) and self._sink is not None and self._sink(payload)
        except BaseException as exc:
            self._fed_error = exc
            return True
        return enough or ended

    def _end_feed(self) -> None:
        self.transport._reader.forget(self)
        task, self._feeder = self._feeder, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def time_out(self) -> None:
        """The read-idle deadline passed: fail whoever reads, then close (the sweeper)."""
        self.timed_out = True
        self.transport._untrack(self)
        if self._feeder is not None:
            self._fed_error = self._read_error(OSError("timed out"))
            self._end_feed()

    def _decode(self, data: bytes) -> tuple[bytes, bool]:
        try:
            return self.decoder.feed(data)
        except ValueError as exc:
            raise httpx.RemoteProtocolError(
                f"malformed response body: {exc}", request=self.request
            ) from None

    def _at_eof(self) -> bool:
        """The peer closed: True if that ends the body (no length, no chunks), else raise."""
        if isinstance(self.decoder, _UntilClose):
            self.done = True
            return True
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body",
            request=self.request,
        )

    def _read_error(self, exc: BaseException) -> httpx.TransportError:
        if self.timed_out:
            return httpx.ReadTimeout(f"no data for {self.read_timeout:g} s", request=self.request)
        return httpx.ReadError(str(exc) or type(exc).__name__, request=self.request)

    async def aclose(self) -> None:
        self.transport._untrack(self)
        self.transport._reader.forget(self)
        tls = self.connection.tls
        if (
            self.done
            and self.reusable
            and not self.decoder.leftover
            and not self.timed_out
            and not (tls is not None and tls.buffered)
        ):
            self.transport._release(self.origin, self.connection)
        else:
            await trio.aclose_forcefully(self.connection.stream)


class FeedableBody(Protocol):
    """A response body that can be fed to a sink instead of iterated (``BODY_EXTENSION``)."""

    async def feed(self, sink: BodySink) -> None:
        """Hand the payload to ``sink`` a read at a time until it has had enough or it ends."""
        ...


class _Reader:
    """The one task that reads every fed body of plain TCP, per trio run (see the module).

    Its epoll set holds those bodies' sockets, level-triggered; trio waits on
    the set's own fd, so one wake-up serves every socket that became readable.
    After a busy round it sleeps ``_BATCH_S`` before it polls again: under
    load a round then reads dozens of sockets; a quiet one costs no extra
    wake-up. With ``rounds_s`` a round starts at most that often, whatever
    it found, a period after the last one started.
    """

    def __init__(self, rounds_s: float | None = None) -> None:
        self._epoll: select.epoll | None = None
        self._bodies: dict[int, _Body] = {}
        self._running: object | None = None
        self._rounds_s = rounds_s

    def watch(self, body: _Body) -> None:
        """Read ``body`` into its sink from now on."""
        if self._epoll is None:
            self._epoll = select.epoll()
        fd = body.watched_fd = body.connection.socket.fileno()
        self._epoll.register(fd, select.EPOLLIN)
        self._bodies[fd] = body
        run = trio.lowlevel.current_root_task()
        if self._running is not run:
            self._running = run
            trio.lowlevel.spawn_system_task(self._run, run, name="GatewayTransport reader")

    def forget(self, body: _Body) -> None:
        """Stop reading ``body`` (before its socket may close)."""
        fd, body.watched_fd = body.watched_fd, None
        if fd is not None and self._bodies.get(fd) is body:
            del self._bodies[fd]
            if self._epoll is not None:
                self._epoll.unregister(fd)

    async def _run(self, run: object) -> None:
        # A system task: it must not raise. Every body's own failure is its
        # reader's (``_Body._readable`` hands it over); this loop only waits.
        epoll = self._epoll
        assert epoll is not None
        try:
            while self._running is run and self._bodies:
                ready = epoll.poll(0)
                if not ready:
                    await trio.lowlevel.wait_readable(epoll.fileno())
                    continue
                now = trio.current_time()
                for fd, _ in ready:
                    body = self._bodies.get(fd)
                    if body is not None:
                        body._readable(now)
                if self._rounds_s is not None:
                    # Rounds start a period apart: a long round (hundreds of
                    # sockets) does not push the next one back by its length.
                    await trio.sleep_until(now + self._rounds_s)
                elif len(ready) >= _BUSY_ROUND:
                    # Under load, what arrives meanwhile is read in the next round,
                    # all in one wake-up: a few ms of lag for far fewer of them.
                    await trio.sleep(_BATCH_S)
        except (trio.ClosedResourceError, ValueError, OSError):
            pass  # the set was closed under it: the transport is closed
        finally:
            if self._running is run:
                self._running = None

    def close(self) -> None:
        """Close the epoll set (the transport is closed; no body is fed any more)."""
        if self._epoll is not None:
            trio.lowlevel.notify_closing(self._epoll.fileno())
            self._epoll.close()
            self._epoll = None
        self._bodies.clear()


class GatewayTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over trio for the model gateway (see the module docstring).

    ``ssl_context`` verifies ``https`` servers (default: the system's
    trust store, as httpx does); ``max_idle`` bounds the idle keep-alive
    connections kept per origin. ``read_rounds_s``: fed bodies are read in
    rounds at most this often, whenever a round found something (default:
    only after busy rounds, ``_BATCH_S`` apart); whoever passes text on in
    batches of that period loses nothing by it.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_idle: int = 64,
        read_rounds_s: float | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._max_idle = max_idle
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._reading: weakref.WeakSet[_Body] = weakref.WeakSet()
        self._sweeping: object | None = None
        self._reader = _Reader(read_rounds_s)
        self._servers = LocalServerCheck()
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``; return its response once the head has arrived."""
        if self._closed:
            raise RuntimeError("GatewayTransport is closed")
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}", request=request)
        port = url.port or (443 if scheme == "https" else 80)
        origin: _Origin = (scheme, url.host, port)
        timeouts = request.extensions.get("timeout", {})
        connection = self._idle_connection(origin)
        if connection is None:
            with _timeout(timeouts.get("connect")) as connecting:
                connection = await self._connect(origin, request)
            if connection is None or connecting.cancelled_caught:
                host, port = origin[1], origin[2]
                raise httpx.ConnectTimeout(
                    f"connecting to {host}:{port} timed out", request=request
                )
        try:
            return await self._exchange(connection, origin, request, timeouts)
        except BaseException:
            await trio.aclose_forcefully(connection.stream)
            raise

    async def aclose(self) -> None:
        """Close every idle connection; responses still being read close with their reader."""
        self._closed = True
        self._reader.close()
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await trio.aclose_forcefully(connection.stream)

    # -- connections --------------------------------------------------------------

    def _idle_connection(self, origin: _Origin) -> _Connection | None:
        pool = self._idle.get(origin)
        while pool:
            connection = pool.pop()
            # Readable while idle: the server closed it (or broke the protocol).
            if not connection.socket.is_readable():
                return connection
            connection.socket.close()
        return None

    def _release(self, origin: _Origin, connection: _Connection) -> None:
        pool = self._idle.setdefault(origin, [])
        if self._closed or len(pool) >= self._max_idle:
            connection.socket.close()
        else:
            pool.append(connection)

    async def _connect(self, origin: _Origin, request: httpx.Request) -> _Connection | None:
        """A new connection (None when cancelled by the caller's connect timeout)."""
        scheme, host, port = origin
        stream: trio.abc.Stream | None = None
        tls: TlsStream | None = None
        try:
            tcp = await trio.open_tcp_stream(host, port)
            stream = tcp
            # Before a byte of the request (its key) goes out: a port on this
            # machine may be held by a subagent while its server is down.
            refusal = await self._servers.verdict(
                _host_port(tcp.socket.getpeername()), _host_port(tcp.socket.getsockname())
            )
            if refusal is not None:
                await trio.aclose_forcefully(tcp)
                raise httpx.ConnectError(
                    f"refused to send a request to {host}:{port}: {refusal}; a subagent may "
                    "hold the port while its server is down (S-SEC-1)",
                    request=request,
                )
            if scheme == "https":
                context = self._ssl_context or ssl.create_default_context()
                stream = tls = TlsStream(tcp, context, server_hostname=host)
                await tls.do_handshake()
        except trio.Cancelled:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise
        except (OSError, trio.BrokenResourceError) as exc:
            # A failed TLS handshake is the ssl.SSLError (an OSError) that says
            # why: a certificate not trusted, say.
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        return _Connection(stream, tcp.socket, tls)

    async def _exchange(
        self,
        connection: _Connection,
        origin: _Origin,
        request: httpx.Request,
        timeouts: dict[str, float | None],
    ) -> httpx.Response:
        h11_connection = h11.Connection(h11.CLIENT)
        body = await request.aread()
        headers = list(request.headers.raw)
        names = {name.lower() for name, _ in headers}
        if b"content-length" not in names and b"transfer-encoding" not in names:
            headers.append((b"content-length", str(len(body)).encode()))
        target = request.url.raw_path
        wire = h11_connection.send(
            h11.Request(method=request.method, target=target, headers=headers)
        )
        wire += h11_connection.send(h11.Data(data=body)) if body else b""
        wire += h11_connection.send(h11.EndOfMessage())
        stream = connection.stream
        try:
            with trio.fail_after(_seconds(timeouts.get("write"))):
                await stream.send_all(wire)
        except trio.TooSlowError:
            raise httpx.WriteTimeout("sending the request timed out", request=request) from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__, request=request) from exc
        read_timeout = timeouts.get("read")
        try:
            with trio.fail_after(_seconds(read_timeout)):
                head = await self._read_head(h11_connection, stream, request)
        except trio.TooSlowError:
            raise httpx.ReadTimeout("waiting for the response timed out", request=request) from None
        leftover, _ = h11_connection.trailing_data
        response_headers = [(bytes(name), bytes(value)) for name, value in head.headers]
        decoder = _body_decoder(request.method, head, response_headers)
        reusable = (
            head.http_version == b"1.1"
            and not isinstance(decoder, _UntilClose)
            and not _says_close(headers)
            and not _says_close(response_headers)
        )
        reader = _Body(
            transport=self,
            connection=connection,
            origin=origin,
            request=request,
            decoder=decoder,
            first=bytes(leftover),
            reusable=reusable,
            read_timeout=read_timeout,
        )
        if read_timeout is not None:
            reader.deadline = trio.current_time() + read_timeout
            self._track(reader)
        return httpx.Response(
            status_code=head.status_code,
            headers=response_headers,
            stream=reader,
            extensions={
                "http_version": b"HTTP/" + head.http_version,
                "reason_phrase": head.reason,
                BODY_EXTENSION: reader,
            },
        )

    @staticmethod
    async def _read_head(
        h11_connection: h11.Connection, stream: trio.abc.Stream, request: httpx.Request
    ) -> h11.Response:
        received = 0
        while True:
            try:
                event = h11_connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc), request=request) from None
            if isinstance(event, h11.Response):
                return event
            if event is h11.NEED_DATA:
                try:
                    data = cast(bytes, await stream.receive_some(_READ_SIZE))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
                received += len(data)
                if not data:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    )
                if received > _MAX_HEAD_BYTES + _READ_SIZE:
                    raise httpx.RemoteProtocolError("response head too large", request=request)
                h11_connection.receive_data(data)
            elif isinstance(event, h11.ConnectionClosed):
                raise httpx.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request
                )
            # h11.InformationalResponse (1xx): read on.

    # -- the read-idle deadline ---------------------------------------------------

    def _track(self, body: _Body) -> None:
        self._reading.add(body)
        run = trio.lowlevel.current_root_task()
        if self._sweeping is not run:
            self._sweeping = run
            trio.lowlevel.spawn_system_task(self._sweep, run, name="GatewayTransport sweeper")

    def _untrack(self, body: _Body) -> None:
        self._reading.discard(body)

    async def _sweep(self, run: object) -> None:
        # One task per trio run: wakes twice a second while responses are read,
        # and ends when none are (the next tracked response starts another).
        while self._sweeping is run and self._reading:
            await trio.sleep(_SWEEP_S)
            now = trio.current_time()
            for body in list(self._reading):
                if body.deadline <= now and not body.done:
                    body.time_out()
                    await trio.aclose_forcefully(body.connection.stream)
        if self._sweeping is run:
            self._sweeping = None


def _body_decoder(
    method: str, head: h11.Response, headers: list[tuple[bytes, bytes]]
) -> ChunkedBody | _LengthBody | _UntilClose:
    if method == "HEAD" or head.status_code in (204, 304):
        return _LengthBody(0)
    encodings = [value.lower() for name, value in headers if name == b"transfer-encoding"]
    if encodings and encodings[-1].rsplit(b",", 1)[-1].strip() == b"chunked":
        return ChunkedBody()
    lengths = [value for name, value in headers if name == b"content-length"]
    if lengths and not encodings:
        return _LengthBody(int(lengths[-1]))  # h11 checked that it is a number
    return _UntilClose()


def _says_close(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(
        name.lower() == b"connection" and b"close" in value.lower() for name, value in headers
    )


def _timeout(timeout: float | None) -> trio.CancelScope:
    return trio.move_on_after(_seconds(timeout))


def _host_port(address: Any) -> tuple[str, int]:
    """``(host, port)`` of a socket address (IPv6 ones carry flow and scope too)."""
    return str(address[0]), int(address[1])


def _seconds(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout
