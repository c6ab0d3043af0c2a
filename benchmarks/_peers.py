"""Echo peers for the roundtrip baselines; deliberately light on imports.

``python -m benchmarks._peers READ_FD WRITE_FD`` answers raw frames (a
4-byte big-endian length, then a msgpack body) with blocking ``os.read`` /
``os.write``: the floor a pipe-and-msgpack protocol can reach from Python.
``mp_pipe_echo`` is the ``multiprocessing.Pipe`` (pickle) equivalent.
"""

from __future__ import annotations

import os
import struct
import sys
from multiprocessing.connection import Connection
from typing import Any

import msgpack

__all__ = ["HEADER", "FrameReader", "mp_pipe_echo", "raw_pipe_echo", "reply_to", "write_all"]

HEADER = struct.Struct(">I")
_READ_SIZE = 64 * 1024


def reply_to(request: dict[str, Any]) -> dict[str, Any]:
    """The response a subvisor worker sends for an ``echo`` request."""
    return {"type": "response", "id": request["id"], "result": request["params"]["value"]}


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


if __name__ == "__main__":
    raw_pipe_echo(int(sys.argv[1]), int(sys.argv[2]))
