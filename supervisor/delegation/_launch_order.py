"""``LaunchOrder``: subagents queue for a worker slot in the order they were launched.

When more subagents are launched than ``max_concurrent_subagents`` allows,
the extra ones wait, and they should start in the order the model asked for
them. The slots themselves are a FIFO semaphore, so what needs ordering is
only the moment each run joins its queue. That moment is not in launch order
on its own: the Agent calls of one model message run as concurrent tasks,
and trio deliberately starts a batch of new tasks in either order.

So each launch takes a ticket, in call order, before the calls start
(``Toolbox.reserve``), and its run joins the slot queue only on its turn:
once every earlier ticket has joined or been given up. There is one line per
parent session (``Subvisor.launch_order``): a launch held back in one session
(waiting for an approval, say) never holds back another session's. Invariants:

- tickets are issued in increasing order, and each is passed exactly once
  (``pass_turn`` is idempotent, so "pass on every exit path" is safe);
- a ticket passed early (its launch failed, or its call was cancelled) is
  skipped, so it can never hold later launches back;
- a run passes its turn right before it awaits the semaphore, with no
  checkpoint in between: trio's ``Semaphore.acquire`` joins the queue before
  it first yields, so the next run cannot overtake it.
"""

from __future__ import annotations

import trio

__all__ = ["LaunchOrder"]


class LaunchOrder:
    """Turns in launch order; see the module doc."""

    def __init__(self) -> None:
        self._issued = 0
        self._next = 0
        self._passed: set[int] = set()
        # One event per waiting ticket, so a pass wakes only the next in line
        # (a thousand queued launches must not all wake at every pass).
        self._waiting: dict[int, trio.Event] = {}

    def ticket(self) -> int:
        """The next ticket: a place in line behind every ticket issued before."""
        ticket = self._issued
        self._issued += 1
        return ticket

    async def wait_turn(self, ticket: int) -> None:
        """Wait until every ticket before ``ticket`` has passed its turn."""
        if self._next >= ticket:
            return
        event = self._waiting.setdefault(ticket, trio.Event())
        try:
            await event.wait()
        finally:
            self._waiting.pop(ticket, None)

    def pass_turn(self, ticket: int) -> None:
        """Let the tickets behind ``ticket`` go; a second call does nothing."""
        if ticket < self._next or ticket in self._passed:
            return
        self._passed.add(ticket)
        while self._next in self._passed:
            self._passed.discard(self._next)
            self._next += 1
        event = self._waiting.get(self._next)
        if event is not None:
            event.set()

    @property
    def waiting_behind(self) -> int:
        """Tickets issued and not yet passed (for tests and diagnostics)."""
        return self._issued - self._next - len(self._passed)
