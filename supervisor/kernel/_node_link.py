"""``NodeLink``: trio's side of a node link (``protocol._node``), for either end.

One link carries every worker of one node between the supervisor and that
node's host. Each worker is a ``LinkChannel``, a byte stream with the same
three calls as the pipes of a local worker (``receive_some``, ``send_all``,
``close``), so a ``WorkerHandle`` reads and writes it as it would its pipes.

Invariants:
- One task reads the stream (``run``) and it never waits on anyone: what it
  reads is queued for its channel, which may hold no more than the credit
  its receiver granted; a peer sending past that breaks the protocol.
- One task writes the stream; everyone else queues whole frames without
  waiting (``send_nowait``), so a frame is never torn and the frames queued
  while it wrote go out in one write.
- A channel's writer waits for credit; its reader grants credit back as its
  consumer takes bytes. A worker that stops reading stalls its channel
  only, as a full pipe would, never the link.
- A peer that is gone or hung ends the link, whatever TCP still does: the
  supervisor's end pings (``NodePing``) every ``Heartbeat.interval_s`` and
  the host's end answers (``NodePong``) from its reader; when nothing at
  all arrived through the pings of ``Heartbeat.timeout_s`` the link ends. This covers what
  TCP keepalive cannot: a host process stopped (SIGSTOP, a debugger, swap
  death) while its kernel still ACKs, and keepalive's silence while sent
  data is unacknowledged (``TCP_USER_TIMEOUT``, set by ``tune_link_socket``,
  bounds that one in the kernel too).

Races:
- Bytes may arrive for a channel its receiver already closed (the worker
  ended): they are dropped.
- Two tasks may write to one channel at once (a request and an answer):
  each protocol frame is written whole by one of them, in turn; a writer
  cancelled after its first chunk finishes the frame shielded, since half a
  frame would corrupt the worker's stream.
"""

from __future__ import annotations

import hmac
import itertools
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass

import trio
from pydantic import BaseModel

from protocol import (
    LINK_CHUNK,
    LINK_TOKEN_BYTES,
    LinkFrame,
    LinkFrameDecoder,
    LinkKind,
    NodeControl,
    NodePing,
    NodePong,
    RemoteProtocolError,
    decode_node_control,
    encode_link_frame,
    encode_node_control,
)

from ._errors import SubvisorError

__all__ = ["Heartbeat", "LinkChannel", "NodeLink", "NodeLinkAuthError", "tune_link_socket"]

