"""Read: a text file with line numbers, like ``cat -n`` (S-LOCAL-1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pydantic import Field

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput, resolve_path
from ._errors import BinaryFileError
from ._textfile import SNIFF_BYTES, check_regular_file, looks_binary
from ._threads import inline_size, run_blocking
from ._truncate import complete_utf8_prefix_length, encode_for_model

__all__ = ["DEFAULT_READ_LIMIT", "MAX_LINE_CHARS", "READ_TOOL", "ReadInput"]

DEFAULT_READ_LIMIT = 2_000
MAX_LINE_CHARS = 2_000
# Enough bytes for MAX_LINE_CHARS characters of any width; a longer line is
# skipped through rather than loaded (think of minified JSON).
_LINE_READ_BYTES = 4 * MAX_LINE_CHARS + 4
# Room kept below the byte cap for the closing "showing lines" note.
_NOTE_RESERVE_BYTES = 200


class ReadInput(ToolInput):
    """Parameters of Read."""

    file_path: str = Field(min_length=1, description="Path of the file to read.")
    offset: int = Field(
        default=1,
        ge=0,
        description="Line number to start reading from (1-based). Use for files too long "
        "to read at once.",
    )
    limit: int = Field(
        default=DEFAULT_READ_LIMIT, ge=1, description="Maximum number of lines to read."
    )


def _iter_lines(stream: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """Each line's first ``_LINE_READ_BYTES`` bytes, and whether the line was longer."""
    while True:
        chunk = stream.readline(_LINE_READ_BYTES)
        if not chunk:
            return
        if chunk.endswith(b"\n") or len(chunk) < _LINE_READ_BYTES:
            yield chunk, False
            continue
        while rest := stream.readline(_LINE_READ_BYTES):
            if rest.endswith(b"\n"):
                break
        yield chunk, True


def _count_remaining_lines(stream: BinaryIO) -> int:
    """Lines from the current position (at a line start) to the end, read in big chunks."""
    count = 0
    last = b"\n"
    while chunk := stream.read(1 << 20):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


def _render_line(path: Path, number: int, raw: bytes, was_cut: bool) -> str:
    if was_cut:
        raw = raw[: complete_utf8_prefix_length(raw)]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BinaryFileError(str(path)) from None
    text = text.rstrip("\n").rstrip("\r")
    if was_cut or len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + f" [... line cut at {MAX_LINE_CHARS} characters]"
    return f"{number:6}\t{text}\n"


def _read_numbered(path: Path, offset: int, limit: int, budget: int) -> ToolOutput:
    check_regular_file(path)
    first = max(offset, 1)
    shown: list[str] = []
    used = 0
    last_shown = first - 1
    total = 0
    with path.open("rb") as stream:
        if looks_binary(stream.read(SNIFF_BYTES)):
            raise BinaryFileError(str(path))
        stream.seek(0)
        for raw, was_cut in _iter_lines(stream):
            total += 1
            if total < first:
                continue
            rendered = _render_line(path, total, raw, was_cut)
            size = len(encode_for_model(rendered))
            # Always show at least one line, or the model could never move on.
            if shown and used + size > budget:
                total += _count_remaining_lines(stream)
                break
            shown.append(rendered)
            used += size
            last_shown = total
            if len(shown) >= limit:
                total += _count_remaining_lines(stream)
                break
    if total == 0:
        return ToolOutput(f"(the file {path} exists but is empty)")
    if first > total:
        return ToolOutput(
            f"Error: offset {offset} is past the end of {path}, which has {total} lines.",
            is_error=True,
        )
    text = "".join(shown).rstrip("\n")
    if last_shown < total:
        text += (
            f"\n[Showing lines {first}-{last_shown} of {total}. "
            f"Use offset={last_shown + 1} to read more.]"
        )
    return ToolOutput(text)


async def _read(params: ReadInput, ctx: ToolContext) -> ToolOutput:
    path = resolve_path(ctx, params.file_path)
    budget = ctx.max_output_bytes - _NOTE_RESERVE_BYTES
    return await run_blocking(
        inline_size(path) is not None,
        _read_numbered,
        path,
        params.offset,
        params.limit,
        budget,
        abandon_on_cancel=True,
    )


READ_TOOL: LocalTool[ReadInput] = LocalTool(
    name="Read",
    description=(
        "Read a text file. Output is numbered like `cat -n`: line number, tab, line. "
        f"Reads up to {DEFAULT_READ_LIMIT} lines from the start by default; use offset "
        "(1-based line number) and limit for long files. Lines longer than "
        f"{MAX_LINE_CHARS} characters are cut. Relative paths start at the working "
        "directory. Binary files are refused; use LS or Glob for directories."
    ),
    input_model=ReadInput,
    execute=_read,
    truncation_hint="Use offset and limit to read a smaller part.",
)
