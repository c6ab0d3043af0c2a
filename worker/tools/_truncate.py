"""Keeping tool output under the model's byte cap without breaking UTF-8.

Two shapes: :func:`truncate_text` keeps the head of a finished text (the end
is what a narrower request would show), and :class:`HeadTailBuffer` keeps the
head and the tail of a stream whose size is unknown up front (Bash output,
where both the first lines and the final error matter).
"""

from __future__ import annotations

__all__ = [
    "HeadTailBuffer",
    "complete_utf8_prefix_length",
    "encode_for_model",
    "truncate_text",
    "utf8_boundary_at_or_before",
]


def encode_for_model(text: str) -> bytes:
    """UTF-8 bytes of ``text``; lone surrogates (from undecodable file names) become ``?``."""
    return text.encode("utf-8", errors="replace")


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def utf8_boundary_at_or_before(data: bytes | bytearray, index: int) -> int:
    """The largest cut position ``<= index`` that does not split a UTF-8 character."""
    index = max(0, min(index, len(data)))
    # A UTF-8 character is at most 4 bytes, so at most 3 steps back.
    steps = 0
    while 0 < index < len(data) and _is_continuation(data[index]) and steps < 3:
        index -= 1
        steps += 1
    return index


def complete_utf8_prefix_length(data: bytes | bytearray) -> int:
    """Length of the longest prefix of ``data`` that ends on a complete UTF-8 character.

    Unlike :func:`utf8_boundary_at_or_before`, the byte after ``data`` is
    unknown (the stream goes on), so an unfinished multi-byte sequence at the
    end is detected from its lead byte.
    """
    end = len(data)
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if _is_continuation(byte):
            continue
        if byte >= 0xF0:
            needed = 4
        elif byte >= 0xE0:
            needed = 3
        elif byte >= 0xC0:
            needed = 2
        else:
            needed = 1
        return end if back >= needed else end - back
    return end


def _skip_leading_continuations(data: bytes | bytearray) -> int:
    """How many bytes at the start of ``data`` belong to a character cut off before it."""
    skipped = 0
    while skipped < min(3, len(data)) and _is_continuation(data[skipped]):
        skipped += 1
    return skipped


def _omitted_marker(omitted_bytes: int, omitted_lines: int, hint: str) -> str:
    advice = f" {hint}" if hint else ""
    return f"\n[output truncated: {omitted_bytes} bytes ({omitted_lines} lines) omitted.{advice}]"


def _line_count(data: bytes | bytearray) -> int:
    """Number of lines ``data`` touches, counting an unterminated last line."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def truncate_text(text: str, max_bytes: int, hint: str) -> str:
    """Return ``text`` if it fits in ``max_bytes`` (UTF-8), else its head plus a marker.

    The marker says how many bytes and lines were omitted and ends with
    ``hint`` (how to see the rest). The result never exceeds ``max_bytes``;
    the head is cut on a character boundary, preferably after a newline.
    """
    data = encode_for_model(text)
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    # The omitted count can only be smaller than the whole, so a marker built
    # from the whole size is at least as long as the final one.
    longest_marker = encode_for_model(_omitted_marker(len(data), _line_count(data), hint))
    budget = max_bytes - len(longest_marker)
    if budget <= 0:
        marker = encode_for_model(_omitted_marker(len(data), _line_count(data), hint).lstrip())
        return marker[: utf8_boundary_at_or_before(marker, max_bytes)].decode("utf-8")
    cut = utf8_boundary_at_or_before(data, budget)
    newline = data.rfind(b"\n", 0, cut)
    # Prefer whole lines, unless that would throw away most of the budget.
    if newline >= cut // 2:
        cut = newline + 1
    omitted = data[cut:]
    marker_text = _omitted_marker(len(omitted), _line_count(omitted), hint)
    return data[:cut].decode("utf-8") + marker_text


class HeadTailBuffer:
    """Bounded capture of a byte stream: the first ``head_limit`` and last ``tail_limit`` bytes.

    Memory stays ``O(head_limit + tail_limit)`` however much is fed; the
    bytes dropped from the middle are counted, with their newlines.
    """

    def __init__(self, head_limit: int, tail_limit: int) -> None:
        if head_limit < 0 or tail_limit < 0:
            raise ValueError("limits must not be negative")
        self._head_limit = head_limit
        self._tail_limit = tail_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total_bytes = 0
        self.dropped_bytes = 0
        self.dropped_newlines = 0

    def feed(self, data: bytes) -> None:
        """Add the next chunk of the stream."""
        self.total_bytes += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self._tail_limit:
            # The whole current tail and the start of this chunk fall out.
            cut = len(data) - self._tail_limit
            self._drop(self._tail)
            self._drop(data[:cut])
            self._tail = bytearray(data[cut:])
            return
        self._tail += data
        excess = len(self._tail) - self._tail_limit
        if excess > 0:
            self._drop(self._tail[:excess])
            del self._tail[:excess]

    def _drop(self, data: bytes | bytearray) -> None:
        self.dropped_bytes += len(data)
        self.dropped_newlines += data.count(b"\n")

    def render(self, hint: str) -> str:
        """The captured text; if anything was dropped, a marker stands where it was.

        Both sides are trimmed to whole UTF-8 characters (the trimmed bytes
        count as omitted); invalid bytes in the stream become U+FFFD.
        """
        head_end = (
            complete_utf8_prefix_length(self._head) if self.dropped_bytes else len(self._head)
        )
        tail_start = _skip_leading_continuations(self._tail) if self.dropped_bytes else 0
        head = bytes(self._head[:head_end])
        tail = bytes(self._tail[tail_start:])
        if not self.dropped_bytes:
            return (head + tail).decode("utf-8", errors="replace")
        trimmed = self._head[head_end:] + self._tail[:tail_start]
        omitted_bytes = self.dropped_bytes + len(trimmed)
        omitted_newlines = self.dropped_newlines + trimmed.count(b"\n")
        marker = (
            f"\n[... {omitted_bytes} bytes ({omitted_newlines} newlines) omitted "
            f"from the middle of the output. {hint}]\n"
        )
        return (
            head.decode("utf-8", errors="replace") + marker + tail.decode("utf-8", errors="replace")
        )
