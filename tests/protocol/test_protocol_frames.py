"""Frame codec (``protocol/_frame.py``): a 4-byte big-endian length, then one msgpack body.

The invariants under test, as the module docstring and DESIGN.md ("protocol/")
state them:

- F1 ``encode_frame`` -> ``FrameDecoder.feed`` gives back the same objects,
  however the byte stream is cut into pieces.
- F2 A truncated frame waits for more data; nothing is lost or invented.
- F3 The length prefix is checked against ``max_frame_size`` before any of
  the body is buffered (``.limit == "max_frame_size"``).
- F4 str/bin/array/map lengths and nesting over the configured limits are a
  ``RemoteProtocolError`` whose ``.limit`` names the limit.
- F5 A body is exactly one msgpack object: empty bodies and two objects in one
  body are rejected.
- F6 Whatever bytes arrive, ``feed`` returns objects or raises
  ``RemoteProtocolError``, nothing else; after the first error every call
  raises it again (the decoder is poisoned).
- F7 ``encode_frame`` refuses to produce a frame the peer would reject, with a
  ``LocalProtocolError`` (ours to fix, not the peer's).
"""

from __future__ import annotations

import itertools
import struct
import tracemalloc
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import (
    FrameDecoder,
    FrameLimits,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    encode_frame,
)


def _unchecked_frame(obj: Any) -> bytes:
    """A frame as a peer that ignores our limits would send it."""
    body = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


_HEADER = struct.Struct(">I")

# -- strategies -----------------------------------------------------------------

_texts = st.text(st.characters(codec="utf-8"), max_size=16)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | _texts
    | st.binary(max_size=16)
)
#: Anything msgpack carries and decodes back to an equal Python value.
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_texts, children, max_size=4),
    max_leaves=10,
)
_maps = st.dictionaries(_texts, _values, max_size=5)


def _pack(obj: Any) -> bytes:
    body: bytes = msgpack.packb(obj, use_bin_type=True)
    return body


def _raw_frame(body: bytes) -> bytes:
    return _HEADER.pack(len(body)) + body


def _chunks(data: st.DataObject, wire: bytes) -> list[bytes]:
    """Cut ``wire`` at arbitrary points into non-empty pieces (``b""`` would mean EOF)."""
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=12), label="cuts")
    points = sorted({0, len(wire), *cuts})
    return [wire[a:b] for a, b in itertools.pairwise(points) if b > a]


def _nest(kinds: list[bool]) -> Any:
    """``len(kinds)`` container levels (True: list, False: map) around a scalar."""
    obj: Any = 0
    for is_list in kinds:
        obj = [obj] if is_list else {"k": obj}
    return obj


# -- F1, F2: round trip and waiting ---------------------------------------------


@settings(max_examples=150, deadline=None)
@given(objs=st.lists(_values, min_size=1, max_size=5), data=st.data())
def test_f1_frames_round_trip_under_any_chunking(objs: list[Any], data: st.DataObject) -> None:
    """F1: a stream of frames cut anywhere decodes to the same objects, in order."""
    frames = [encode_frame(obj) for obj in objs]
    decoder = FrameDecoder()
    received: list[Any] = []
    fed = 0
    for piece in _chunks(data, b"".join(frames)):
        received += decoder.feed(piece)
        fed += len(piece)
        # Whatever is not part of a completed frame is held, and only that.
        assert decoder.buffered == fed - sum(len(f) for f in frames[: len(received)])
    assert received == objs
    assert decoder.buffered == 0


@settings(max_examples=100, deadline=None)
@given(obj=_maps, data=st.data())
def test_f2_truncated_frame_waits_for_the_rest(obj: dict[str, Any], data: st.DataObject) -> None:
    """F2: every proper prefix of a frame yields nothing and is buffered whole."""
    frame = encode_frame(obj)
    cut = data.draw(st.integers(1, len(frame) - 1), label="cut")
    decoder = FrameDecoder()
    assert decoder.feed(frame[:cut]) == []
    assert decoder.buffered == cut
    assert decoder.feed(frame[cut:]) == [obj]
    assert decoder.buffered == 0


