"""Running blocking file-system work off the trio thread, stoppable on cancel."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import trio

__all__ = ["run_stoppable"]

T = TypeVar("T")


async def run_stoppable(work: Callable[[threading.Event], T]) -> T:
    """Run ``work(stop)`` in a thread; on cancellation return at once and set ``stop``.

    A cancelled caller does not wait for the thread (a tree walk can take
    long); ``work`` should check ``stop`` often and give up when it is set,
    so an abandoned thread does not keep burning CPU.
    """
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(work, stop, abandon_on_cancel=True)
    finally:
        stop.set()
