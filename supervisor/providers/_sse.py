"""Server-sent events: a sans-I/O decoder that takes a body's bytes a whole read at a time.

A streamed model answer is hundreds of small events, and under load one
network read holds many of them: the decoder cuts a read of whole
one-line ``data:`` events (the shape every provider streams) at its blank
lines with one ``bytes.split``; any other read is split into lines, and
only an incomplete last line waits for the next read. Either way an event
costs a few slices and no Python call per line.
Lines end at CRLF, LF or CR, as the SSE format says; a CR at the end of a
read is held back, since its LF may start the next one. A line longer than
a read is kept as its reads, each scanned once for a line end, and joined
when it ends: linear however it is cut. A line or an event over
``MAX_EVENT_BYTES`` raises ``SseTooLargeError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import SubvisorError

__all__ = ["MAX_EVENT_BYTES", "SseDecoder", "SseEvent", "SseTooLargeError"]

#: The most an unfinished line, or an event's data, may hold: a protocol frame's limit.
MAX_EVENT_BYTES = 8 * 1024 * 1024


class SseTooLargeError(SubvisorError, ValueError):
    """A line or an event of the stream is over ``MAX_EVENT_BYTES``."""


@dataclass(slots=True)
class SseEvent:
    """One dispatched event: its ``event`` name (default ``message``) and ``data``.

    Not frozen: a frozen dataclass is made through ``object.__setattr__``, at
    four times the cost, and a streamed answer makes one per token.
    """

    event: str
    data: str


class SseDecoder:
    """Turns a byte stream into events, per the SSE format."""

    def __init__(self) -> None:
        self._tail = b""
        # An unfinished line longer than a read: its reads, and their size.
        self._line: list[bytes] = []
        self._line_size = 0
        self._event = b""
        self._data: list[bytes] = []
        self._data_size = 0

    def feed(self, data: bytes) -> list[SseEvent]:
        """Take the next bytes of the stream; return the events they complete."""
        if self._tail or self._line:
            if b"\n" not in data and b"\r" not in data and not self._tail.endswith(b"\r"):
                # The unfinished line goes on: keep the read, scan nothing twice.
                if self._tail:
                    self._line.append(self._tail)
                    self._line_size += len(self._tail)
                    self._tail = b""
                self._line.append(data)
                self._line_size += len(data)
                if self._line_size > MAX_EVENT_BYTES:
                    raise SseTooLargeError("an SSE line over 8 MiB")
                return []
            if self._line:
                buffer = b"".join((*self._line, self._tail, data))
                self._line, self._line_size = [], 0
            else:
                buffer = self._tail + data
        else:
            buffer = data
        events: list[SseEvent] = []
        if not self._data and not self._event and b"\r" not in buffer:
            # The usual read: whole events of one ``data: `` line each, cut at
            # their blank lines in one split. The first part of another shape
            # (and all after it) goes line by line below, from a clean state,
            # exactly as if the fast events had gone that way too.
            parts = buffer.split(b"\n\n")
            tail = parts.pop()
            for done, part in enumerate(parts):
                if not part.startswith(b"data: ") or b"\n" in part:
                    buffer = b"\n\n".join((*parts[done:], tail))
                    break
                events.append(SseEvent("message", part[6:].decode("utf-8", "replace")))
            else:
                if b"\n" not in tail:
                    self._tail = tail
                    return events
                # Lines of an event not ended yet: take them in now (held, they
                # would be scanned again with each read).
                buffer = tail
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._tail = lines.pop() + held
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
                self._data_size += len(value)
                if self._data_size > MAX_EVENT_BYTES:
                    raise SseTooLargeError("an SSE event over 8 MiB")
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
        tail = b"".join((*self._line, self._tail)).rstrip(b"\r")
        self._tail, self._line, self._line_size = b"", [], 0
        events = self.feed(tail + b"\n\n") if tail or self._data else []
        return events[0] if events else None

    def _dispatch(self) -> SseEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        name = self._event.decode("utf-8", "replace") if self._event else "message"
        self._event = b""
        self._data = []
        self._data_size = 0
        return SseEvent(event=name, data=data.decode("utf-8", "replace"))
