"""``TlsStream``: TLS over a trio socket stream that can also be decrypted without a task.

trio's ``SSLStream`` decrypts only inside its own ``receive_some``, so a TLS
body had to be read by a task of its own, one wake-up per read. This stream
keeps the TLS state in an ``ssl.SSLObject`` between two memory BIOs: a task
can still ``receive_some`` (the response head, an iterated body), and the
gateway transport's one reader task can read the raw socket in its rounds and
hand the bytes to ``decrypt``, as it reads a plain body. Certificate checks,
protocol versions and ciphers are the ``SSLContext``'s, as with ``SSLStream``.

Invariants:

- Sends and receives never overlap: HTTP/1.1 alternates request and
  response on a connection, and a body is read by one party at a time (its
  iterator, or the reader task while it is fed). So there is no lock here,
  unlike ``SSLStream``, which must allow both at once.
- A read never writes. What TLS must send after one waits in the outgoing
  BIO for the next send: OpenSSL answers a peer's TLS 1.3 ``KeyUpdate``
  request with its next write anyway, and HTTP sends nothing mid-response.
- The end of the stream is the end, with or without ``close_notify``, as
  ``SSLStream(https_compatible=True)`` reads it: HTTP's own framing tells a
  whole body from a cut one.
"""

from __future__ import annotations

import ssl

import trio

__all__ = ["TlsStream"]

_READ_SIZE = 64 * 1024


class TlsStream(trio.abc.Stream):
    """A client TLS connection over ``transport_stream``; ``do_handshake`` before use."""

    def __init__(
        self, transport_stream: trio.SocketStream, context: ssl.SSLContext, server_hostname: str
    ) -> None:
        self.transport_stream = transport_stream
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_hostname=server_hostname
        )

    async def do_handshake(self) -> None:
        """Negotiate TLS; raises ``ssl.SSLError`` (a certificate not trusted, say), ``OSError``."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._exchange()
        await self._flush()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and send it whole."""
        view = memoryview(data)
        while view:
            try:
                written = self._tls.write(view)
            except ssl.SSLWantReadError:
                await self._exchange()
                continue
            view = view[written:]
        await self._flush()

    async def wait_send_all_might_not_block(self) -> None:
        """As the socket's."""
        await self.transport_stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to ``max_bytes`` of plaintext; ``b""`` once the stream has ended."""
        while True:
            try:
                return self._tls.read(max_bytes or _READ_SIZE)
            except ssl.SSLWantReadError:
                await self._exchange()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    def decrypt(self, raw: bytes | None) -> tuple[bytes, bool]:
        """The plaintext ``raw`` completes, and whether the stream ended.

        ``raw``: bytes just read from the socket, ``b""`` when the read found
        its end, or None to take only what is already buffered. Raises
        ``ssl.SSLError`` (an ``OSError``) for a broken record.
        """
        if raw:
            self._incoming.write(raw)
        elif raw is not None:
            self._incoming.write_eof()
        pieces: list[bytes] = []
        ended = False
        while True:
            try:
                piece = self._tls.read(_READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                ended = True
                break
            if not piece:
                ended = True
                break
            pieces.append(piece)
        return b"".join(pieces), ended

    @property
    def buffered(self) -> bool:
        """Whether bytes received are still held here, not yet read as plaintext."""
        return bool(self._incoming.pending or self._tls.pending())

    async def aclose(self) -> None:
        """Close the socket (no ``close_notify``: an HTTP client need not send one)."""
        await self.transport_stream.aclose()

    async def _exchange(self) -> None:
        """What TLS waits for (``SSLWantReadError``): send what it queued, then read."""
        await self._flush()
        await self._fill()

    async def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            await self.transport_stream.send_all(pending)

    async def _fill(self) -> None:
        data = await self.transport_stream.receive_some(_READ_SIZE)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
