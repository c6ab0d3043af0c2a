"""Server-sent events: a sans-I/O decoder that takes a body's bytes a whole read at a time.

A streamed model answer is hundreds of small events, and under load one
network read holds many of them: the decoder splits each read into lines
with one ``bytes.split`` and keeps only an incomplete last line for the
next read, so an event costs a few slices and no Python call per line.
Lines end at CRLF, LF or CR, as the SSE format says; a CR at the end of a
read is held back, since its LF may start the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SseDecoder", "SseEvent"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its ``event`` name (default ``message``) and ``data``."""

    event: str
    data: str


class SseDecoder:
    """Turns a byte stream into events, per the SSE format."""

    def __init__(self) -> None:
        self._tail = b""
        self._event = b""
        self._data: list[bytes] = []

    def feed(self, data: bytes) -> list[SseEvent]:
        """Take the next bytes of the stream; return the events they complete."""
        buffer = self._tail + data if self._tail else data
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._tail = lines.pop() + held
        events: list[SseEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._dispatch())
                else:
                    # An event name without data lines is discarded, as the standard says.
                    self._event = b""
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
            elif line.startswith(b"event:"):
                value = line[6:]
                self._event = value[1:] if value.startswith(b" ") else value
            # Comments (":") are skipped, and so are "id" and "retry": they only
            # matter for reconnecting EventSource clients.
        return events

    def end(self) -> SseEvent | None:
        """Flush at end of stream.

        The SSE standard drops an event that is not followed by a blank line;
        some compatible servers omit that last blank line, so we keep it.
        """
        tail, self._tail = self._tail.rstrip(b"\r"), b""
        events = self.feed(tail + b"\n\n") if tail or self._data else []
        return events[0] if events else None

    def _dispatch(self) -> SseEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        name = self._event.decode("utf-8", "replace") if self._event else "message"
        self._event = b""
        self._data = []
        return SseEvent(event=name, data=data.decode("utf-8", "replace"))
