"""LS: a directory tree (S-LOCAL-1; opencode calls it ``list``)."""

from __future__ import annotations

import os
import threading
from functools import partial
from pathlib import Path

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput, resolve_path
from ._errors import ToolError
from ._pathmatch import SKIPPED_DIR_NAMES, GlobMatcher
from ._threads import run_stoppable

__all__ = ["LS_TOOL", "MAX_LS_ENTRIES", "LSInput"]

MAX_LS_ENTRIES = 1_000


class LSInput(ToolInput):
    """Parameters of LS."""

    path: str = Field(min_length=1, description="Directory to list.")
    ignore: list[str] | SkipJsonSchema[None] = Field(
        default=None, description='Glob patterns of names to leave out, e.g. ["*.log"].'
    )


class _Listing:
    """Builds the indented tree, counting entries against the cap."""

    def __init__(self, ignore: list[GlobMatcher], stop: threading.Event) -> None:
        self.lines: list[str] = []
        self.entries = 0
        self.truncated = False
        self._ignore = ignore
        self._stop = stop

    def _ignored(self, relative: str) -> bool:
        return any(matcher.matches_file(relative) for matcher in self._ignore)

    def add_directory(self, directory: str, relative: str, depth: int) -> None:
        indent = "  " * (depth + 1)
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as exc:
            self.lines.append(f"{indent}- ({exc.strerror or 'unreadable'})")
            return
        for entry in entries:
            if self._stop.is_set() or self.entries >= MAX_LS_ENTRIES:
                self.truncated = self.truncated or bool(entries)
                return
            entry_relative = relative + entry.name
            if self._ignored(entry_relative):
                continue
            self.entries += 1
            try:
                is_dir = entry.is_dir()
                is_link = entry.is_symlink()
            except OSError:
                is_dir = is_link = False
            if not is_dir:
                self.lines.append(f"{indent}- {entry.name}")
            elif is_link:
                self.lines.append(f"{indent}- {entry.name}/ (symlink, not expanded)")
            elif entry.name in SKIPPED_DIR_NAMES:
                self.lines.append(f"{indent}- {entry.name}/ (not expanded)")
            else:
                self.lines.append(f"{indent}- {entry.name}/")
                self.add_directory(entry.path, entry_relative + "/", depth + 1)


def _list(directory: Path, ignore: list[str], stop: threading.Event) -> str:
    if not directory.exists():
        raise ToolError(f"Error: directory does not exist: {directory}")
    if not directory.is_dir():
        raise ToolError(f"Error: not a directory: {directory} (use Read for files)")
    listing = _Listing([GlobMatcher.compile(pattern) for pattern in ignore], stop)
    listing.add_directory(str(directory), "", 0)
    lines = [f"- {directory}/", *listing.lines]
    if listing.truncated:
        lines.append(
            f"(Stopped after {MAX_LS_ENTRIES} entries. List a subdirectory or use Glob "
            "to see more.)"
        )
    return "\n".join(lines)


async def _ls(params: LSInput, ctx: ToolContext) -> ToolOutput:
    directory = resolve_path(ctx, params.path)
    return ToolOutput(await run_stoppable(partial(_list, directory, params.ignore or [])))


LS_TOOL: LocalTool[LSInput] = LocalTool(
    name="LS",
    description=(
        "List a directory as an indented tree (subdirectories end with /). .git, "
        "node_modules and .venv are shown but not expanded. ignore takes glob patterns "
        "of names to leave out. Prefer Glob and Grep when you know what you look for."
    ),
    input_model=LSInput,
    execute=_ls,
    truncation_hint="List a subdirectory, or use Glob with a pattern.",
)
