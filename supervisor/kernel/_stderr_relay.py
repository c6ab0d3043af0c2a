"""``StderrRelay``: what workers write on stderr reaches ours through a pipe, escaped and bounded.

A worker that inherited the supervisor's stderr would hold the user's
terminal open for reading and writing through that fd (Landlock checks only
what a process opens, never what it inherited): code in the worker could
read what is typed there, an approval's key press included, or write escape
sequences to it. So the zygote and exec'd workers get the write end of a
pipe as their stdout and stderr, and start in a session of their own,
without a controlling terminal (``launch_python``).

Invariants:

- What crosses the pipe reaches the supervisor's stderr with control
  characters escaped (``files._printable``), a line at a time, each line cut
  at ``MAX_LINE_CHARS``.
- At most ``MAX_RELAYED_BYTES`` are relayed per relay; past that the rest is
  read and dropped (so no writer blocks on a full pipe), and one line says so.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

import trio

from ..files._printable import printable

__all__ = ["MAX_LINE_CHARS", "MAX_RELAYED_BYTES", "StderrRelay", "stop_relays"]

#: The most of one line shown.
MAX_LINE_CHARS = 4000
#: The most relayed per relay: tracebacks and warnings, not a flood.
MAX_RELAYED_BYTES = 1024 * 1024
_CHUNK = 64 * 1024


class StderrRelay:
    """One pipe whose write end workers get as stdout and stderr; ``run`` drains it."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._read_fd, self.write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self._out = out
        self._scope = trio.CancelScope()
        self.finished = trio.Event()
        self.relayed = 0
        self.dropped = 0

    def close_write_end(self) -> None:
        """Close our copy of the write end: ``run`` ends once every writer has."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def cancel(self) -> None:
        """End ``run`` now, whoever still holds a write end."""
        self._scope.cancel()

    async def run(self) -> None:
        """Relay until every write end is closed, or ``stop``."""
        try:
            with self._scope:
                await self._relay()
        finally:
            os.close(self._read_fd)
            self.close_write_end()
            self.finished.set()

    async def _relay(self) -> None:
        pending = b""
        while True:
            await trio.lowlevel.wait_readable(self._read_fd)
            try:
                chunk = os.read(self._read_fd, _CHUNK)
            except BlockingIOError:
                continue
            if not chunk:
                break
            if self.relayed >= MAX_RELAYED_BYTES:
                self.dropped += len(chunk)
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._show(line)
            if len(pending) > MAX_LINE_CHARS:
                self._show(pending)
                pending = b""
        if pending:
            self._show(pending)

    def _show(self, line: bytes) -> None:
        if self.relayed >= MAX_RELAYED_BYTES:
            self.dropped += len(line)
            return
        self.relayed += len(line) + 1
        text = printable(line[:MAX_LINE_CHARS].decode("utf-8", "replace"))
        if len(line) > MAX_LINE_CHARS:
            text += f" [... {len(line) - MAX_LINE_CHARS} more bytes]"
        self._write(text)
        if self.relayed >= MAX_RELAYED_BYTES:
            self._write(
                f"subvisor: workers wrote over {MAX_RELAYED_BYTES // 1024} KiB on stderr;"
                " the rest is dropped"
            )

    def _write(self, text: str) -> None:
        out = self._out or sys.stderr
        try:
            out.write(text + "\n")
            out.flush()
        except (OSError, ValueError):
            pass  # our own stderr is gone: nothing to show it on


async def stop_relays(relays: list[StderrRelay], grace: float = 0.5) -> None:
    """End ``relays``: each at once once every writer is gone, else after ``grace``
    seconds (a process a worker left behind may still hold a write end)."""
    try:
        for relay in relays:
            relay.close_write_end()
        with trio.move_on_after(grace):
            for relay in relays:
                await relay.finished.wait()
    finally:
        for relay in relays:
            relay.cancel()
