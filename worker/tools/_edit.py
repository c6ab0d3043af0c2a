"""Edit: exact string replacement in a text file (S-LOCAL-1)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput, resolve_path
from ._errors import ToolError
from ._read import MAX_LINE_CHARS
from ._textfile import read_text_file
from ._threads import inline_size, run_blocking
from ._write import write_text_file

__all__ = ["EDIT_TOOL", "EditInput", "apply_edit"]

# Unchanged lines shown around an edit so the model can check it landed well.
_SNIPPET_CONTEXT_LINES = 3
_SNIPPET_MAX_LINES = 40


class EditInput(ToolInput):
    """Parameters of Edit."""

    file_path: str = Field(min_length=1, description="Path of the file to change.")
    old_string: str = Field(
        description="The exact text to replace, including whitespace and indentation."
    )
    new_string: str = Field(description="The text to put in its place (must differ).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one."
    )


def apply_edit(text: str, old_string: str, new_string: str, replace_all: bool) -> tuple[str, int]:
    """``text`` with ``old_string`` replaced, and how many replacements were made.

    Raises :class:`ToolError` when ``old_string`` equals ``new_string``, is
    empty, does not occur, or occurs more than once without ``replace_all``.
    """
    if old_string == new_string:
        raise ToolError("Error: old_string and new_string are the same; nothing to change.")
    if not old_string:
        raise ToolError(
            "Error: old_string is empty. Give the exact text to replace, or use Write "
            "to replace the whole file."
        )
    count = text.count(old_string)
    if count == 1 and not replace_all:
        # ``count`` skips overlaps: "  " is in "   " once by it, yet twice
        # by position, and which of the two the model meant is a guess.
        count = _overlapping_count(text, old_string)
    if count == 0:
        raise ToolError(
            "Error: old_string was not found in the file. It must match exactly, "
            "including whitespace; Read the file to check."
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"Error: old_string was found {count} times. Add surrounding context to make "
            "it unique, or set replace_all to true to replace every occurrence."
        )
    return text.replace(old_string, new_string), count


def _overlapping_count(text: str, needle: str) -> int:
    """How many positions of ``text`` start an occurrence of ``needle``."""
    count, start = 0, text.find(needle)
    while start != -1:
        count += 1
        start = text.find(needle, start + 1)
    return count


def _snippet(text: str, start: int, length: int) -> str:
    """``cat -n`` lines of ``text`` around the span ``[start, start + length)``."""
    lines = text.split("\n")
    first_line = text.count("\n", 0, start)
    last_line = first_line + text.count("\n", start, start + length)
    begin = max(0, first_line - _SNIPPET_CONTEXT_LINES)
    end = min(len(lines), last_line + _SNIPPET_CONTEXT_LINES + 1, begin + _SNIPPET_MAX_LINES)
    return "\n".join(
        f"{number + 1:6}\t{lines[number].rstrip(chr(13))[:MAX_LINE_CHARS]}"
        for number in range(begin, end)
    )


def _edit_file(path: Path, params: EditInput) -> str:
    if not params.old_string and not path.exists():
        # Claude Code's way to create a file with Edit.
        write_text_file(path, params.new_string)
        return f"File created successfully at: {path}"
    text = read_text_file(path)
    if not params.old_string and not text:
        new_text, count = params.new_string, 1
        first_at = 0
    else:
        new_text, count = apply_edit(text, params.old_string, params.new_string, params.replace_all)
        # Everything before the first occurrence is unchanged, so the same
        # offset marks the replacement in the new text.
        first_at = text.index(params.old_string)
    write_text_file(path, new_text)
    plural = "s" if count > 1 else ""
    return (
        f"The file {path} has been updated ({count} replacement{plural}). "
        f"Snippet of the result (cat -n):\n" + _snippet(new_text, first_at, len(params.new_string))
    )


async def _edit(params: EditInput, ctx: ToolContext) -> ToolOutput:
    path = resolve_path(ctx, params.file_path)
    # Not abandoned on cancel: a half-done write must not race a later call.
    small = inline_size(path) is not None
    return ToolOutput(await run_blocking(small, _edit_file, path, params))


EDIT_TOOL: LocalTool[EditInput] = LocalTool(
    name="Edit",
    description=(
        "Replace exact text in a file. old_string must occur exactly once (add context "
        "lines to make it unique) unless replace_all is true, and must differ from "
        "new_string. Read the file first so old_string matches character for character, "
        "indentation included. Relative paths start at the working directory."
    ),
    input_model=EditInput,
    execute=_edit,
    truncation_hint="",
)
