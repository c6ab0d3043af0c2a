"""The connection state machine shared by both ends of a worker pipe pair.

Like h11, a ``Connection`` does no I/O: ``send`` turns a message into bytes
after checking that our role may send it now, ``receive_data`` turns bytes
into messages after checking that the peer's role may send them now.

Invariants:
- The worker speaks first (``hello``); the supervisor answers (``welcome``)
  and only then may either side send anything else. Both check the other's
  protocol version and fail with both versions named.
- Which message each role may send in each state is the table
  ``_TRANSITIONS``; anything missing from it is a ``ProtocolError``: a
  ``LocalProtocolError`` from ``send`` (our bug), a ``RemoteProtocolError``
  from ``receive_data`` (the peer's). Once the peer closed its end (EOF),
  ``send`` raises a ``RemoteProtocolError`` (the peer is gone, as when it
  broke the protocol) and ``receive_data`` a ``LocalProtocolError`` (bytes
  after the end of the stream can only be our mistake).
- Every ``response``/``error``/``progress`` names a request the receiver
  sent and has not seen answered; every ``request`` id is fresh.
- After any ``ProtocolError`` the connection is in ``ERROR`` and every later
  call raises that error again, with one exception: a message whose frame
  would break a limit (``LocalProtocolError`` with ``limit`` set) is refused
  by ``send`` before it changes anything, and the connection stays usable.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

import msgpack
from pydantic import BaseModel, TypeAdapter, ValidationError

from ._commands import SupervisorRequest
from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from ._frame import FrameDecoder, FrameLimits, encode_frame, frame_body
from ._messages import (
    PROTOCOL_VERSION,
    ErrorReply,
    Hello,
    Message,
    Progress,
    Response,
    SupervisorMessage,
    Welcome,
    WorkerMessage,
    supervisor_message_adapter,
    worker_message_adapter,
)
from ._methods import WorkerRequest

__all__ = ["Connection", "ConnectionClosed", "ConnectionState", "Role"]


class Role(enum.StrEnum):
    """Which end of the pipe pair a connection is."""

    SUPERVISOR = "supervisor"
    WORKER = "worker"

    @property
    def peer(self) -> Role:
        return Role.WORKER if self is Role.SUPERVISOR else Role.SUPERVISOR


class ConnectionState(enum.StrEnum):
    """Shared state of the conversation; both ends track it identically."""

    AWAIT_HELLO = "await_hello"
    AWAIT_WELCOME = "await_welcome"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed its end (EOF) at a frame boundary."""


_S, _W = Role.SUPERVISOR, Role.WORKER
_AWAIT_HELLO, _AWAIT_WELCOME = ConnectionState.AWAIT_HELLO, ConnectionState.AWAIT_WELCOME
_OPEN, _CLOSING = ConnectionState.OPEN, ConnectionState.CLOSING
_CLOSED = ConnectionState.CLOSED

_OPEN_TRAFFIC = ("request", "response", "error", "progress", "heartbeat")
# The pipes are full duplex: whatever the worker sent before it read the
# shutdown is still legal when it arrives, and the supervisor may still answer
# or cancel the requests in flight.
_WORKER_AFTER_SHUTDOWN = ("request", "response", "error", "progress", "event", "heartbeat")
_SUPERVISOR_AFTER_SHUTDOWN = ("response", "error", "progress", "cancel")

#: (state, sender, message type) -> next state. The single source of truth for
#: who may say what, when.
_TRANSITIONS: dict[tuple[ConnectionState, Role, str], ConnectionState] = {
    (_AWAIT_HELLO, _W, "hello"): _AWAIT_WELCOME,
    (_AWAIT_WELCOME, _S, "welcome"): _OPEN,
    **{(_OPEN, role, kind): _OPEN for role in (_S, _W) for kind in _OPEN_TRAFFIC},
    (_OPEN, _W, "event"): _OPEN,
    (_OPEN, _S, "cancel"): _OPEN,
    (_OPEN, _S, "shutdown"): _CLOSING,
    **{(_CLOSING, _W, kind): _CLOSING for kind in _WORKER_AFTER_SHUTDOWN},
    **{(_CLOSING, _S, kind): _CLOSING for kind in _SUPERVISOR_AFTER_SHUTDOWN},
}

_ADAPTERS: dict[Role, TypeAdapter[Any]] = {
    _W: worker_message_adapter,
    _S: supervisor_message_adapter,
}


def _classes(union: Any) -> tuple[type, ...]:
    """The message classes of a (nested, ``Annotated``) discriminated union."""
    args = get_args(union)
    if not args:
        return (union,)
    if get_origin(union) is Annotated:
        return _classes(args[0])
    return tuple(cls for arg in args for cls in _classes(arg))


