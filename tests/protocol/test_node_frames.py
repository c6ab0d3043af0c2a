"""The node link's frames and control messages, without I/O (S-DIST-1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    LINK_CHUNK,
    LinkFrameDecoder,
    LinkKind,
    LocalProtocolError,
    NodeMemory,
    NodePing,
    NodePong,
    NodeSignal,
    NodeSpawn,
    NodeWorkerExited,
    RemoteProtocolError,
    ResourceLimits,
    decode_node_control,
    encode_link_frame,
    encode_node_control,
)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(LinkKind)),
            st.integers(0, 2**32 - 1),
            st.binary(max_size=300),
        ),
        max_size=20,
    ),
    st.integers(1, 64),
)
def test_frames_decode_whole_however_the_bytes_are_cut_S_DIST_1(
    frames: list[tuple[LinkKind, int, bytes]], cut: int
) -> None:
    data = b"".join(encode_link_frame(kind, channel, payload) for kind, channel, payload in frames)
    decoder = LinkFrameDecoder()
    decoded = []
    for start in range(0, len(data), cut):
        decoded += decoder.receive_data(data[start : start + cut])
    assert [(f.kind, f.channel, f.payload) for f in decoded] == frames


def test_a_frame_over_the_limit_is_refused_on_both_sides() -> None:
    with pytest.raises(LocalProtocolError):
        encode_link_frame(LinkKind.DATA, 1, b"x" * (LINK_CHUNK * 8))
    header = encode_link_frame(LinkKind.DATA, 1)[:5] + (2**31).to_bytes(4, "big")
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        LinkFrameDecoder().receive_data(header)


def test_an_unknown_frame_kind_is_the_peers_violation() -> None:
    frame = bytes([99]) + encode_link_frame(LinkKind.DATA, 1, b"ab")[1:]
    with pytest.raises(RemoteProtocolError, match="kind 99"):
        LinkFrameDecoder().receive_data(frame)


@pytest.mark.parametrize(
    "message",
    [
        NodeSpawn(channel=3, worker_id="w_1", limits=ResourceLimits(memory_mb=64, cpus=0.5)),
        NodeSignal(channel=3, signal=15),
        NodeMemory(rss=[(3, 52_428_800), (4, 0)]),
        NodePing(seq=2**40),
        NodePong(seq=0),
        NodeWorkerExited(
            channel=3,
            exit_code=None,
            signal=9,
            cpu_seconds=0.5,
            max_rss_kb=1024,
            cause_kind="memory cap exceeded",
            cause_reason="memory cap exceeded: ...",
        ),
    ],
)
def test_control_messages_round_trip(message: object) -> None:
    [frame] = LinkFrameDecoder().receive_data(encode_node_control(message))  # type: ignore[arg-type]
    assert frame.kind is LinkKind.CONTROL
    assert decode_node_control(frame.payload) == message


def test_a_malformed_control_message_is_the_peers_violation() -> None:
    with pytest.raises(RemoteProtocolError, match="invalid node control"):
        decode_node_control(b"\x81\xa4type\xa5bogus")
    with pytest.raises(RemoteProtocolError, match="undecodable"):
        decode_node_control(b"\xc1")
