"""Grep: search file contents with a Python regular expression (S-LOCAL-1).

A file a ``read`` deny of the agent's rules covers is skipped (S-POL-2,
:meth:`ToolContext.hides`): searching a folder does not read what Read may not.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput, resolve_path
from ._errors import ToolError
from ._pathmatch import GlobMatcher, walk_files
from ._read import MAX_LINE_CHARS
from ._textfile import SNIFF_BYTES, check_regular_file, looks_binary
from ._threads import inline_size, run_stoppable

__all__ = ["GREP_TOOL", "MAX_GREP_FILES", "MAX_GREP_LINES", "GrepInput", "GrepOutputMode"]

MAX_GREP_FILES = 200
MAX_GREP_LINES = 500

GrepOutputMode = Literal["files_with_matches", "content", "count"]


class GrepInput(ToolInput):
    """Parameters of Grep (``-i`` and ``-n`` are the names the model uses)."""

    pattern: str = Field(
        min_length=1, description="Regular expression (Python `re` syntax) to search for."
    )
    path: str | SkipJsonSchema[None] = Field(
        default=None,
        description="File or directory to search. Omit it to search the working directory.",
    )
    glob: str | SkipJsonSchema[None] = Field(
        default=None,
        description='Only search files matching this glob, e.g. "*.py" or "*.{ts,tsx}". '
        "A pattern without / matches the file name.",
    )
    output_mode: GrepOutputMode = Field(
        default="files_with_matches",
        description='"files_with_matches" lists matching files (newest first), "content" '
        'shows matching lines, "count" shows the number of matching lines per file.',
    )
    case_insensitive: bool = Field(default=False, alias="-i", description="Ignore case.")
    line_numbers: bool = Field(
        default=True,
        alias="-n",
        description='Show line numbers with output_mode "content".',
    )


@dataclass(slots=True)
class _FileMatches:
    """What one file contributed."""

    path: str
    count: int = 0
    lines: list[tuple[int, str]] = field(default_factory=list)


def _candidate_files(
    target: Path, glob: GlobMatcher | None, stop: threading.Event, hides: Callable[[str], bool]
) -> Iterator[str]:
    """The files to search; none a ``read`` deny covers (S-POL-2), as if they were not there."""
    if not target.is_dir():
        check_regular_file(target)  # a FIFO would block the search forever
        if not hides(str(target)):
            yield str(target)
        return
    for relative, _entry in walk_files(target):
        if stop.is_set():
            return
        if glob is None or glob.matches_file(relative):
            path = os.path.join(target, relative)
            if not hides(path):
                yield path


def _search_file(
    path: str, regex: re.Pattern[str], mode: GrepOutputMode, line_room: int
) -> _FileMatches | None:
    """Matches in one file; None for binary or unreadable files, which are skipped."""
    found = _FileMatches(path)
    try:
        with open(path, "rb") as stream:
            if looks_binary(stream.read(SNIFF_BYTES)):
                return None
            stream.seek(0)
            for number, raw in enumerate(stream, start=1):
                line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
                if regex.search(line) is None:
                    continue
                found.count += 1
                if mode == "files_with_matches":
                    break
                if mode == "content":
                    found.lines.append((number, line))
                    if len(found.lines) >= line_room:
                        break
    except (OSError, UnicodeDecodeError):
        return None
    return found if found.count else None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _format_content(results: list[_FileMatches], line_numbers: bool, truncated: bool) -> list[str]:
    lines: list[str] = []
    for result in results:
        for number, text in result.lines:
            if len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS] + " [... line cut]"
            lines.append(
                f"{result.path}:{number}:{text}" if line_numbers else f"{result.path}:{text}"
            )
    if truncated:
        lines.append(
            f"(Stopped after {MAX_GREP_LINES} matching lines. Narrow the pattern, path or "
            "glob to see the rest.)"
        )
    return lines


def _grep(
    params: GrepInput, target: Path, hides: Callable[[str], bool], stop: threading.Event
) -> str:
    if not target.exists():
        raise ToolError(f"Error: path does not exist: {target}")
    flags = re.IGNORECASE if params.case_insensitive else 0
    try:
        regex = re.compile(params.pattern, flags)
    except re.error as exc:
        raise ToolError(f"Error: invalid regular expression {params.pattern!r}: {exc}") from None
    glob = GlobMatcher.compile(params.glob) if params.glob else None
    mode = params.output_mode
    results: list[_FileMatches] = []
    line_total = 0
    truncated = False
    for path in _candidate_files(target, glob, stop, hides):
        if stop.is_set():
            break
        # One line more than fits tells us there is more to say.
        found = _search_file(path, regex, mode, MAX_GREP_LINES - line_total + 1)
        if found is None:
            continue
        results.append(found)
        line_total += len(found.lines)
        if mode == "content" and line_total > MAX_GREP_LINES:
            found.lines = found.lines[: len(found.lines) - (line_total - MAX_GREP_LINES)]
            truncated = True
            break
    if not results:
        return "No matches found"
    if mode == "content":
        return "\n".join(_format_content(results, params.line_numbers, truncated))
    if mode == "count":
        total = sum(result.count for result in results)
        lines = [f"Found {total} matching lines in {len(results)} files"]
        lines += [f"{result.path}:{result.count}" for result in results]
        return "\n".join(lines)
    paths = sorted((result.path for result in results), key=lambda p: (-_mtime(p), p))
    lines = [f"Found {len(paths)} files", *paths[:MAX_GREP_FILES]]
    if len(paths) > MAX_GREP_FILES:
        lines.append(
            f"(Showing the {MAX_GREP_FILES} most recently modified. Narrow the pattern, "
            "path or glob to see the others.)"
        )
    return "\n".join(lines)


async def _run_grep(params: GrepInput, ctx: ToolContext) -> ToolOutput:
    target = resolve_path(ctx, params.path or ".")
    inline = inline_size(target) is not None
    return ToolOutput(await run_stoppable(partial(_grep, params, target, ctx.hides), inline=inline))


GREP_TOOL: LocalTool[GrepInput] = LocalTool(
    name="Grep",
    description=(
        "Search file contents with a regular expression (Python `re` syntax, matched per "
        "line). output_mode: files_with_matches (default), content or count. Filter "
        'files with glob (e.g. "*.py"); "-i" ignores case. Binary or non-UTF-8 files and .git, '
        "node_modules and .venv are skipped. Use this instead of grep or rg in Bash."
    ),
    input_model=GrepInput,
    execute=_run_grep,
    truncation_hint="Use a narrower pattern, path or glob, or output_mode files_with_matches.",
)