#: Bytes a channel's sender may have in flight before its receiver consumed them.
CHANNEL_WINDOW = 1 << 20
_READ_SIZE = 256 * 1024
#: TCP keepalive on every link: a silent peer is dropped after ~5 + 3 * 2 s.
_KEEPALIVE = {"TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 2, "TCP_KEEPCNT": 3}
#: Sent data unacknowledged this long ends the connection (keepalive does not probe then).
_USER_TIMEOUT_MS = 11_000


def tune_link_socket(sock: trio.socket.SocketType) -> None:
    """Keepalive and ``TCP_USER_TIMEOUT`` on a link's socket (either end; Linux names)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in _KEEPALIVE.items():
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, _USER_TIMEOUT_MS)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The supervisor end's pings: one every ``interval_s``; silence for ``timeout_s`` ends it."""

    interval_s: float = 2.0
    timeout_s: float = 10.0


class NodeLinkAuthError(SubvisorError):
    """The peer did not present the node host's token."""


class LinkChannel:
    """One worker's byte stream over a link: ``receive_some``, ``send_all``, ``close``."""

    def __init__(self, link: NodeLink, channel_id: int, window: int) -> None:
        self.channel_id = channel_id
        self._link = link
        self._window = window
        self._buffer = bytearray()
        self._eof = False
        self._closed = False
        self._broken = False
        self._readable = trio.Event()
        self._send_credit = window
        self._credited = trio.Event()
        self._unacknowledged = 0
        self._write_lock = trio.Lock()

    # -- driven by the link's reader ----------------------------------------------------

    def _deliver(self, data: bytes) -> None:
        if self._closed:
            return
        if len(self._buffer) + len(data) > self._window:
            raise RemoteProtocolError(f"channel {self.channel_id}: the peer sent past its credit")
        self._buffer += data
        self._readable.set()

    def _end(self) -> None:
        self._eof = True
        self._readable.set()

    def _grant(self, credit: int) -> None:
        self._send_credit += credit
        self._credited.set()

    def _break(self) -> None:
        self._broken = True
        self._eof = True
        self._readable.set()
        self._credited.set()

    # -- the stream ---------------------------------------------------------------------

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` once the peer's end closed or the link ended.

        Cancelled only before it takes any bytes, never after (as trio's own
        streams): a cancelled reader must not lose what it took.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._buffer and not self._eof and not self._closed:
            self._readable = trio.Event()
            await self._readable.wait()
        if self._closed:
            raise trio.ClosedResourceError("channel was closed")
        if not self._buffer:
            await trio.lowlevel.checkpoint()
            return b""
        data = bytes(self._buffer[:max_bytes])
        del self._buffer[:max_bytes]
        self._unacknowledged += len(data)
        # Granted in halves of the window: one CREDIT frame per ~512 KiB, not per read.
        if self._unacknowledged >= self._window // 2 or not self._buffer:
            if self._unacknowledged and not self._broken:
                credit = self._unacknowledged.to_bytes(4, "big")
                self._link.send_nowait(encode_link_frame(LinkKind.CREDIT, self.channel_id, credit))
            self._unacknowledged = 0
        await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def send_all(self, data: bytes) -> None:
        """Send ``data`` whole, after any write already under way on this channel."""
        async with self._write_lock:
            view = memoryview(data)
            view = await self._send_chunk(view)
            if view:
                with trio.CancelScope(shield=True):
                    while view:
                        view = await self._send_chunk(view)

    async def _send_chunk(self, view: memoryview) -> memoryview:
        while self._send_credit <= 0:
            self._raise_if_unusable()
            self._credited = trio.Event()
            await self._credited.wait()
        self._raise_if_unusable()
        size = min(len(view), self._send_credit, LINK_CHUNK)
        self._send_credit -= size
        self._link.send_nowait(
            encode_link_frame(LinkKind.DATA, self.channel_id, bytes(view[:size]))
        )
        return view[size:]

    def _raise_if_unusable(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("channel was closed")
        if self._broken:
            raise trio.BrokenResourceError("the node link ended")

    def send_eof(self) -> None:
        """Tell the peer no more bytes come on this channel."""
        if not self._broken and not self._closed:
            self._link.send_nowait(encode_link_frame(LinkKind.EOF, self.channel_id))

    def close(self) -> None:
        """Stop using the channel: wake its waiters; bytes that still arrive are dropped."""
        if self._closed:
            return
        self._closed = True
        self._readable.set()
        self._credited.set()
        self._link.forget(self.channel_id)


class NodeLink:
    """One authenticated stream, multiplexed into a channel per worker and control messages."""

    def __init__(self, stream: trio.abc.Stream, *, window: int = CHANNEL_WINDOW) -> None:
        self._stream = stream
        self._window = window
        self._decoder = LinkFrameDecoder()
        self._early: list[LinkFrame] = []
        self._channels: dict[int, LinkChannel] = {}
        self._out_send, self._out_receive = trio.open_memory_channel[bytes](math.inf)
        #: Set once the link has ended (stream closed, broken or violated).
        self.ended = trio.Event()
        #: Why the link ended, once it has.
        self.end_reason: str | None = None
        #: When anything last arrived from the peer (trio clock).
        self._heard_at = 0.0

    # -- authentication, before ``run`` -------------------------------------------------

    async def authenticate(self, token: bytes) -> NodeControl:
        """As the supervisor: present ``token``, return the host's first control message."""
        await self._stream.send_all(encode_link_frame(LinkKind.AUTH, 0, token))
        while True:
            frames = await self._receive_frames()
            if frames:
                first, *self._early = frames
                if first.kind is not LinkKind.CONTROL:
                    raise RemoteProtocolError(f"the node host answered with {first.kind.name}")
                return decode_node_control(first.payload)

    async def accept(self, token: bytes) -> None:
        """As the host: ``NodeLinkAuthError`` unless the peer presents ``token``."""
        frames: list[LinkFrame] = []
        while not frames:
            frames = await self._receive_frames()
        first, *self._early = frames
        presented = first.payload if first.kind is LinkKind.AUTH else b""
        if len(presented) != LINK_TOKEN_BYTES or not hmac.compare_digest(presented, token):
            raise NodeLinkAuthError("the peer did not present the node host's token")

    async def _receive_frames(self) -> list[LinkFrame]:
        data = await self._stream.receive_some(_READ_SIZE)
        if not data:
            raise trio.BrokenResourceError("the node link closed")
        return self._decoder.receive_data(data)

    # -- running --------------------------------------------------------------------------

    def channel(self, channel_id: int) -> LinkChannel:
        """Open the channel ``channel_id`` (bytes for it are queued from now on)."""
        channel = self._channels[channel_id] = LinkChannel(self, channel_id, self._window)
        if self.ended.is_set():
            channel._break()
        return channel

    def forget(self, channel_id: int) -> None:
        """Drop the channel ``channel_id``: bytes still arriving for it are discarded."""
        self._channels.pop(channel_id, None)

    def send_nowait(self, frame: bytes) -> None:
        """Queue one whole frame for the writer (dropped once the link ended)."""
        if not self.ended.is_set():
            self._out_send.send_nowait(frame)

    def send_control(self, message: BaseModel) -> None:
        """Queue one control message."""
        self.send_nowait(encode_node_control(message))

    async def run(
        self, on_control: Callable[[NodeControl], None], *, heartbeat: Heartbeat | None = None
    ) -> None:
        """Read and write until the stream ends; then break every channel.

        ``on_control`` is called, in order and without waiting, for each
        control message (pings are answered here, pongs taken here). With
        ``heartbeat`` (the supervisor's end) the peer is pinged, and the link
        ends when nothing arrived from it for ``heartbeat.timeout_s``.
        Returns (never raises) when the link ends; its reason is in
        ``end_reason``.
        """
        self._heard_at = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop)
                if heartbeat is not None:
                    nursery.start_soon(self._ping, heartbeat, nursery.cancel_scope)
                await self._read_loop(on_control)
                nursery.cancel_scope.cancel()
        except* RemoteProtocolError as group:
            self.end_reason = f"protocol violation on the node link: {group.exceptions[0]}"
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            self.end_reason = f"the node link broke: {group.exceptions[0]}"
        finally:
            if self.end_reason is None:
                self.end_reason = "the node link closed"
            self.ended.set()
            for channel in list(self._channels.values()):
                channel._break()
            self._out_send.close()
            with trio.CancelScope(shield=True):
                await self._stream.aclose()

    async def aclose(self) -> None:
        """End the link (the peer sees it closed); ``run`` returns."""
        await self._stream.aclose()

    async def _read_loop(self, on_control: Callable[[NodeControl], None]) -> None:
        frames, self._early = self._early, []
        while True:
            for frame in frames:
                self._dispatch(frame, on_control)
            data = await self._stream.receive_some(_READ_SIZE)
            if not data:
                return
            self._heard_at = trio.current_time()
            frames = self._decoder.receive_data(data)

    async def _ping(self, heartbeat: Heartbeat, scope: trio.CancelScope) -> None:
        # Counted in rounds, not read off the clock: a supervisor starved for
        # longer than the timeout wakes to a stale ``_heard_at`` before its
        # reader has run; a round unanswered needs a ping sent after the last frame.
        rounds = math.ceil(heartbeat.timeout_s / heartbeat.interval_s)
        unanswered = 0
        for seq in itertools.count():
            sent_at = trio.current_time()
            self.send_control(NodePing(seq=seq))
            await trio.sleep(heartbeat.interval_s)
            # Any frame counts as an answer: a pong may queue behind a burst of data.
            unanswered = 0 if self._heard_at >= sent_at else unanswered + 1
            if unanswered >= rounds:
                silent = trio.current_time() - self._heard_at
                self.end_reason = (
                    f"the node host answered no heartbeat for {silent:.0f} s "
                    "(hung, stopped or unreachable)"
                )
                scope.cancel()
                return

    def _dispatch(self, frame: LinkFrame, on_control: Callable[[NodeControl], None]) -> None:
        if frame.kind is LinkKind.CONTROL:
            message = decode_node_control(frame.payload)
            if isinstance(message, NodePing):
                self.send_control(NodePong(seq=message.seq))
            elif not isinstance(message, NodePong):
                on_control(message)
            return
        channel = self._channels.get(frame.channel)
        if channel is None:
            return  # its worker ended and its receiver let go of it
        if frame.kind is LinkKind.DATA:
            channel._deliver(frame.payload)
        elif frame.kind is LinkKind.EOF:
            channel._end()
        elif frame.kind is LinkKind.CREDIT:
            if len(frame.payload) != 4:
                raise RemoteProtocolError("a CREDIT frame carries 4 bytes")
            channel._grant(int.from_bytes(frame.payload, "big"))
        else:
            raise RemoteProtocolError(f"unexpected {frame.kind.name} frame on an open link")

    async def _write_loop(self) -> None:
        async for frame in self._out_receive:
            batch = [frame]
            while True:
                try:
                    batch.append(self._out_receive.receive_nowait())
                except trio.WouldBlock:
                    break
            await self._stream.send_all(b"".join(batch) if len(batch) > 1 else frame)