# -- F3: frame size ---------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    max_frame_size=st.integers(1, 2**24),
    excess=st.integers(1, 2**32 - 1 - 2**24),
)
def test_f3_oversized_length_prefix_is_rejected_from_the_header_alone(
    max_frame_size: int, excess: int
) -> None:
    """F3: the 4-byte header that announces too much is refused; no body is ever needed."""
    decoder = FrameDecoder(FrameLimits(max_frame_size=max_frame_size))
    header = _HEADER.pack(max_frame_size + excess)
    for byte in header[:3]:
        assert decoder.feed(bytes([byte])) == []
    with pytest.raises(RemoteProtocolError) as exc_info:
        decoder.feed(header[3:])
    assert exc_info.value.limit == "max_frame_size"
    assert decoder.buffered == 0  # nothing of the announced body is held


@settings(max_examples=50, deadline=None)
@given(max_frame_size=st.integers(1, 2**24))
def test_f3_length_prefix_at_the_limit_is_accepted(max_frame_size: int) -> None:
    """F3: ``max_frame_size`` itself is allowed; the decoder waits for that body."""
    decoder = FrameDecoder(FrameLimits(max_frame_size=max_frame_size))
    assert decoder.feed(_HEADER.pack(max_frame_size)) == []
    assert decoder.buffered == _HEADER.size


def test_f3_default_limit_is_checked_before_the_body() -> None:
    """F3 with the default limits: a 4 GiB announcement fails on the header alone."""
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError) as exc_info:
        decoder.feed(b"\xff\xff\xff\xff")
    assert exc_info.value.limit == "max_frame_size"


# -- F4: length and nesting limits ---------------------------------------------

_LENGTH_LIMITS = {
    "max_str_len": lambda n: "s" * n,
    "max_bin_len": lambda n: b"b" * n,
    "max_array_len": lambda n: [0] * n,
    "max_map_len": lambda n: {f"k{i}": 0 for i in range(n)},
}


@pytest.mark.parametrize("limit", sorted(_LENGTH_LIMITS))
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 300))
def test_f4_length_limits_are_enforced_and_named(limit: str, n: int) -> None:
    """F4: a str/bin/array/map of exactly the limit passes; one more is named in ``.limit``."""
    make = _LENGTH_LIMITS[limit]
    limits = FrameLimits(**{limit: n})
    at_limit = [make(n)] if limit == "max_map_len" else {"v": make(n)}
    assert FrameDecoder(limits).feed(encode_frame(at_limit, limits)) == [at_limit]
    over = [make(n + 1)] if limit == "max_map_len" else {"v": make(n + 1)}
    with pytest.raises(RemoteProtocolError) as exc_info:
        FrameDecoder(limits).feed(_unchecked_frame(over))
    assert exc_info.value.limit == limit


@settings(max_examples=100, deadline=None)
@given(max_nesting=st.integers(1, 40), kinds=st.lists(st.booleans(), min_size=41, max_size=41))
def test_f4_nesting_limit_counts_container_levels(max_nesting: int, kinds: list[bool]) -> None:
    """F4: ``max_nesting`` container levels pass; one more is ``.limit == "max_nesting"``."""
    limits = FrameLimits(max_nesting=max_nesting)
    deepest_allowed = _nest(kinds[:max_nesting])
    assert FrameDecoder(limits).feed(encode_frame(deepest_allowed, limits)) == [deepest_allowed]
    with pytest.raises(RemoteProtocolError) as exc_info:
        FrameDecoder(limits).feed(_unchecked_frame(_nest(kinds[: max_nesting + 1])))
    assert exc_info.value.limit == "max_nesting"


@pytest.mark.parametrize("depth", [33, 500, 1024])
def test_f4_deep_nesting_is_named_with_default_limits(depth: int) -> None:
    """F4: with the default ``max_nesting`` (32) deeper frames name the limit."""
    with pytest.raises(RemoteProtocolError) as exc_info:
        FrameDecoder().feed(_unchecked_frame(_nest([True] * depth)))
    assert exc_info.value.limit == "max_nesting"


