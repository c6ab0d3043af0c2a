"""``LiveText``: one agent's streamed answer, coalesced for whoever watches live (S-OBS-2).

The gateway hands over text as the provider streams it, a network read at
a time: at fleet scale thousands of pieces a second. Watchers (``top``,
the control channel) need the text, not every piece: ``LiveText`` joins
the pieces and publishes at most one ``text.streamed`` event per
``interval_s`` per agent, carrying the new text and its offset in the
answer. Nothing of it goes to a worker; the answer reaches the agent whole,
as the call's result.

Invariant: the text published for one call, in order, is a prefix of that
call's answer (the last pieces are published by ``finish``); ``text`` is
that prefix, so a watcher that joins mid-answer (``subvisor logs -f``) starts
from it and the next event's offset is its length.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LiveText"]

#: Fastest refresh of one agent's live text: four a second.
DEFAULT_INTERVAL_S = 0.25
_TAIL_CHARS = 60


class LiveText:
    """Coalesces one agent's streamed text into ``publish(text, offset)`` calls."""

    def __init__(
        self, publish: Callable[[str, int], None], interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self._publish = publish
        self._interval_s = interval_s
        self._pending: list[str] = []
        self._published: list[str] = []
        self._offset = 0
        self._next_at = 0.0
        self._tail = ""

    @property
    def chars(self) -> int:
        """Characters of the current answer received so far."""
        return self._offset + sum(len(piece) for piece in self._pending)

    @property
    def text(self) -> str:
        """What has been published of the current answer: the next event's offset is its length."""
        return "".join(self._published)

    @property
    def tail(self) -> str:
        """The last characters of the current answer received so far, on one line."""
        text = (self._tail + "".join(self._pending))[-_TAIL_CHARS:]
        return " ".join(text.split())

    def start(self) -> None:
        """A new answer begins: offsets count from 0 again."""
        self._pending.clear()
        self._published.clear()
        self._offset = 0
        self._tail = ""

    def add(self, text: str) -> None:
        """Take a piece of the answer; publish if the interval has passed."""
        self._pending.append(text)
        now = time.monotonic()
        if now >= self._next_at:
            self._next_at = now + self._interval_s
            self._flush()

    def finish(self) -> None:
        """The answer is complete: publish what is still pending, then start over."""
        self._flush()
        self.start()

    def _flush(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        offset, self._offset = self._offset, self._offset + len(text)
        self._published.append(text)
        self._tail = (self._tail + text)[-_TAIL_CHARS:]
        self._publish(text, offset)
