"""Frame codec: a 4-byte big-endian length prefix, then one msgpack body.

Invariants:
- The length prefix is checked against ``max_frame_size`` before any of the
  body is buffered, so a hostile peer cannot make us hold more than
  ``max_frame_size + 4`` bytes per connection.
- A body must decode to exactly one msgpack object within the str/bin/array/
  map length limits and the nesting limit; anything else is a
  ``RemoteProtocolError`` naming the limit or the defect. What we would send
  beyond a limit, or cannot encode, is a ``LocalProtocolError``.
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
# array16/32, map16/32). Their count in a body bounds its nesting from above,
# which lets most frames skip the Python walk.
_CONTAINER_BYTES = bytes([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_NOT_CONTAINER_BYTES = bytes(b for b in range(256) if b not in _CONTAINER_BYTES)


def _may_nest_deeper_than(body: bytes, max_nesting: int) -> bool:
    return len(body.translate(None, _NOT_CONTAINER_BYTES)) > max_nesting


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
    #: A body no longer than this cannot break a str/bin/array/map limit.
    smallest_len: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        smallest = min(self.max_str_len, self.max_bin_len, self.max_array_len, 2 * self.max_map_len)
        object.__setattr__(self, "smallest_len", smallest)


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
    if size > limits.smallest_len or (
        size > limits.max_nesting and _may_nest_deeper_than(body, limits.max_nesting)
    ):
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
    """Check an object's nesting and, before encoding, its container and string sizes.

    ``error`` is what a violation raises: local for what we send, remote for
    what we received.

    Iterative (a deep frame must not hit Python's recursion limit) and as
    cheap as the body allows: a str, bin or array can be no longer than the
    body holding it, and a map needs two bytes per entry, so with
    ``encoded_size`` the size checks that cannot fail are skipped. Incoming
    sizes were already checked by msgpack while decoding (``encoded_size``
    is then None and only nesting is checked).
    """
    size = encoded_size or 0
    check_str = size > limits.max_str_len
    check_bin = size > limits.max_bin_len
    check_array = size > limits.max_array_len
    check_map = size > 2 * limits.max_map_len
    check_scalars = check_str or check_bin
    max_nesting = limits.max_nesting
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
        for child in children:
            if check_scalars or isinstance(child, dict | list | tuple | BaseModel):
                stack.append((child, depth))


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

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

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
            pos = end
        return out, pos

    def _decode_body(self, body: bytes) -> Any:
        limits = self.limits
        if not body:
            raise RemoteProtocolError("empty frame body")
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
            )
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
        if len(body) > limits.max_nesting and _may_nest_deeper_than(body, limits.max_nesting):
            _check_object(obj, limits, RemoteProtocolError)
        return obj
