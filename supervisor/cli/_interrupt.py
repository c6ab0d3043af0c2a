"""SIGINT, SIGTERM and SIGHUP stop a command gracefully, the same way (S-SEC-6).

A command that runs subagents (``run``, ``demo``, ``stress``, ``workflow
run``) opens ``interruptible()`` around its whole trio body. While it is
open, the two signals are received, not raised: the first one sets
``Interruption.requested``, and the task ``stop_on_signal`` cancels the
command's scope and runs its stop (every worker stopped, saying why). The
command then records its end as interrupted and exits with
``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM, 129 for a hang-up), as
shells expect. A hang-up is the terminal closing under the command; a
command started to outlive its terminal (``nohup``: SIGHUP ignored) keeps
ignoring it.

Invariants:

- Only the first signal counts; later ones are taken and ignored, so a
  second Ctrl-C cannot cut the graceful stop short. The stop itself is
  bounded: a worker gets a grace period, then SIGKILL.
- A signal that arrives before the command set up its stop (while the
  zygote starts, say) is kept and acted on as soon as it has.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from ..kernel import SubvisorError

__all__ = ["INTERRUPT_SIGNALS", "Interruption", "RunInterruptedError", "interruptible"]

#: The signals that stop a command gracefully (SIGHUP unless it is ignored).
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interruption:
    """The first SIGINT or SIGTERM a command received, if any."""

    def __init__(self) -> None:
        self.signum: int | None = None
        #: Set at the first signal.
        self.requested = trio.Event()

    @property
    def signal_name(self) -> str:
        """``SIGINT`` or ``SIGTERM`` (empty before any signal)."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def reason(self) -> str:
        """What the tasks and sessions it ends record as why."""
        return f"the run was interrupted ({self.signal_name})"

    @property
    def exit_code(self) -> int:
        """``128 + signal``: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + (self.signum or 0)

    async def stop_on_signal(
        self, stop: Callable[[str], Awaitable[None]], scope: trio.CancelScope
    ) -> None:
        """At the first signal, cancel ``scope`` and await ``stop(reason)``, shielded.

        The scope goes first: the command's agents must not react to what
        the stop ends (a root would start a turn for each notification).
        ``stop`` runs before the next checkpoint, so it can record its
        reason before anything cancelled reacts.
        """
        await self.requested.wait()
        scope.cancel()
        with trio.CancelScope(shield=True):
            await stop(self.reason)

    async def _receive(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            if self.signum is None:
                self.signum = signum
                self.requested.set()


class RunInterruptedError(SubvisorError):
    """A command was stopped by SIGINT or SIGTERM; ``exit_code`` is what it exits with."""

    def __init__(self, interruption: Interruption) -> None:
        super().__init__(f"interrupted by {interruption.signal_name}")
        self.exit_code = interruption.exit_code


@asynccontextmanager
async def interruptible() -> AsyncIterator[Interruption]:
    """Receive SIGINT, SIGTERM and SIGHUP into an ``Interruption`` while the block runs."""
    received = [
        signum
        for signum in INTERRUPT_SIGNALS
        if signum != signal.SIGHUP or signal.getsignal(signum) is not signal.SIG_IGN
    ]
    with trio.open_signal_receiver(*received) as signals:
        async with trio.open_nursery() as nursery:
            interruption = Interruption()
            nursery.start_soon(interruption._receive, signals)
            try:
                yield interruption
            finally:
                nursery.cancel_scope.cancel()
