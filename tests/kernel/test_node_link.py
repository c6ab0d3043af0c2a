"""The node link between a supervisor and a node host, over a real socket pair (S-DIST-1).

No Ray here: two ``NodeLink`` ends over a connected pair of Unix sockets.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
import trio

from protocol import (
    LINK_TOKEN_BYTES,
    LinkFrameDecoder,
    NodeControl,
    NodePing,
    NodePong,
    NodeSignal,
    NodeWelcome,
    decode_node_control,
    encode_node_control,
)
from supervisor.kernel._node_link import Heartbeat, NodeLink, NodeLinkAuthError

TOKEN = b"t" * LINK_TOKEN_BYTES
WINDOW = 4096


def _stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    a, b = socket.socketpair()
    return (
        trio.SocketStream(trio.socket.from_stdlib_socket(a)),
        trio.SocketStream(trio.socket.from_stdlib_socket(b)),
    )


@pytest.fixture
async def links() -> AsyncIterator[tuple[NodeLink, NodeLink, list[NodeControl]]]:
    """(supervisor end, host end, control messages the host received), both running."""
    ours, theirs = _stream_pair()
    supervisor, host = NodeLink(ours, window=WINDOW), NodeLink(theirs, window=WINDOW)
    received: list[NodeControl] = []
    async with trio.open_nursery() as nursery:

        async def host_side() -> None:
            await host.accept(TOKEN)
            host.send_control(NodeWelcome(node_id="n", host_pid=1, zygote_pid=2, tree_caps="x"))
            await host.run(received.append)

        nursery.start_soon(host_side)
        welcome = await supervisor.authenticate(TOKEN)
        assert isinstance(welcome, NodeWelcome)
        nursery.start_soon(supervisor.run, lambda message: None)
        yield supervisor, host, received
        await supervisor.aclose()


async def test_a_wrong_token_is_refused_before_anything_else() -> None:
    ours, theirs = _stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ours.send_all, b"\x01\x00\x00\x00\x00\x00\x00\x00\x20" + b"x" * 32)
        with pytest.raises(NodeLinkAuthError):
            await NodeLink(theirs).accept(TOKEN)
    await ours.aclose()
    await theirs.aclose()


async def test_channels_carry_bytes_in_order_both_ways_S_DIST_1(
    links: tuple[NodeLink, NodeLink, list[NodeControl]],
) -> None:
    supervisor, host, received = links
    ours, theirs = supervisor.channel(7), host.channel(7)
    payload = bytes(range(256)) * 64  # 16 KiB: four windows' worth
    got = bytearray()

    async def read() -> None:
        while len(got) < len(payload):
            got.extend(await theirs.receive_some(1000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await ours.send_all(payload)
    assert bytes(got) == payload
    await theirs.send_all(b"back")
    assert await ours.receive_some(100) == b"back"
    theirs.send_eof()
    assert await ours.receive_some(100) == b""
    supervisor.send_control(NodeSignal(channel=7, signal=15))
    # Control messages and channel bytes share one ordered stream: once the
    # host read bytes sent after the signal, it has handled the signal.
    await ours.send_all(b"after")
    assert await theirs.receive_some(100) == b"after"
    assert received == [NodeSignal(channel=7, signal=15)]


async def test_a_reader_that_stops_stalls_only_its_own_channel_S_DIST_1(
    links: tuple[NodeLink, NodeLink, list[NodeControl]],
) -> None:
    supervisor, host, _ = links
    stalled, flowing = supervisor.channel(1), supervisor.channel(2)
    host.channel(1)  # never read
    reader = host.channel(2)
    await stalled.send_all(b"x" * WINDOW)
    with trio.move_on_after(0.5) as blocked:
        await stalled.send_all(b"y")
    # Past its window the writer waits for credit that never comes...
    assert blocked.cancelled_caught
    # ... while another channel of the same link goes on.
    await flowing.send_all(b"still here")
    assert await reader.receive_some(100) == b"still here"


async def test_the_link_ending_breaks_every_channel(
    links: tuple[NodeLink, NodeLink, list[NodeControl]],
) -> None:
    supervisor, host, _ = links
    channel = supervisor.channel(3)
    await host.aclose()
    with trio.fail_after(5):
        await supervisor.ended.wait()
    assert await channel.receive_some(10) == b""
    with pytest.raises(trio.BrokenResourceError):
        await channel.send_all(b"x" * (WINDOW + 1))
    assert supervisor.end_reason is not None


async def test_a_host_that_stops_answering_ends_the_link_by_heartbeat_S_DIST_2() -> None:
    """Its socket still takes the pings (as a SIGSTOPped host's kernel ACKs): no answer ends it."""
    ours, theirs = _stream_pair()
    supervisor = NodeLink(ours, window=WINDOW)
    await theirs.send_all(
        encode_node_control(NodeWelcome(node_id="n", host_pid=1, zygote_pid=2, tree_caps="x"))
    )
    assert isinstance(await supervisor.authenticate(TOKEN), NodeWelcome)
    channel = supervisor.channel(1)
    with trio.fail_after(30):
        await supervisor.run(lambda message: None, heartbeat=Heartbeat(0.01, 0.1))
    assert supervisor.end_reason is not None
    assert "answered no heartbeat" in supervisor.end_reason
    assert await channel.receive_some(10) == b""
    await theirs.aclose()


async def test_the_host_end_answers_each_ping_with_its_seq_S_DIST_2() -> None:
    """The host's reader answers pings itself; they never reach its control handler."""
    ours, theirs = _stream_pair()
    host = NodeLink(theirs, window=WINDOW)
    received: list[NodeControl] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(host.run, received.append)
        await ours.send_all(
            encode_node_control(NodePing(seq=7)) + encode_node_control(NodePing(seq=8))
        )
        decoder = LinkFrameDecoder()
        frames = []
        while len(frames) < 2:
            frames += decoder.receive_data(await ours.receive_some(1024))
        assert [decode_node_control(f.payload) for f in frames] == [
            NodePong(seq=7),
            NodePong(seq=8),
        ]
        await ours.aclose()
    assert received == []
