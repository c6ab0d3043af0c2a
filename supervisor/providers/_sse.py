"""Server-sent events: a sans-I/O line decoder and an async adapter over lines."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import trio

__all__ = ["SseDecoder", "SseEvent", "aiter_sse_events", "drain_sse_events"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its ``event`` name (default ``message``) and ``data``."""

    event: str
    data: str


class SseDecoder:
    """Turns lines (without their terminators) into events, per the SSE format."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed_line(self, line: str) -> SseEvent | None:
        """Take one line; return the event that a blank line completes, if any."""
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        # "id" and "retry" only matter for reconnecting EventSource clients.
        return None

    def end(self) -> SseEvent | None:
        """Flush at end of stream.

        The SSE standard drops an event that is not followed by a blank line;
        some compatible servers omit that last blank line, so we keep it.
        """
        return self._dispatch()

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            # An event name without data lines is discarded, as the standard says.
            self._event = ""
            return None
        event = SseEvent(event=self._event or "message", data="\n".join(self._data))
        self._event = ""
        self._data = []
        return event


async def aiter_sse_events(lines: AsyncIterator[str]) -> AsyncGenerator[SseEvent, None]:
    """Decode an async stream of lines into events; closing it closes ``lines``."""
    decoder = SseDecoder()
    try:
        async for line in lines:
            event = decoder.feed_line(line)
            if event is not None:
                yield event
        last = decoder.end()
        if last is not None:
            yield last
    finally:
        aclose = getattr(lines, "aclose", None)
        if aclose is not None:
            await aclose()


async def drain_sse_events(events: AsyncIterator[SseEvent], grace_s: float = 1.0) -> None:
    """Read (and ignore) what follows a stream's end marker, for at most ``grace_s``.

    httpx can only return a connection to the pool once its body has been read
    to the end; a server normally closes the body right after the end marker,
    and the time bound protects us from one that does not.
    """
    with trio.move_on_after(grace_s):
        async for _ in events:
            pass