def test_f4_nesting_beyond_msgpack_stack_still_names_max_nesting() -> None:
    """F4: 1025 levels of nesting is still a nesting violation (``.limit == "max_nesting"``)."""
    with pytest.raises(RemoteProtocolError) as exc_info:
        # Built by hand: msgpack itself refuses to pack this deep.
        FrameDecoder().feed(_raw_frame(b"\x91" * 1025 + b"\xc3"))
    assert exc_info.value.limit == "max_nesting"


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), shape=st.sampled_from(["maps", "lists", "nested"]))
def test_f4_container_budget_counts_every_map_and_array(n: int, shape: str) -> None:
    """F4, S-SEC-8: ``max_containers`` maps and arrays pass, at any level; one more is named.

    The outer container counts: ``n - 1`` inner ones plus it make ``n``.
    """
    limits = FrameLimits(max_containers=n)

    def frame_of(count: int) -> Any:
        if shape == "maps":
            return [{} for _ in range(count - 1)]
        if shape == "lists":
            return [[] for _ in range(count - 1)]
        pairs, odd = divmod(count - 1, 2)
        return [[{}] for _ in range(pairs)] + [[]] * odd

    at_limit = frame_of(n)
    assert FrameDecoder(limits).feed(encode_frame(at_limit, limits)) == [at_limit]
    with pytest.raises(LocalProtocolError) as local:
        encode_frame(frame_of(n + 1), limits)
    assert local.value.limit == "max_containers"
    with pytest.raises(RemoteProtocolError) as remote:
        FrameDecoder(limits).feed(_unchecked_frame(frame_of(n + 1)))
    assert remote.value.limit == "max_containers"


def test_f4_a_frame_of_empty_maps_is_refused_before_it_is_built() -> None:
    """F4, S-SEC-8: eight million one-byte empty maps in one 8 MiB frame are refused, and
    decoding stops at the budget: it never builds the 8 million dicts (half a GiB)."""
    inner = b"\xdd" + struct.pack(">I", 100_000) + b"\x80" * 100_000
    count = (FrameLimits().max_frame_size - 5) // len(inner)
    body = b"\xdd" + struct.pack(">I", count) + inner * count
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError) as exc_info:
            FrameDecoder().feed(_raw_frame(body))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc_info.value.limit == "max_containers"
    # The body itself (8 MiB, copied once out of the buffer) and the budget's worth of dicts.
    assert peak < 3 * len(body) + 64 * FrameLimits().max_containers


def test_f4_text_whose_utf8_looks_like_containers_is_not_counted_as_them() -> None:
    """F4: bytes 0x80-0x9f inside non-Latin UTF-8 text are not maps or arrays: a frame of
    such text beyond the container budget's byte count decodes whole."""
    text = "\u4e00\u4e01\u4e02" * 40_000  # every character has a byte in 0x80-0x9f
    frame = encode_frame({"text": text, "more": [{"a": 1}] * 3})
    assert _containers(frame) > FrameLimits().max_containers
    assert FrameDecoder().feed(frame) == [{"text": text, "more": [{"a": 1}] * 3}]


def _containers(frame: bytes) -> int:
    return sum(b in range(0x80, 0xA0) or b in (0xDC, 0xDD, 0xDE, 0xDF) for b in frame[4:])


def test_f4_ext_types_are_rejected() -> None:
    """F4: msgpack extension types are not part of the protocol (``max_ext_len`` is 0)."""
    body = _pack({"v": msgpack.ExtType(1, b"x")})
    with pytest.raises(RemoteProtocolError) as exc_info:
        FrameDecoder().feed(_raw_frame(body))
    assert exc_info.value.limit == "max_ext_len"


# -- F5: one object per body -----------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(first=_values, second=_values)
def test_f5_two_objects_in_one_body_are_rejected(first: Any, second: Any) -> None:
    """F5: a body holding two concatenated msgpack objects is a RemoteProtocolError."""
    with pytest.raises(RemoteProtocolError, match="more than one"):
        FrameDecoder().feed(_raw_frame(_pack(first) + _pack(second)))


def test_f5_empty_body_is_rejected() -> None:
    """F5: a zero-length frame holds no object at all."""
    with pytest.raises(RemoteProtocolError, match="empty"):
        FrameDecoder().feed(_HEADER.pack(0))


