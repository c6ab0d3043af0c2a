"""Glob: find files by name pattern, newest first (S-LOCAL-1).

A file a ``read`` deny of the agent's rules covers is not listed (S-POL-2,
:meth:`ToolContext.hides`), as Claude Code's Read denies cover Glob.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput, resolve_path
from ._errors import ToolError
from ._pathmatch import GlobMatcher, expand_braces, split_literal_prefix, walk_files
from ._threads import run_stoppable

__all__ = ["GLOB_TOOL", "MAX_GLOB_RESULTS", "GlobInput"]

MAX_GLOB_RESULTS = 100


class GlobInput(ToolInput):
    """Parameters of Glob."""

    pattern: str = Field(
        min_length=1,
        description='Glob pattern, e.g. "**/*.py", "src/**/*.{ts,tsx}" or "*.md".',
    )
    path: str | SkipJsonSchema[None] = Field(
        default=None,
        description="Directory to search in. Omit it to search the working directory.",
    )


def _check_directory(directory: Path) -> None:
    if not directory.exists():
        raise ToolError(f"Error: directory does not exist: {directory}")
    if not directory.is_dir():
        raise ToolError(f"Error: not a directory: {directory}")


def _max_depth(pattern: str) -> int | None:
    """How deep below the root the pattern can reach; None when ``**`` makes it unbounded."""
    alternatives = expand_braces(pattern)
    if any("**" in alternative for alternative in alternatives):
        return None
    return max(alternative.count("/") for alternative in alternatives)


def _find(base: Path, pattern: str, hides: Callable[[str], bool], stop: threading.Event) -> str:
    _check_directory(base)
    prefix, rest = split_literal_prefix(pattern)
    root = Path(os.path.normpath(base / prefix)) if prefix else base
    if not root.is_dir():
        return "No files found"
    matcher = GlobMatcher.compile(rest)
    found: list[tuple[float, str]] = []
    for relative, entry in walk_files(root, _max_depth(rest)):
        if stop.is_set():
            break
        path = os.path.join(root, relative)
        if not matcher.matches(relative) or hides(path):
            continue
        try:
            mtime = entry.stat().st_mtime
        except OSError:
            continue  # vanished or a dangling symlink
        found.append((mtime, path))
    if not found:
        return "No files found"
    found.sort(key=lambda item: (-item[0], item[1]))
    lines = [path for _, path in found[:MAX_GLOB_RESULTS]]
    if len(found) > MAX_GLOB_RESULTS:
        lines.append(
            f"(Showing the {MAX_GLOB_RESULTS} most recently modified of {len(found)} "
            "matches. Use a more specific pattern or path to see the others.)"
        )
    return "\n".join(lines)


async def _glob(params: GlobInput, ctx: ToolContext) -> ToolOutput:
    base = resolve_path(ctx, params.path or ".")
    return ToolOutput(await run_stoppable(partial(_find, base, params.pattern, ctx.hides)))


GLOB_TOOL: LocalTool[GlobInput] = LocalTool(
    name="Glob",
    description=(
        'Find files by glob pattern ("**" matches any number of directories, '
        '"{a,b}" alternatives). Returns matching file paths, most recently modified first, '
        f"at most {MAX_GLOB_RESULTS}. Skips .git, node_modules and .venv. Use Grep to "
        "search file contents."
    ),
    input_model=GlobInput,
    execute=_glob,
    truncation_hint="Use a more specific pattern or path.",
)
