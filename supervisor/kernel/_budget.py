"""``EventBudget``: how much one worker may make the supervisor record (S-SEC-8).

A worker is untrusted, and a flood of valid ``event`` frames is still valid:
without a bound, one worker grows the session store by tens of MB a second.
Each worker's handle holds one budget, with two limits:

- **events**: every event frame the worker sends, and every request of it
  that makes the supervisor record or queue something (a permission check,
  a question, a message to its coordinator, an MCP call);
- **bytes**: the text of every row stored on its behalf (its events, its
  transcript messages with their tool outputs and model text, the events its
  requests raise, the messages it queues for its coordinator).

The first charge past either limit exhausts the budget: that charge raises
``EventBudgetExceededError`` and so does every later one, so nothing more is
recorded for the worker, and ``on_exhausted`` is called, with which its
handle stops it with ``reason`` as its exit.

Invariants:

- After exhaustion nothing is stored for the worker: the store grows by at
  most the byte limit from one worker (rows are charged before they are
  written, and a refused row is not written).
- The defaults (``EventBudgetLimits``) are far above any normal run: a
  subagent's whole transcript is about the size of its context (a few MB).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from ._errors import SubvisorError

__all__ = ["EventBudget", "EventBudgetExceededError", "EventBudgetLimits", "text_size"]

_MB = 1024 * 1024


class EventBudgetLimits(BaseModel):
    """What one worker (one subagent) may make the supervisor record (S-SEC-8).

    In ``subvisor.toml``: ``[event_budget]`` with ``max_events`` and ``max_event_mb``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Event frames, plus requests that record something, per worker.
    max_events: int = Field(default=100_000, ge=1)
    #: MB of text stored for one worker: events, transcript, tool output, model text.
    max_event_mb: float = Field(default=64.0, gt=0)

    def describe(self) -> str:
        """``100000 events / 64 MB``."""
        return f"{self.max_events} events / {self.max_event_mb:g} MB"


class EventBudgetExceededError(SubvisorError):
    """A worker's event budget is spent: nothing more is recorded for it."""


class EventBudget:
    """One worker's running count of events and stored bytes against its limits."""

    def __init__(self, limits: EventBudgetLimits | None = None) -> None:
        self.limits = limits or EventBudgetLimits()
        self.events = 0
        self.bytes = 0
        #: Called once, when a charge first goes past a limit.
        self.on_exhausted: Callable[[], None] | None = None
        #: Why, once exhausted: ``event budget exceeded: 100000 events / 64 MB``.
        self.reason: str | None = None
        self._max_bytes = int(self.limits.max_event_mb * _MB)

    def charge(self, *, events: int = 0, size: int = 0) -> None:
        """Count ``events`` and ``size`` bytes; raise ``EventBudgetExceededError`` past a limit.

        The charge that goes past a limit is refused as well: its caller
        must not record what it was for.
        """
        if self.reason is None:
            self.events += events
            self.bytes += size
            if self.events <= self.limits.max_events and self.bytes <= self._max_bytes:
                return
            self.reason = (
                f"event budget exceeded: {self.limits.describe()}"
                " ([event_budget] in config.toml allows more)"
            )
            if self.on_exhausted is not None:
                self.on_exhausted()
        raise EventBudgetExceededError(self.reason)


def text_size(text: str) -> int:
    """The UTF-8 size of ``text``, without encoding it when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
