"""``PipeStream``'s writers: whole frames, and a cancelled one writes nothing.

A real pipe, filled until a frame has to wait for the reader.
"""

from __future__ import annotations

import os
import struct

import trio
import trio.testing

from worker import PipeStream

_HEADER = struct.Struct(">I")
#: Larger than any pipe's buffer here (64 KiB by default): its write waits for the reader.
_BIG = 1024 * 1024


def _frame(tag: bytes, size: int = 0) -> bytes:
    body = tag.ljust(max(size, len(tag)), b".")
    return _HEADER.pack(len(body)) + body


async def _read_frames(read_fd: int, count: int) -> list[bytes]:
    """Read ``count`` frames from the raw pipe end; their tags (the body up to a dot)."""
    buffer, tags = b"", []
    while len(tags) < count:
        await trio.lowlevel.wait_readable(read_fd)
        buffer += os.read(read_fd, 1 << 20)
        while len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if len(buffer) < _HEADER.size + size:
                break
            body, buffer = buffer[_HEADER.size : _HEADER.size + size], buffer[_HEADER.size + size :]
            tags.append(body.split(b".", 1)[0])
    return tags


async def test_a_send_cancelled_while_it_waits_its_turn_writes_nothing() -> None:
    """A sender cancelled while it waits its turn leaves no byte on the pipe; the frames
    around it arrive whole, in order, and the stream takes more frames after."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    stream = PipeStream(os.open(os.devnull, os.O_RDONLY), write_fd)
    waiting = trio.CancelScope()

    async def send_dropped() -> None:
        with waiting:
            await stream.send_all(_frame(b"dropped"))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream.send_all, _frame(b"big", _BIG))
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send_dropped)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(stream.send_all, _frame(b"after"))
            await trio.testing.wait_all_tasks_blocked()
            waiting.cancel()
            assert await _read_frames(read_fd, 2) == [b"big", b"after"]
        assert waiting.cancelled_caught
        await stream.send_all(_frame(b"later"))
        assert await _read_frames(read_fd, 1) == [b"later"]
    finally:
        stream.close()
        os.close(read_fd)
