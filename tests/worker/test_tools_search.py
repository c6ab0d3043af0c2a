"""Glob, Grep and LS on real trees (S-LOCAL-1 parameters, S-LOCAL-2 errors)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.tools import ToolContext, ToolOutput, run_tool
from worker.tools._glob import MAX_GLOB_RESULTS
from worker.tools._grep import MAX_GREP_LINES
from worker.tools._pathmatch import (
    GlobMatcher,
    expand_braces,
    glob_to_regex,
    split_literal_prefix,
)


async def call(name: str, cwd: Path, **raw: Any) -> ToolOutput:
    return await run_tool(name, raw, ToolContext(cwd=cwd, max_output_bytes=100_000))


def make_tree(root: Path, files: dict[str, str | bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def set_mtime(path: Path, seconds: int) -> None:
    os.utime(path, (seconds, seconds))


# --- glob patterns --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("*.py", "x/a.py", False),
        ("src/**/*.ts", "src/a.ts", True),
        ("src/**/*.ts", "src/deep/er/a.ts", True),
        ("src/**/*.ts", "lib/a.ts", False),
        ("a?.txt", "ab.txt", True),
        ("a?.txt", "a/.txt", False),
        ("[!x]*.md", "readme.md", True),
        ("[!x]*.md", "xray.md", False),
        ("docs/**", "docs/a/b.md", True),
        ("file[.txt", "file[.txt", True),
    ],
)
def test_glob_to_regex(pattern: str, path: str, matches: bool) -> None:
    """S-LOCAL-1: Glob supports **, *, ? and character classes."""
    assert (re.fullmatch(glob_to_regex(pattern), path) is not None) is matches


def test_braces_expand_nested_and_leave_literals() -> None:
    assert expand_braces("*.{ts,tsx}") == ["*.ts", "*.tsx"]
    assert expand_braces("{a,b{1,2}}.c") == ["a.c", "b1.c", "b2.c"]
    assert expand_braces("{solo}.c") == ["{solo}.c"]
    assert expand_braces("{open.c") == ["{open.c"]


def test_split_literal_prefix() -> None:
    assert split_literal_prefix("src/app/**/*.ts") == ("src/app", "**/*.ts")
    assert split_literal_prefix("/abs/dir/*.py") == ("/abs/dir", "*.py")
    assert split_literal_prefix("*.py") == ("", "*.py")
    assert split_literal_prefix("a/b.py") == ("a", "b.py")


@given(name=st.text(alphabet=st.characters(exclude_characters="*?[{/\x00"), min_size=1))
def test_a_pattern_without_wildcards_matches_only_itself(name: str) -> None:
    matcher = GlobMatcher.compile(name)
    assert matcher.matches(name)
    assert not matcher.matches(name + "x")
    assert not matcher.matches("x/" + name)


# --- Glob -----------------------------------------------------------------------------------


async def test_glob_recursive_sorted_newest_first(tmp_path: Path) -> None:
    """S-LOCAL-1: Glob(pattern) with **, results newest first."""
    make_tree(tmp_path, {"old.py": "", "pkg/mid.py": "", "pkg/deep/new.py": "", "x.txt": ""})
    set_mtime(tmp_path / "old.py", 1_000)
    set_mtime(tmp_path / "pkg/mid.py", 2_000)
    set_mtime(tmp_path / "pkg/deep/new.py", 3_000)
    out = await call("Glob", tmp_path, pattern="**/*.py")
    assert out.text.splitlines() == [
        str(tmp_path / "pkg/deep/new.py"),
        str(tmp_path / "pkg/mid.py"),
        str(tmp_path / "old.py"),
    ]


async def test_glob_single_star_stays_in_one_directory(tmp_path: Path) -> None:
    make_tree(tmp_path, {"top.py": "", "sub/inner.py": ""})
    out = await call("Glob", tmp_path, pattern="*.py")
    assert out.text == str(tmp_path / "top.py")


async def test_glob_path_braces_and_prefix(tmp_path: Path) -> None:
    """S-LOCAL-1: Glob(pattern, path)."""
    make_tree(tmp_path, {"web/src/a.ts": "", "web/src/b.tsx": "", "web/src/c.js": "", "a.ts": ""})
    out = await call("Glob", tmp_path, pattern="src/**/*.{ts,tsx}", path="web")
    assert sorted(out.text.splitlines()) == [
        str(tmp_path / "web/src/a.ts"),
        str(tmp_path / "web/src/b.tsx"),
    ]


async def test_glob_skips_vcs_and_dependency_dirs(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {".git/x.py": "", "node_modules/m/i.py": "", ".venv/lib/v.py": "", "real.py": ""},
    )
    out = await call("Glob", tmp_path, pattern="**/*.py")
    assert out.text == str(tmp_path / "real.py")


async def test_glob_caps_results_and_says_so(tmp_path: Path) -> None:
    """S-LOCAL-1: results are capped, with a note."""
    for n in range(MAX_GLOB_RESULTS + 20):
        (tmp_path / f"f{n:03}.log").write_text("")
        set_mtime(tmp_path / f"f{n:03}.log", 10_000 + n)
    out = await call("Glob", tmp_path, pattern="*.log")
    lines = out.text.splitlines()
    assert len(lines) == MAX_GLOB_RESULTS + 1
    assert lines[0] == str(tmp_path / f"f{MAX_GLOB_RESULTS + 19:03}.log")
    assert f"of {MAX_GLOB_RESULTS + 20} matches" in lines[-1]


async def test_glob_no_match_and_bad_path(tmp_path: Path) -> None:
    """S-LOCAL-2: an empty result is not an error; a missing directory is."""
    empty = await call("Glob", tmp_path, pattern="*.nothing")
    assert not empty.is_error and empty.text == "No files found"
    missing = await call("Glob", tmp_path, pattern="*", path="absent")
    assert missing.is_error and "does not exist" in missing.text


# --- Grep -----------------------------------------------------------------------------------


@pytest.fixture
def code_tree(tmp_path: Path) -> Path:
    make_tree(
        tmp_path,
        {
            "a.py": "import os\ndef main():\n    return TODO\n",
            "b.py": "todo: nothing\n",
            "notes.md": "TODO write docs\nTODO more\n",
            "image.png": b"\x89PNG\x00\x00TODO",
            "latin1.txt": b"TODO caf\xe9\n",
            ".git/HEAD": "TODO",
            "node_modules/dep/index.js": "TODO",
            ".venv/site.py": "TODO",
        },
    )
    set_mtime(tmp_path / "a.py", 1_000)
    set_mtime(tmp_path / "notes.md", 2_000)
    set_mtime(tmp_path / "b.py", 3_000)
    return tmp_path


async def test_grep_files_with_matches_is_the_default(code_tree: Path) -> None:
    """S-LOCAL-1: Grep(pattern); binary files and .git/node_modules/.venv are skipped."""
    out = await call("Grep", code_tree, pattern="TODO")
    assert not out.is_error
    assert out.text.splitlines() == [
        "Found 2 files",
        str(code_tree / "notes.md"),
        str(code_tree / "a.py"),
    ]


async def test_grep_case_insensitive_flag(code_tree: Path) -> None:
    """S-LOCAL-1: "-i" ignores case (newest first)."""
    out = await call("Grep", code_tree, pattern="todo", **{"-i": True})
    assert out.text.splitlines()[1:] == [
        str(code_tree / "b.py"),
        str(code_tree / "notes.md"),
        str(code_tree / "a.py"),
    ]


async def test_grep_content_mode_with_and_without_line_numbers(code_tree: Path) -> None:
    """S-LOCAL-1: output_mode content, "-n"."""
    numbered = await call("Grep", code_tree, pattern=r"TODO\b", output_mode="content")
    assert numbered.text.splitlines() == [
        f"{code_tree / 'a.py'}:3:    return TODO",
        f"{code_tree / 'notes.md'}:1:TODO write docs",
        f"{code_tree / 'notes.md'}:2:TODO more",
    ]
    plain = await call("Grep", code_tree, pattern="def", output_mode="content", **{"-n": False})
    assert plain.text == f"{code_tree / 'a.py'}:def main():"


async def test_grep_count_mode_and_glob_filter(code_tree: Path) -> None:
    """S-LOCAL-1: output_mode count, glob."""
    out = await call("Grep", code_tree, pattern="TODO", output_mode="count", glob="*.md")
    assert out.text.splitlines() == [
        "Found 2 matching lines in 1 files",
        f"{code_tree / 'notes.md'}:2",
    ]


async def test_grep_single_file_path(code_tree: Path) -> None:
    out = await call("Grep", code_tree, pattern="import", path="a.py", output_mode="content")
    assert out.text == f"{code_tree / 'a.py'}:1:import os"


async def test_grep_errors_are_results(code_tree: Path) -> None:
    """S-LOCAL-2: a bad regex or a missing path is readable; no match is not an error."""
    bad = await call("Grep", code_tree, pattern="(unclosed")
    assert bad.is_error and "invalid regular expression" in bad.text
    missing = await call("Grep", code_tree, pattern="x", path="nowhere")
    assert missing.is_error and "does not exist" in missing.text
    nothing = await call("Grep", code_tree, pattern="zebra")
    assert not nothing.is_error and nothing.text == "No matches found"


async def test_grep_caps_content_lines(tmp_path: Path) -> None:
    """S-LOCAL-1: results are capped, with a note."""
    (tmp_path / "many.txt").write_text("hit\n" * (MAX_GREP_LINES + 100))
    out = await call("Grep", tmp_path, pattern="hit", output_mode="content")
    lines = out.text.splitlines()
    assert len(lines) == MAX_GREP_LINES + 1
    assert lines[-2].endswith(f":{MAX_GREP_LINES}:hit")
    assert "Stopped after" in lines[-1]


# --- LS -------------------------------------------------------------------------------------


async def test_ls_lists_a_tree(tmp_path: Path) -> None:
    """S-LOCAL-1: LS(path); skipped directories are shown but not expanded."""
    make_tree(tmp_path, {"b.txt": "", "a/inner.txt": "", "node_modules/x/y.js": "", "c.log": ""})
    out = await call("LS", tmp_path, path=".", ignore=["*.log"])
    assert out.text.splitlines() == [
        f"- {tmp_path}/",
        "  - a/",
        "    - inner.txt",
        "  - b.txt",
        "  - node_modules/ (not expanded)",
    ]


async def test_ls_errors(tmp_path: Path) -> None:
    """S-LOCAL-2."""
    (tmp_path / "f").write_text("")
    missing = await call("LS", tmp_path, path="nope")
    assert missing.is_error and "does not exist" in missing.text
    not_dir = await call("LS", tmp_path, path="f")
    assert not_dir.is_error and "not a directory" in not_dir.text
