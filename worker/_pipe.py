"""``PipeStream``: a pair of non-blocking pipe fds driven by trio, one frame at a time.

Both ends of a worker connection use it. It differs from
``trio.lowlevel.FdStream`` in two ways that matter for latency and safety:

- Few system calls, which dominate a request's round trip. A write that can
  complete at once does so without a trip through the scheduler. A read
  parks in ``wait_readable`` first instead of trying a read that, in a
  request/response exchange, almost always finds the pipe empty.
- A frame the pipe takes whole at once can be written with no await at all
  (``send_now``): a pipe writes up to ``PIPE_BUF`` bytes whole or not at
  all, so a frame that does not fit now is left unwritten, never torn.
- Frames never interleave and never tear. Writers take turns through a busy
  flag (checked and set with no await in between, so it needs no lock); the
  writers waiting for it are not served in any order, so tasks whose frames
  must arrive in order take turns of their own first (the gateway process's
  ``_Server.send``), and
  the rest of a partly written frame is written under a cancel shield: a
  cancelled sender must not leave half a frame on the pipe, because the
  peer would then read garbage. A frame none of which was written yet (the
  pipe is full) waits unshielded: cancelling it tears nothing, and a sender
  with a deadline (a ``shutdown`` within its grace) keeps it. ``close`` wakes
  a parked writer, so a shielded write to a peer that stopped reading still
  ends when the pipe is closed.
"""

from __future__ import annotations

import errno
import os
import select
import stat

import trio

__all__ = ["PipeStream"]


class PipeStream:
    """Reads frames' bytes from ``read_fd`` and writes whole frames to ``write_fd``."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._read_fd: int | None = read_fd
        self._write_fd: int | None = write_fd
        self._writing = False
        self._write_done = trio.Event()
        # Only a pipe promises that a write of up to PIPE_BUF bytes is whole or nothing.
        self._atomic_size = select.PIPE_BUF if stat.S_ISFIFO(os.fstat(write_fd).st_mode) else 0

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` at EOF."""
        while True:
            fd = self._read_fd
            if fd is None:
                raise trio.ClosedResourceError("pipe was closed")
            await trio.lowlevel.wait_readable(fd)
            fd = self._read_fd
            if fd is None:
                raise trio.ClosedResourceError("pipe was closed")
            try:
                return os.read(fd, max_bytes)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise _translate(exc) from exc

    def send_now(self, data: bytes) -> bool:
        """Write the frame ``data`` whole if the pipe takes it at once; else write nothing.

        False when the frame is larger than the pipe writes atomically, another
        frame is being written, or the pipe is full (or closed): then
        ``send_all`` it.
        """
        fd = self._write_fd
        if self._writing or fd is None or len(data) > self._atomic_size:
            return False
        try:
            os.write(fd, data)  # whole: at most PIPE_BUF bytes to a pipe
        except BlockingIOError:
            return False
        except OSError as exc:
            raise _translate(exc) from exc
        return True

    async def send_all(self, data: bytes) -> None:
        """Write one whole frame, after any frame already being written."""
        while self._writing:
            await self._write_done.wait()
        fd = self._write_fd
        if fd is None:
            raise trio.ClosedResourceError("pipe was closed")
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise _translate(exc) from exc
        if sent == len(data):
            return
        self._writing = True
        try:
            view = memoryview(data)
            if not sent:
                # Nothing of it is on the pipe: a cancel here tears no frame.
                sent = await self._write_some(view)
            with trio.CancelScope(shield=True):
                await self._write_rest(view[sent:])
        finally:
            self._writing = False
            self._write_done.set()
            self._write_done = trio.Event()

    async def _write_rest(self, view: memoryview) -> None:
        while view:
            view = view[await self._write_some(view) :]

    async def _write_some(self, view: memoryview) -> int:
        """Wait until the pipe takes some of ``view``; the bytes it took."""
        while True:
            fd = self._write_fd
            if fd is None:
                raise trio.ClosedResourceError("pipe was closed during a write")
            try:
                await trio.lowlevel.wait_writable(fd)
                return os.write(fd, view)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise _translate(exc) from exc

    def close(self) -> None:
        """Close both fds, waking any task parked on them."""
        for attr in ("_read_fd", "_write_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                setattr(self, attr, None)
                trio.lowlevel.notify_closing(fd)
                os.close(fd)


def _translate(exc: OSError) -> Exception:
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("pipe was closed")
    return trio.BrokenResourceError(f"pipe broke: {exc}")