#: The message classes each role may send (its direction's union).
_SENDABLE: dict[Role, tuple[type, ...]] = {
    _W: _classes(WorkerMessage),
    _S: _classes(SupervisorMessage),
}
#: The ``type`` tags each role may send.
_KNOWN_TYPES: dict[Role, frozenset[str]] = {
    role: frozenset(cls.model_fields["type"].default for cls in classes)  # type: ignore[attr-defined]
    for role, classes in _SENDABLE.items()
}
# Tuples, not ``A | B``: that would build a union object on every check.
_ANSWERS = (Response, ErrorReply)
_REQUESTS = (WorkerRequest, SupervisorRequest)
#: ``_TRANSITIONS`` split by (state, sender): message type -> next state. A
#: connection holds the two tables for its current state, so checking a
#: message is one lookup by its type.
_MOVES: dict[tuple[ConnectionState, Role], dict[str, ConnectionState]] = {
    (state, role): {
        kind: after
        for (before, sender, kind), after in _TRANSITIONS.items()
        if before is state and sender is role
    }
    for state in ConnectionState
    for role in Role
}


#: The field that picks the class within a message type that has several.
_INNER_TAGS = {"request": "method", "event": "name"}

_PACKER_KEEP = 64 * 1024


def _model_fields(value: object) -> dict[str, Any]:
    # A nested model (a request's params) packs as its fields, as
    # ``model_dump`` would; anything else is left to the slow path.
    if isinstance(value, BaseModel):
        fields: dict[str, Any] = value.__dict__
        return fields
    raise TypeError(f"cannot pack {type(value).__name__}")


def _new_packer() -> Callable[[Any], bytes]:
    packer = msgpack.Packer(use_bin_type=True, buf_size=4096, default=_model_fields)
    pack: Callable[[Any], bytes] = packer.pack
    return pack


