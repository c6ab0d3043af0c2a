"""``LifecycleFeed``: the host's subagent lifecycle events, for whoever watches live.

The control channel's ``subscribe`` (and through it ``subvisor top``)
refreshes on these, never by polling per token (S-OBS-1). One event per
lifecycle step, never per streamed token:

========================  =====================================================
``task.registered``       a subagent was launched (its task is pending)
``task.started``          its worker is ready; the task is running
``task.backgrounded``     a foreground subagent was moved to the background
``model.waiting``         a model call of it waits for a gateway slot (``waiting``)
``text.streamed``         its answer's text as it streams (``text``, ``offset``),
                          coalesced: at most four a second per agent
``turn.finished``         one of its model calls returned (usage grew)
``tool.finished``         one of its tool calls ended
``message.appended``      its transcript grew by one message (S-OBS-2)
``task.ended``            its single terminal record was written
========================  =====================================================

Every event carries ``session_id`` (the parent session), ``agentId`` and
``ts`` (epoch seconds).

Publishing never blocks the supervisor: a subscriber whose buffer is full is
dropped, and sees its channel end; it must then re-read the state it shows
(the control channel tells its client ``resync``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import trio

__all__ = ["LIFECYCLE_EVENTS", "LifecycleFeed"]

LIFECYCLE_EVENTS: Final = frozenset(
    {
        "task.registered",
        "task.started",
        "task.backgrounded",
        "model.waiting",
        "text.streamed",
        "turn.finished",
        "tool.finished",
        "message.appended",
        "task.ended",
    }
)

_BUFFER = 4096


class LifecycleFeed:
    """Fan-out of lifecycle events to any number of subscribers."""

    def __init__(self) -> None:
        self._subscribers: set[trio.MemorySendChannel[dict[str, Any]]] = set()

    def publish(self, event_name: str, session_id: str, agent_id: str, **data: Any) -> None:
        """Hand one event to every subscriber now (never waits)."""
        if event_name not in LIFECYCLE_EVENTS:
            raise ValueError(
                f"unknown lifecycle event {event_name!r}; known: {sorted(LIFECYCLE_EVENTS)}"
            )
        if not self._subscribers:
            return
        event = {
            "event": event_name,
            "session_id": session_id,
            "agentId": agent_id,
            "ts": time.time(),
        }
        event.update(data)
        for channel in list(self._subscribers):
            try:
                channel.send_nowait(event)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                # Too slow (or gone): drop it rather than stall the supervisor.
                self._subscribers.discard(channel)
                channel.close()

    @contextmanager
    def subscribe(
        self, buffer: int = _BUFFER
    ) -> Iterator[trio.MemoryReceiveChannel[dict[str, Any]]]:
        """Receive every event published from now until the block ends (or the feed drops you)."""
        send, receive = trio.open_memory_channel[dict[str, Any]](buffer)
        self._subscribers.add(send)
        try:
            with receive:
                yield receive
        finally:
            self._subscribers.discard(send)
            send.close()
