"""Glob patterns (``**``, ``*``, ``?``, ``[...]``, ``{a,b}``) and walking a tree for them.

Shared by Glob (which files exist) and Grep (which files to search).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ._errors import ToolError

__all__ = [
    "SKIPPED_DIR_NAMES",
    "GlobMatcher",
    "expand_braces",
    "glob_to_regex",
    "split_literal_prefix",
    "walk_files",
]

# Version-control internals and dependency trees: huge, and almost never
# what an agent is looking for. Naming one as the search root still works.
SKIPPED_DIR_NAMES = frozenset({".git", ".hg", ".svn", "node_modules", ".venv"})

_MAX_BRACE_EXPANSIONS = 256
_GLOB_CHARS = frozenset("*?[{")


def expand_braces(pattern: str) -> list[str]:
    """``a.{ts,tsx}`` -> ``[a.ts, a.tsx]``, nested braces included.

    A brace without a top-level comma, or an unbalanced one, is literal.
    Raises :class:`ToolError` past a few hundred alternatives.
    """
    expanded = _expand_braces(pattern)
    if len(expanded) > _MAX_BRACE_EXPANSIONS:
        raise ToolError(
            f"Error: the pattern expands to more than {_MAX_BRACE_EXPANSIONS} alternatives."
        )
    return expanded


def _expand_braces(pattern: str) -> list[str]:
    start = pattern.find("{")
    while start != -1:
        depth = 0
        alternatives: list[str] = []
        part_start = start + 1
        end = -1
        for index in range(start, len(pattern)):
            char = pattern[index]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    end = index
                    break
            elif char == "," and depth == 1:
                alternatives.append(pattern[part_start:index])
                part_start = index + 1
        if end == -1:
            return [pattern]
        if alternatives:
            alternatives.append(pattern[part_start:end])
            prefix, suffix = pattern[:start], pattern[end + 1 :]
            result: list[str] = []
            for alternative in alternatives:
                result.extend(_expand_braces(prefix + alternative + suffix))
                if len(result) > _MAX_BRACE_EXPANSIONS:
                    break
            return result
        start = pattern.find("{", start + 1)
    return [pattern]


def _translate_component(component: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(component):
        char = component[index]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            close = component.find("]", index + 2)
            if close == -1:
                out.append(re.escape(char))
            else:
                body = component[index + 1 : close]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[{'^' if negate else ''}{body}]")
                index = close
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def glob_to_regex(pattern: str) -> str:
    """A regex that fully matches the ``/``-separated paths ``pattern`` matches.

    ``*``, ``?`` and ``[...]`` stay within one path component; a ``**``
    component matches any number of components, zero included.
    """
    components = pattern.split("/")
    out: list[str] = []
    for position, component in enumerate(components):
        last = position == len(components) - 1
        if component == "**":
            out.append(".*" if last else "(?:[^/]*/)*")
        else:
            out.append(_translate_component(component) + ("" if last else "/"))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class GlobMatcher:
    """A compiled glob (braces expanded) matching ``/``-separated relative paths."""

    regex: re.Pattern[str]
    has_slash: bool

    @classmethod
    def compile(cls, pattern: str) -> GlobMatcher:
        """Compile ``pattern``; raises :class:`ToolError` if it is unusable."""
        alternatives = expand_braces(pattern)
        joined = "|".join(f"(?:{glob_to_regex(alt)})" for alt in alternatives)
        try:
            regex = re.compile(joined, re.DOTALL)
        except re.error as exc:
            raise ToolError(f"Error: invalid glob pattern {pattern!r}: {exc}") from None
        return cls(regex=regex, has_slash=any("/" in alt for alt in alternatives))

    def matches(self, relative_path: str) -> bool:
        """Whether the path (relative to the search root) matches."""
        return self.regex.fullmatch(relative_path) is not None

    def matches_file(self, relative_path: str) -> bool:
        """ripgrep's ``--glob`` rule: a pattern without ``/`` matches the file name alone."""
        if self.has_slash:
            return self.matches(relative_path)
        return self.matches(relative_path.rsplit("/", 1)[-1])


def split_literal_prefix(pattern: str) -> tuple[str, str]:
    """Split off the leading directories that contain no glob characters.

    ``src/app/**/*.ts`` -> ``("src/app", "**/*.ts")``; walking can then start
    at ``src/app``. The last component always stays in the pattern.
    """
    components = pattern.split("/")
    literal: list[str] = []
    for component in components[:-1]:
        if any(char in _GLOB_CHARS for char in component):
            break
        literal.append(component)
    rest = components[len(literal) :]
    prefix = "/".join(literal)
    if pattern.startswith("/") and not prefix:
        prefix = "/"
    return prefix, "/".join(rest)


def walk_files(root: Path, max_depth: int | None = None) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Regular files under ``root`` as ``(path relative to root with /, dir entry)``.

    Symlinks to files count as files. Skips :data:`SKIPPED_DIR_NAMES` below the root and unreadable
    directories; does not follow directory symlinks (no cycles).
    ``max_depth`` 0 means only files directly in ``root``.
    """
    stack: list[tuple[str, str, int]] = [(str(root), "", 0)]
    while stack:
        directory, relative, depth = stack.pop()
        try:
            with os.scandir(directory) as entries:
                children = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            continue
        subdirectories: list[tuple[str, str, int]] = []
        for entry in children:
            entry_relative = f"{relative}{entry.name}"
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = not is_dir and entry.is_file()
            except OSError:
                continue
            if is_file:
                yield entry_relative, entry
            elif (
                is_dir
                and entry.name not in SKIPPED_DIR_NAMES
                and (max_depth is None or depth < max_depth)
            ):
                subdirectories.append((entry.path, entry_relative + "/", depth + 1))
        # Reversed so the stack pops them in name order.
        stack.extend(reversed(subdirectories))
