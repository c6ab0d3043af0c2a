"""``Outcome``: a value one task sets once and another task waits for."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import trio

__all__ = ["Outcome"]

T = TypeVar("T")


class Outcome(Generic[T]):
    """Set once (later sets are ignored; ``None`` means unset); ``wait`` parks until then.

    Cheaper than a ``trio.Event`` plus a result attribute: the setter
    reschedules the one waiting task directly, and waiting is the single
    scheduling point (none at all if the value is already in).
    """

    __slots__ = ("_task", "value")

    def __init__(self) -> None:
        self.value: T | None = None
        self._task: trio.lowlevel.Task | None = None

    def set(self, value: T) -> bool:
        """Store ``value`` and wake the waiting task, unless a value is already set.

        True when it woke a task (which runs in the scheduler's next batch).
        """
        if self.value is not None:
            return False
        self.value = value
        if self._task is None:
            return False
        trio.lowlevel.reschedule(self._task)
        self._task = None
        return True

    async def wait(self) -> None:
        """Wait until a value is set (one task at a time)."""
        if self.value is not None:
            return
        self._task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
