"""Running blocking file-system work off the trio thread, stoppable on cancel."""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

__all__ = ["INLINE_BYTES", "inline_size", "run_blocking", "run_stoppable"]

T = TypeVar("T")

#: Work on at most this many bytes of one regular file runs on the event loop
#: thread: starting a thread in a freshly forked worker costs more (~5 ms of
#: page faults and scheduling here) than reading or writing that much.
INLINE_BYTES = 1 << 20


def inline_size(path: Path) -> int | None:
    """The size of ``path`` if it is a regular file small enough to work on inline."""
    try:
        info = path.stat()
    except OSError:
        return None  # the threaded path reports the error properly
    if stat.S_ISREG(info.st_mode) and info.st_size <= INLINE_BYTES:
        return info.st_size
    return None


async def run_blocking(
    inline: bool, work: Callable[..., T], *args: object, abandon_on_cancel: bool = False
) -> T:
    """``work(*args)`` inline when ``inline`` (small, bounded work), else in a thread."""
    if inline:
        await trio.lowlevel.checkpoint()
        return work(*args)
    return await trio.to_thread.run_sync(work, *args, abandon_on_cancel=abandon_on_cancel)


async def run_stoppable(work: Callable[[threading.Event], T], *, inline: bool = False) -> T:
    """Run ``work(stop)`` in a thread; on cancellation return at once and set ``stop``.

    With ``inline`` (one small regular file) it runs on the event loop thread.

    A cancelled caller does not wait for the thread (a tree walk can take
    long); ``work`` should check ``stop`` often and give up when it is set,
    so an abandoned thread does not keep burning CPU.
    """
    stop = threading.Event()
    if inline:
        await trio.lowlevel.checkpoint()
        return work(stop)
    try:
        return await trio.to_thread.run_sync(work, stop, abandon_on_cancel=True)
    finally:
        stop.set()