@settings(max_examples=50, deadline=None)
@given(obj=st.dictionaries(_texts, _values, min_size=1, max_size=5), data=st.data())
def test_f5_truncated_body_inside_a_complete_frame_is_rejected(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    """F5: a frame whose length cuts its msgpack object short is undecodable, not pending."""
    body = _pack(obj)
    cut = data.draw(st.integers(1, len(body) - 1), label="cut")
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(_raw_frame(body[:cut]))


# -- F6: only RemoteProtocolError, then poisoned ---------------------------------

_limits = st.builds(
    FrameLimits,
    max_frame_size=st.integers(1, 256),
    max_nesting=st.integers(1, 6),
    max_str_len=st.integers(1, 16),
    max_bin_len=st.integers(1, 16),
    max_array_len=st.integers(1, 8),
    max_map_len=st.integers(1, 8),
    max_containers=st.integers(1, 12),
)
_garbage_pieces = st.one_of(
    st.binary(max_size=48),
    st.binary(max_size=32).map(_raw_frame),
    _values.map(_pack).map(_raw_frame),
)


@settings(max_examples=300, deadline=None)
@given(
    limits=st.none() | _limits,
    pieces=st.lists(_garbage_pieces, min_size=1, max_size=6),
    data=st.data(),
)
def test_f6_arbitrary_bytes_give_objects_or_protocol_error_then_poison(
    limits: FrameLimits | None, pieces: list[bytes], data: st.DataObject
) -> None:
    """F6: any byte stream, cut anywhere: objects or RemoteProtocolError; after one, only it."""
    decoder = FrameDecoder(limits)
    error: ProtocolError | None = None
    for chunk in _chunks(data, b"".join(pieces)):
        if error is not None:
            with pytest.raises(RemoteProtocolError) as again:
                decoder.feed(chunk)
            assert str(again.value) == str(error)
            continue
        try:
            objs = decoder.feed(chunk)
        except RemoteProtocolError as exc:
            error = exc
            assert decoder.buffered == 0
        else:
            assert isinstance(objs, list)
            assert decoder.buffered <= decoder.limits.max_frame_size + _HEADER.size
    if error is not None:
        with pytest.raises(RemoteProtocolError):
            decoder.feed(b"")
        with pytest.raises(RemoteProtocolError):
            decoder.feed(encode_frame({"type": "heartbeat", "seq": 0}))


def test_f6_poisoned_decoder_rejects_even_valid_frames() -> None:
    """F6: after an error, a perfectly valid frame is refused with the same error."""
    decoder = FrameDecoder(FrameLimits(max_frame_size=16))
    with pytest.raises(RemoteProtocolError) as first:
        decoder.feed(_HEADER.pack(17))
    with pytest.raises(RemoteProtocolError) as second:
        decoder.feed(encode_frame({"a": 1}))
    assert str(second.value) == str(first.value)
    assert second.value.limit == "max_frame_size"


# -- F7: encode_frame -------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 70_000))
def test_f7_encode_frame_refuses_bodies_over_max_frame_size(n: int) -> None:
    """F7: a body one byte over ``max_frame_size`` is refused; exactly at it is framed."""
    obj = {"v": b"x" * n}
    size = len(_pack(obj))
    with pytest.raises(LocalProtocolError) as exc_info:
        encode_frame(obj, FrameLimits(max_frame_size=size - 1))
    assert exc_info.value.limit == "max_frame_size"
    frame = encode_frame(obj, FrameLimits(max_frame_size=size))
    assert _HEADER.unpack_from(frame)[0] == size
    assert FrameDecoder(FrameLimits(max_frame_size=size)).feed(frame) == [obj]


@pytest.mark.parametrize(
    "obj",
    [object(), {"v": {1, 2}}, {"v": 2**64}, {"v": -(2**63) - 1}, {"v": "lone \udcff surrogate"}],
    ids=["object", "set", "uint64-overflow", "int64-underflow", "surrogate"],
)
def test_f7_encode_frame_wraps_unencodable_objects(obj: Any) -> None:
    """F7: what msgpack cannot encode is a LocalProtocolError, not a TypeError/ValueError."""
    with pytest.raises(LocalProtocolError, match="cannot encode"):
        encode_frame(obj)


@pytest.mark.parametrize(
    ("limits", "obj"),
    [
        (FrameLimits(), {"result": _nest([False] * 32)}),
        (FrameLimits(max_str_len=4), {"v": "12345"}),
        (FrameLimits(max_bin_len=4), {"v": b"12345"}),
        (FrameLimits(max_array_len=4), {"v": [1, 2, 3, 4, 5]}),
        (FrameLimits(max_map_len=4), {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}),
    ],
    ids=["nesting", "str", "bin", "array", "map"],
)
def test_f7_encode_frame_refuses_what_the_peer_would_reject(
    limits: FrameLimits, obj: dict[str, Any]
) -> None:
    """F7: "refuse to produce a frame the peer would reject" (encode_frame's docstring)."""
    # The premise: the peer's decoder with these limits rejects this object.
    with pytest.raises(RemoteProtocolError):
        FrameDecoder(limits).feed(_raw_frame(_pack(obj)))
    with pytest.raises(LocalProtocolError):
        encode_frame(obj, limits)
