"""Frame codec: a 4-byte big-endian length prefix, then one msgpack body.

Invariants:
- The length prefix is checked against ``max_frame_size`` before any of the
  body is buffered, so a hostile peer cannot make us hold more than
  ``max_frame_size + 4`` bytes per connection.
- A body must decode to exactly one msgpack object within the str/bin/array/
  map length limits, the nesting limit and the container budget; anything
  else is a ``RemoteProtocolError`` naming the limit or the defect. What we
  would send beyond a limit, or cannot encode, is a ``LocalProtocolError``.
- The Python work and memory a frame can cost are bounded by its limits, not
  by how its bytes are chosen: an empty map is one byte on the wire and a
  dict of 64 in memory, so a frame within ``max_frame_size`` could otherwise
  hold 8 million of them (seconds of decoding and walking on the event loop,
  half a GiB). Decoding stops at ``max_containers`` maps and arrays.
- After the first error the decoder is poisoned: every later call raises the
  same error. A byte stream that went wrong once has no trustworthy frame
  boundary any more.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack
from pydantic import BaseModel

from ._errors import LocalProtocolError, ProtocolError, RemoteProtocolError

__all__ = ["FrameDecoder", "FrameLimits", "encode_frame", "frame_body"]

_HEADER = struct.Struct(">I")
# Every msgpack map or array starts with one of these bytes (fixmap, fixarray,
# array16/32, map16/32). Their count in a body bounds its nesting and its
# number of containers from above, which lets most frames skip the Python
# walk and the counting decode. Only from above: text in other scripts than
# Latin has these bytes inside its UTF-8 sequences.
_CONTAINER_BYTES = bytes([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_NOT_CONTAINER_BYTES = bytes(b for b in range(256) if b not in _CONTAINER_BYTES)


def _containers_at_most(body: bytes) -> int:
    return len(body.translate(None, _NOT_CONTAINER_BYTES))


_MSGPACK_LIMIT = re.compile(r"max_(str|bin|array|map|ext)_len")


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """Limits a decoder enforces on every incoming frame."""

    max_frame_size: int = 8 * 1024 * 1024
    max_nesting: int = 32
    max_str_len: int = 8 * 1024 * 1024
    max_bin_len: int = 8 * 1024 * 1024
    max_array_len: int = 100_000
    max_map_len: int = 10_000
    #: Maps and arrays in one frame, at every level together.
    max_containers: int = 50_000
    #: A body no longer than this cannot break a str/bin/array/map limit.
    smallest_len: int = field(init=False, repr=False, compare=False)
    #: A body with no more container bytes than this breaks no nesting or container limit.
    fewest_containers: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        smallest = min(self.max_str_len, self.max_bin_len, self.max_array_len, 2 * self.max_map_len)
        object.__setattr__(self, "smallest_len", smallest)
        object.__setattr__(self, "fewest_containers", min(self.max_nesting, self.max_containers))


_DEFAULT_LIMITS = FrameLimits()


def encode_frame(obj: Any, limits: FrameLimits | None = None) -> bytes:
    """Encode ``obj`` as one frame; refuse to produce a frame the peer would reject."""
    try:
        body: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode frame: {exc}") from exc
    return frame_body(obj, body, limits or _DEFAULT_LIMITS)


def frame_body(obj: Any, body: bytes, limits: FrameLimits) -> bytes:
    """The frame for ``body``, the msgpack encoding of ``obj``, once it is within ``limits``."""
    size = len(body)
    fewest = limits.fewest_containers
    if size > limits.smallest_len or (size > fewest and _containers_at_most(body) > fewest):
        _check_object(obj, limits, LocalProtocolError, encoded_size=size)
    if size > limits.max_frame_size:
        raise LocalProtocolError(
            f"frame of {size} bytes exceeds max_frame_size ({limits.max_frame_size})",
            limit="max_frame_size",
        )
    return _HEADER.pack(size) + body


def _check_object(
    obj: Any,
    limits: FrameLimits,
    error: type[ProtocolError],
    *,
    encoded_size: int | None = None,
) -> None:
    """Check an object's nesting and container count and, before encoding, its sizes.

    ``error`` is what a violation raises: local for what we send, remote for
    what we received.

    Iterative (a deep frame must not hit Python's recursion limit) and as
    cheap as the body allows: a str, bin or array can be no longer than the
    body holding it, and a map needs two bytes per entry, so with
    ``encoded_size`` the size checks that cannot fail are skipped. Incoming
    sizes were already checked by msgpack while decoding (``encoded_size``
    is then None and only nesting and the container count are checked).
    """
    size = encoded_size or 0
    check_str = size > limits.max_str_len
    check_bin = size > limits.max_bin_len
    check_array = size > limits.max_array_len
    check_map = size > 2 * limits.max_map_len
    check_scalars = check_str or check_bin
    max_nesting = limits.max_nesting
    containers = limits.max_containers
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, BaseModel):
            # A nested model (a request's params) is packed as its fields.
            item = item.__dict__
        if isinstance(item, dict):
            if check_map and len(item) > limits.max_map_len:
                raise _length_error(error, "map", len(item), limits.max_map_len)
            children: Any = (*item.keys(), *item.values()) if check_scalars else item.values()
        elif isinstance(item, list | tuple):
            if check_array and len(item) > limits.max_array_len:
                raise _length_error(error, "array", len(item), limits.max_array_len)
            children = item
        else:
            if check_str and isinstance(item, str):
                if len(item.encode("utf-8", "surrogatepass")) > limits.max_str_len:
                    raise _length_error(error, "str", len(item), limits.max_str_len)
            elif (
                check_bin and isinstance(item, bytes | bytearray) and len(item) > limits.max_bin_len
            ):
                raise _length_error(error, "bin", len(item), limits.max_bin_len)
            continue
        depth += 1
        if depth > max_nesting:
            raise error(f"frame nesting exceeds max_nesting ({max_nesting})", limit="max_nesting")
        containers -= 1
        if containers < 0:
            raise _containers_error(error, limits.max_containers)
        for child in children:
            if check_scalars or isinstance(child, dict | list | tuple | BaseModel):
                stack.append((child, depth))


def _containers_error(error: type[ProtocolError], limit: int) -> ProtocolError:
    return error(
        f"frame holds more than max_containers ({limit}) maps and arrays", limit="max_containers"
    )


class _ContainerBudget:
    """msgpack hooks that count the maps and arrays being decoded, and stop at the limit.

    Raising from a hook aborts ``unpackb`` at once, before the rest of the
    body is turned into objects.
    """

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.left = self.limit = limit

    def take(self, container: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise _containers_error(RemoteProtocolError, self.limit)
        return container


def _length_error(error: type[ProtocolError], kind: str, size: int, limit: int) -> ProtocolError:
    return error(
        f"{kind} of length {size} exceeds max_{kind}_len ({limit})", limit=f"max_{kind}_len"
    )


class FrameDecoder:
    """Turns a byte stream into decoded msgpack objects, one per frame."""

    def __init__(self, limits: FrameLimits | None = None) -> None:
        self.limits = limits or FrameLimits()
        self._buffer = bytearray()
        self._error: ProtocolError | None = None
        #: The size of each frame (its header included) whose object the last
        #: ``feed`` returned, in the same order.
        self.sizes: list[int] = []

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    @property
    def incoming(self) -> int:
        """The size (header included) of the frame begun in the buffer; 0 before its header."""
        buffer = self._buffer
        if len(buffer) < _HEADER.size:
            return 0
        size: int = _HEADER.unpack_from(buffer, 0)[0]
        return _HEADER.size + size

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return every object completed by them (maybe none)."""
        if self._error is not None:
            raise self._error
        try:
            buffer = self._buffer
            if not buffer:
                # Usually the read holds whole frames: decode them straight
                # from ``data`` and buffer only an incomplete tail.
                out, used = self._drain(data)
                if used < len(data):
                    buffer += memoryview(data)[used:]
                return out
            buffer += data
            out, used = self._drain(buffer)
            del buffer[:used]
            return out
        except ProtocolError as exc:
            self._error = exc
            self._buffer.clear()
            raise

    def _drain(self, data: bytes | bytearray) -> tuple[list[Any], int]:
        """The objects of the complete frames at the start of ``data``, and the bytes they used."""
        out: list[Any] = []
        sizes = self.sizes = []
        max_size = self.limits.max_frame_size
        pos, available = 0, len(data)
        while available - pos >= _HEADER.size:
            (size,) = _HEADER.unpack_from(data, pos)
            if size > max_size:
                raise RemoteProtocolError(
                    f"frame of {size} bytes exceeds max_frame_size ({max_size})",
                    limit="max_frame_size",
                )
            end = pos + _HEADER.size + size
            if end > available:
                break
            out.append(self._decode_body(bytes(data[pos + _HEADER.size : end])))
            sizes.append(end - pos)
            pos = end
        return out, pos

    def _decode_body(self, body: bytes) -> Any:
        limits = self.limits
        if not body:
            raise RemoteProtocolError("empty frame body")
        fewest = limits.fewest_containers
        containers = _containers_at_most(body) if len(body) > fewest else 0
        # The counting hooks cost a Python call per container: only for a body
        # that may hold more than the budget (a frame of a few maps never does).
        hooks: dict[str, Any] = {}
        if containers > limits.max_containers:
            budget = _ContainerBudget(limits.max_containers)
            hooks = {"object_hook": budget.take, "list_hook": budget.take}
        try:
            obj = msgpack.unpackb(
                body,
                raw=False,
                strict_map_key=True,
                use_list=True,
                max_str_len=limits.max_str_len,
                max_bin_len=limits.max_bin_len,
                max_array_len=limits.max_array_len,
                max_map_len=limits.max_map_len,
                max_ext_len=0,
                **hooks,
            )
        except RemoteProtocolError:
            raise  # the container budget, from a hook
        except msgpack.ExtraData as exc:
            raise RemoteProtocolError("frame body holds more than one msgpack object") from exc
        except msgpack.StackError as exc:
            # Deeper than msgpack's own unpack stack: far beyond ours too.
            raise RemoteProtocolError(
                f"frame nesting exceeds max_nesting ({limits.max_nesting})", limit="max_nesting"
            ) from exc
        except Exception as exc:
            # msgpack signals limit violations with ValueError naming the limit,
            # and malformed input with several other exception types.
            match = _MSGPACK_LIMIT.search(str(exc))
            limit = match.group(0) if match else None
            raise RemoteProtocolError(f"undecodable frame body: {exc}", limit=limit) from exc
        if containers > fewest:
            _check_object(obj, limits, RemoteProtocolError)
        return obj
