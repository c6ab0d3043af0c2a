"""The node link: one authenticated, multiplexed byte stream to a remote node host.

With workers on other machines (``placement = "ray"``), the supervisor talks
to each node's host over one stream (TCP). On it travel, as link frames:

- ``AUTH``: the first frame from the supervisor, the host's secret token;
- ``DATA``/``EOF`` on a worker's channel: that worker's protocol frames,
  exactly as they would cross its pipes, cut in chunks;
- ``CREDIT`` on a channel: the receiver consumed that many bytes, so the
  sender may send that many more (per-channel flow control: a worker that
  does not read stalls only itself, never the link);
- ``CONTROL``: one msgpack message (spawn, signal, spawned, exited, the
  host's memory report, and the supervisor's heartbeat ping and its pong).

A link frame is a 9-byte header (kind, channel, payload length; big-endian)
and its payload. This module only encodes and decodes (sans-I/O): what we
cannot encode is a ``LocalProtocolError``, what we cannot read a
``RemoteProtocolError``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ._errors import LocalProtocolError, RemoteProtocolError
from ._messages import ResourceLimits
from ._sandbox import SandboxPolicy

__all__ = [
    "LINK_CHUNK",
    "LINK_TOKEN_BYTES",
    "LinkFrame",
    "LinkFrameDecoder",
    "LinkKind",
    "NodeControl",
    "NodeMemory",
    "NodePing",
    "NodePong",
    "NodeSignal",
    "NodeSpawn",
    "NodeSpawnFailed",
    "NodeSpawned",
    "NodeWelcome",
    "NodeWorkerExited",
    "decode_node_control",
    "encode_link_frame",
    "encode_node_control",
]

_HEADER = struct.Struct("!BII")
#: The most one DATA frame carries; bigger writes are cut into chunks of it.
LINK_CHUNK = 256 * 1024
#: Length of the node host's secret, the payload of ``AUTH``.
LINK_TOKEN_BYTES = 32
_MAX_PAYLOAD = max(LINK_CHUNK, 1 << 20)


class LinkKind(enum.IntEnum):
    """What a link frame carries."""

    AUTH = 1
    DATA = 2
    EOF = 3
    CREDIT = 4
    CONTROL = 5


@dataclass(frozen=True, slots=True)
class LinkFrame:
    """One decoded link frame."""

    kind: LinkKind
    channel: int
    payload: bytes


def encode_link_frame(kind: LinkKind, channel: int, payload: bytes = b"") -> bytes:
    """The bytes of one link frame."""
    if len(payload) > _MAX_PAYLOAD:
        raise LocalProtocolError(f"link frame of {len(payload)} bytes exceeds {_MAX_PAYLOAD}")
    return _HEADER.pack(kind, channel, len(payload)) + payload


class LinkFrameDecoder:
    """Cuts the bytes received on a link into ``LinkFrame``s."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def receive_data(self, data: bytes | bytearray) -> list[LinkFrame]:
        """Feed received bytes; return the frames now complete."""
        self._buffer += data
        frames: list[LinkFrame] = []
        view = self._buffer
        start = 0
        while len(view) - start >= _HEADER.size:
            kind, channel, length = _HEADER.unpack_from(view, start)
            if length > _MAX_PAYLOAD:
                raise RemoteProtocolError(f"link frame of {length} bytes exceeds {_MAX_PAYLOAD}")
            end = start + _HEADER.size + length
            if len(view) < end:
                break
            try:
                link_kind = LinkKind(kind)
            except ValueError:
                raise RemoteProtocolError(f"unknown link frame kind {kind}") from None
            frames.append(LinkFrame(link_kind, channel, bytes(view[start + _HEADER.size : end])))
            start = end
        del self._buffer[:start]
        return frames


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeSpawn(_Frozen):
    """Supervisor to host: fork a worker and bind its pipes to ``channel``."""

    type: Literal["spawn"] = "spawn"
    channel: int
    worker_id: str
    limits: ResourceLimits = ResourceLimits()
    sandbox: SandboxPolicy = SandboxPolicy()


class NodeSignal(_Frozen):
    """Supervisor to host: send ``signal`` to the worker's whole tree."""

    type: Literal["signal"] = "signal"
    channel: int
    signal: int


class NodeWelcome(_Frozen):
    """Host to supervisor, once authenticated: who and where it is."""

    type: Literal["welcome"] = "welcome"
    node_id: str
    host_pid: int
    zygote_pid: int
    #: How caps over each worker's tree are enforced on this node.
    tree_caps: str


class NodeSpawned(_Frozen):
    """Host to supervisor: the worker runs, as ``pid`` on the node."""

    type: Literal["spawned"] = "spawned"
    channel: int
    pid: int


class NodeSpawnFailed(_Frozen):
    """Host to supervisor: the worker could not be started."""

    type: Literal["spawn_failed"] = "spawn_failed"
    channel: int
    error: str


class NodeWorkerExited(_Frozen):
    """Host to supervisor: the worker was reaped; the host's cause if it stopped it."""

    type: Literal["exited"] = "exited"
    channel: int
    exit_code: int | None
    signal: int | None
    cpu_seconds: float
    max_rss_kb: int
    #: An ``ExitKind`` value and reason when the host stopped it for a cap.
    cause_kind: str | None = None
    cause_reason: str | None = None


class NodeMemory(_Frozen):
    """Host to supervisor, about every second: each live worker's RSS now, by channel."""

    type: Literal["memory"] = "memory"
    #: ``(channel, RSS in bytes)`` of each worker the host could read.
    rss: list[tuple[int, Annotated[int, Field(ge=0)]]]


class NodePing(_Frozen):
    """Supervisor to host: the heartbeat; the host answers ``NodePong`` with ``seq``."""

    type: Literal["ping"] = "ping"
    seq: int


class NodePong(_Frozen):
    """Host to supervisor: the answer to ``NodePing`` ``seq``."""

    type: Literal["pong"] = "pong"
    seq: int


NodeControl = Annotated[
    NodeSpawn
    | NodeSignal
    | NodeWelcome
    | NodeSpawned
    | NodeSpawnFailed
    | NodeWorkerExited
    | NodeMemory
    | NodePing
    | NodePong,
    Field(discriminator="type"),
]
_control_adapter: TypeAdapter[NodeControl] = TypeAdapter(NodeControl)


def encode_node_control(message: BaseModel) -> bytes:
    """A ``CONTROL`` frame (channel 0) carrying ``message``."""
    try:
        data: bytes = msgpack.packb(message.model_dump(mode="python"), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode node control message: {exc}") from exc
    return encode_link_frame(LinkKind.CONTROL, 0, data)


def decode_node_control(payload: bytes) -> NodeControl:
    """Parse the payload of a ``CONTROL`` frame."""
    try:
        data: Any = msgpack.unpackb(payload, raw=False, max_ext_len=0)
    except Exception as exc:
        raise RemoteProtocolError(f"undecodable node control message: {exc}") from exc
    try:
        return _control_adapter.validate_python(data)
    except ValidationError as exc:
        raise RemoteProtocolError(
            f"invalid node control message: {exc.errors()[0]['msg']}"
        ) from None
