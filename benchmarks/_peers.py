"""Echo peers for the roundtrip baselines; deliberately light on imports.

``python -m benchmarks._peers READ_FD WRITE_FD`` answers raw frames (a
4-byte big-endian length, then a msgpack body) with blocking ``os.read`` /
``os.write``: the floor a pipe-and-msgpack protocol can reach from Python.
``mp_pipe_echo`` is the ``multiprocessing.Pipe`` (pickle) equivalent, and
``--trio`` runs the same echo under trio: the floor for any trio peer.
"""

from __future__ import annotations

import os
import struct
import sys
from multiprocessing.connection import Connection
from typing import Any

import msgpack

__all__ = [
    "HEADER",
    "FrameReader",
    "mp_pipe_echo",
    "raw_pipe_echo",
    "reply_to",
    "trio_pipe_echo",
    "write_all",
]

HEADER = struct.Struct(">I")
_READ_SIZE = 64 * 1024


def reply_to(request: dict[str, Any]) -> dict[str, Any]:
    """The response a subvisor worker sends for an ``echo`` request."""
    return {
        "type": "response",
        "id": request["id"],
        "result": {"value": request["params"]["value"]},
    }


class FrameReader:
    """Blocking reads of length-prefixed frames; one ``os.read`` per frame when it fits."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def read_frame(self) -> bytes | None:
        """The next frame's body, or ``None`` at EOF."""
        while True:
            if len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                end = HEADER.size + size
                if len(self._buffer) >= end:
                    body = self._buffer[HEADER.size : end]
                    self._buffer = self._buffer[end:]
                    return body
            chunk = os.read(self.fd, _READ_SIZE)
            if not chunk:
                return None
            self._buffer += chunk


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to the blocking ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def raw_pipe_echo(read_fd: int, write_fd: int) -> None:
    """Answer each request frame on ``read_fd`` with its echo response on ``write_fd``."""
    reader = FrameReader(read_fd)
    while (body := reader.read_frame()) is not None:
        request = msgpack.unpackb(body, raw=False)
        reply: bytes = msgpack.packb(reply_to(request), use_bin_type=True)
        write_all(write_fd, HEADER.pack(len(reply)) + reply)


def mp_pipe_echo(conn: Connection) -> None:
    """Answer each request object on ``conn`` with its echo response, until EOF."""
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(reply_to(request))


def trio_pipe_echo(read_fd: int, write_fd: int) -> None:
    """The raw echo with trio on this end too: the floor for a trio worker."""
    import trio

    from worker._pipe import PipeStream

    async def serve() -> None:
        pipe = PipeStream(read_fd, write_fd)
        buffer = b""
        while True:
            chunk = await pipe.receive_some(_READ_SIZE)
            if not chunk:
                return
            buffer += chunk
            while len(buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(buffer)
                if len(buffer) < HEADER.size + size:
                    break
                body, buffer = (
                    buffer[HEADER.size : HEADER.size + size],
                    buffer[HEADER.size + size :],
                )
                reply: bytes = msgpack.packb(reply_to(msgpack.unpackb(body)), use_bin_type=True)
                await pipe.send_all(HEADER.pack(len(reply)) + reply)

    trio.run(serve)


if __name__ == "__main__":
    echo = trio_pipe_echo if sys.argv[1:2] == ["--trio"] else raw_pipe_echo
    fds = [arg for arg in sys.argv[1:] if arg != "--trio"]
    echo(int(fds[0]), int(fds[1]))