class Connection:
    """Protocol state for one end (``our_role``) of a worker connection."""

    def __init__(
        self,
        our_role: Role,
        *,
        limits: FrameLimits | None = None,
        max_pending_requests: int = 4096,
    ) -> None:
        self.our_role = our_role
        self.limits = limits or FrameLimits()
        self.max_pending_requests = max_pending_requests
        self._peer = our_role.peer
        self._sendable = _SENDABLE[our_role]
        self._peer_types = _KNOWN_TYPES[self._peer]
        self._validate = _ADAPTERS[self._peer].validator.validate_python
        # One packer per connection: ``msgpack.packb`` sets up a new one (and
        # its buffer) per call.
        self._pack = _new_packer()
        self._decoder = FrameDecoder(self.limits)
        self._error: ProtocolError | None = None
        # Ids of requests each side sent and the other has not yet answered,
        # each with the size of its frame.
        self._pending: dict[Role, dict[int, int]] = {_S: {}, _W: {}}
        self._ours = self._pending[our_role]
        self._theirs = self._pending[self._peer]
        self._next_id = 0
        #: The worker's id, from its hello (None before the handshake).
        self.worker_id: str | None = None
        self.state = ConnectionState.AWAIT_HELLO

    @property
    def state(self) -> ConnectionState:
        """Where the conversation is; both ends agree."""
        return self._state

    @state.setter
    def state(self, state: ConnectionState) -> None:
        self._state = state
        self._our_moves = _MOVES[state, self.our_role]
        self._peer_moves = _MOVES[state, self._peer]

    # -- public API -------------------------------------------------------------

    def next_request_id(self) -> int:
        """A fresh id for a request we are about to send."""
        self._next_id += 1
        return self._next_id

    def pending_requests(self, sender: Role) -> frozenset[int]:
        """Requests ``sender`` made that have not been answered yet."""
        return frozenset(self._pending[sender])

    def request_size(self, sender: Role, request_id: int) -> int:
        """The size of the frame of ``sender``'s pending request ``request_id`` (0: none)."""
        return self._pending[sender].get(request_id, 0)

    @property
    def incoming_frame_size(self) -> int:
        """The size of the peer's frame begun and not complete (header included; 0: none).

        Known from its header, before its body is read: a reader can decide
        whether to read on (``supervisor.kernel._byte_budget``).
        """
        return self._decoder.incoming

    def send(self, message: Message) -> bytes:
        """Check that we may send ``message`` now and return its frame."""
        if self._error is not None:
            raise self._error
        if self._state is _CLOSED:
            raise RemoteProtocolError(
                f"connection is closed: the {self._peer.value} closed its end"
            )
        try:
            if not isinstance(message, self._sendable):
                raise LocalProtocolError(
                    f"{self.our_role.value} may not send {type(message).__name__}: "
                    "it belongs to the other direction"
                )
            frame = self._encode(message)
        except LocalProtocolError as exc:
            # A frame over a limit was refused before anything changed: the
            # caller may send something smaller instead (an error answer).
            if exc.limit is None:
                self._fail(exc)
            raise
        try:
            self._apply(
                self.our_role, message, self._our_moves, self._ours, self._theirs, len(frame)
            )
        except ProtocolError as exc:
            self._fail(exc)
            raise
        return frame

    def _encode(self, message: Message) -> bytes:
        # The models hold only their fields, so ``__dict__`` is what
        # ``model_dump`` would return unless a value needs pydantic to
        # dump it (hello's sandbox report); those take the slow path.
        fields = message.__dict__
        try:
            body: bytes = self._pack(fields)
        except (TypeError, ValueError, OverflowError):
            return encode_frame(message.model_dump(mode="python"), self.limits)
        if len(body) > _PACKER_KEEP:
            # Its buffer grew to this frame's size and would never shrink.
            self._pack = _new_packer()
        return frame_body(fields, body, self.limits)

    def receive_data(self, data: bytes) -> list[Message | ConnectionClosed]:
        """Feed bytes from the peer (``b""`` = EOF); return the messages they complete."""
        if self._error is not None:
            raise self._error
        if self._state is _CLOSED:
            raise LocalProtocolError("connection is closed: data fed after the end of the stream")
        try:
            if not data:
                return [self._close()]
            objects = self._decoder.feed(data)
            sizes = self._decoder.sizes
            return [self._accept(raw, size) for raw, size in zip(objects, sizes, strict=True)]
        except ProtocolError as exc:
            self._fail(exc)
            raise

    # -- internals --------------------------------------------------------------

    def _fail(self, exc: ProtocolError) -> None:
        self._error = exc
        self.state = ConnectionState.ERROR

    def _close(self) -> ConnectionClosed:
        if self._decoder.buffered:
            raise RemoteProtocolError(
                f"connection closed in the middle of a frame ({self._decoder.buffered} bytes)"
            )
        self.state = _CLOSED
        return ConnectionClosed()

    def _accept(self, raw: Any, size: int) -> Message:
        if not isinstance(raw, dict):
            raise RemoteProtocolError(
                f"frame from {self._peer.value} is a {type(raw).__name__}, not a map"
            )
        kind = raw.get("type")
        if not isinstance(kind, str) or kind not in self._peer_types:
            raise RemoteProtocolError(
                f"message type {kind!r} is not part of the {self._peer.value}->"
                f"{self.our_role.value} protocol"
            )
        try:
            message: Message = self._validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = first["loc"][1:]
            tag = _INNER_TAGS.get(kind)
            if tag is not None and loc and loc[0] == raw.get(tag):
                loc = loc[1:]  # a request's method, an event's name: its body is what failed
            if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
                loc = (str(first.get("ctx", {}).get("discriminator", "")).strip("'"),)
            where = ".".join(str(p) for p in loc) or "message"
            raise RemoteProtocolError(
                f"invalid {kind!r} message from {self._peer.value}: {where}: {first['msg']}"
            ) from None
        self._apply(self._peer, message, self._peer_moves, self._theirs, self._ours, size)
        return message

    def _violation(self, sender: Role, message: str, *, limit: str | None = None) -> ProtocolError:
        """``sender`` broke the protocol: a local error if that is us, else a remote one."""
        kind = LocalProtocolError if sender is self.our_role else RemoteProtocolError
        return kind(message, limit=limit)

    def _apply(
        self,
        sender: Role,
        message: Message,
        moves: dict[str, ConnectionState],
        senders_requests: dict[int, int],
        receivers_requests: dict[int, int],
        size: int,
    ) -> None:
        kind = message.type
        next_state = moves.get(kind)
        if next_state is None:
            raise self._violation(
                sender,
                f"{sender.value} may not send {kind!r} while the connection is {self._state.value}",
            )
        if isinstance(message, _ANSWERS):
            del self._answered(sender, receivers_requests, message.id, kind)[message.id]
        elif isinstance(message, _REQUESTS):
            self._open_request(sender, senders_requests, message.id, size)
        elif isinstance(message, Progress):
            self._answered(sender, receivers_requests, message.id, kind)
        elif isinstance(message, Hello):
            self._check_version(sender, message.protocol_version)
            self.worker_id = message.worker_id
        elif isinstance(message, Welcome):
            self._check_version(sender, message.protocol_version)
            if message.worker_id != self.worker_id:
                raise self._violation(
                    sender,
                    f"welcome for worker {message.worker_id!r} answers the hello of "
                    f"{self.worker_id!r}",
                )
        if next_state is not self._state:
            self.state = next_state

    def _check_version(self, sender: Role, version: int) -> None:
        if version != PROTOCOL_VERSION:
            theirs, ours = (version, PROTOCOL_VERSION)
            raise self._violation(
                sender,
                f"protocol version mismatch: {sender.value} speaks version {theirs}, "
                f"{sender.peer.value} speaks version {ours}; run the same subvisor "
                "installation on both sides",
            )

    def _open_request(
        self, sender: Role, pending: dict[int, int], request_id: int, size: int
    ) -> None:
        if request_id in pending:
            raise self._violation(
                sender, f"{sender.value} reused request id {request_id} while it is pending"
            )
        if len(pending) >= self.max_pending_requests:
            raise self._violation(
                sender,
                f"{sender.value} has more than {self.max_pending_requests} pending requests",
                limit="max_pending_requests",
            )
        pending[request_id] = size

    def _answered(
        self, sender: Role, pending: dict[int, int], request_id: int, kind: str
    ) -> dict[int, int]:
        if request_id not in pending:
            raise self._violation(
                sender,
                f"{kind!r} for request id {request_id}, which {sender.peer.value} has no "
                "pending request with",
            )
        return pending
