"""Output caps for local tools: the model never gets more than it can take (S-LOCAL-2)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from worker.tools._truncate import (
    HeadTailBuffer,
    complete_utf8_prefix_length,
    truncate_text,
    utf8_boundary_at_or_before,
)

_TRUNCATED = re.compile(
    r"\n\[output truncated: (\d+) bytes \((\d+) lines\) omitted\. (.*)\]\Z", re.S
)
_MIDDLE = re.compile(r"\n\[\.\.\. (\d+) bytes \((\d+) newlines\) omitted from the middle")

# Wide characters make UTF-8 boundaries matter.
_texts = st.text(alphabet=st.sampled_from("ab\n é€😀"), max_size=3_000)


@given(text=_texts, max_bytes=st.integers(min_value=0, max_value=4_000))
def test_truncate_text_never_exceeds_cap(text: str, max_bytes: int) -> None:
    """S-LOCAL-2: whatever the text, the result fits in max_bytes."""
    result = truncate_text(text, max_bytes, "Use offset.")
    assert len(result.encode("utf-8")) <= max_bytes


@given(text=_texts, max_bytes=st.integers(min_value=200, max_value=4_000))
def test_truncate_text_keeps_a_prefix_and_counts_what_it_dropped(text: str, max_bytes: int) -> None:
    """S-LOCAL-2: the kept head is a character-exact prefix; the marker counts the rest."""
    result = truncate_text(text, max_bytes, "Use offset.")
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        assert result == text
        return
    match = _TRUNCATED.search(result)
    assert match is not None, result
    head = result[: match.start()]
    assert text.startswith(head)
    omitted = data[len(head.encode("utf-8")) :]
    assert int(match.group(1)) == len(omitted)
    assert int(match.group(2)) == omitted.count(b"\n") + (0 if omitted.endswith(b"\n") else 1)
    assert match.group(3) == "Use offset."


def test_truncate_text_prefers_cutting_after_a_newline() -> None:
    text = "".join(f"line {n:04}\n" for n in range(1_000))
    result = truncate_text(text, 1_000, "hint")
    head = result[: result.index("\n[output truncated")]
    assert head.endswith("\n")
    assert len(result.encode()) <= 1_000


def test_truncate_text_replaces_lone_surrogates() -> None:
    """File names that are not UTF-8 arrive as surrogate escapes; the model gets '?'."""
    assert truncate_text("bad\udcffname", 100, "hint") == "bad?name"


def _char_boundaries(text: str) -> list[int]:
    """Byte offsets where a character of ``text`` starts, and its end."""
    offsets = [0]
    for char in text:
        offsets.append(offsets[-1] + len(char.encode("utf-8")))
    return offsets


@given(text=st.text(max_size=40), index=st.integers(min_value=-5, max_value=200))
def test_utf8_boundary_is_the_last_character_start_at_or_before(text: str, index: int) -> None:
    """The cut keeps as much as it can: the largest character boundary <= index."""
    data = text.encode("utf-8")
    expected = max(b for b in _char_boundaries(text) if b <= max(0, index))
    assert utf8_boundary_at_or_before(data, index) == expected


@given(text=st.text(max_size=40), cut=st.integers(min_value=0, max_value=200))
def test_complete_prefix_is_the_longest_whole_character_prefix(text: str, cut: int) -> None:
    """A stream cut anywhere keeps every complete character before the cut, no more."""
    prefix = text.encode("utf-8")[:cut]
    expected = max(b for b in _char_boundaries(text) if b <= len(prefix))
    assert complete_utf8_prefix_length(prefix) == expected


@given(
    text=_texts,
    chunk_sizes=st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=30),
    head_limit=st.integers(min_value=0, max_value=600),
    tail_limit=st.integers(min_value=0, max_value=600),
)
def test_head_tail_buffer_keeps_both_ends_and_counts_the_middle(
    text: str, chunk_sizes: list[int], head_limit: int, tail_limit: int
) -> None:
    """Bash capture (S-LOCAL-2): bounded memory, exact head and tail, exact omitted count."""
    data = text.encode("utf-8")
    buffer = HeadTailBuffer(head_limit, tail_limit)
    position = 0
    index = 0
    while position < len(data):
        size = chunk_sizes[index % len(chunk_sizes)]
        buffer.feed(data[position : position + size])
        position += size
        index += 1
    assert buffer.total_bytes == len(data)
    assert buffer.dropped_bytes == max(0, len(data) - head_limit - tail_limit)
    rendered = buffer.render("hint")
    match = _MIDDLE.search(rendered)
    if buffer.dropped_bytes == 0:
        assert rendered == text
        return
    assert match is not None
    head = rendered[: match.start()]
    tail = rendered[rendered.index("hint]\n", match.start()) + len("hint]\n") :]
    assert text.startswith(head)
    assert text.endswith(tail)
    head_bytes, tail_bytes = len(head.encode()), len(tail.encode())
    assert head_bytes <= head_limit
    assert tail_bytes <= tail_limit
    assert int(match.group(1)) == len(data) - head_bytes - tail_bytes
    middle = data[head_bytes : len(data) - tail_bytes]
    assert int(match.group(2)) == middle.count(b"\n")


def test_head_tail_buffer_memory_is_bounded_by_its_limits() -> None:
    buffer = HeadTailBuffer(100, 100)
    for _ in range(1_000):
        buffer.feed(b"x" * 10_000)
    rendered = buffer.render("hint")
    assert buffer.dropped_bytes == 10_000_000 - 200
    assert len(rendered.encode()) < 400
