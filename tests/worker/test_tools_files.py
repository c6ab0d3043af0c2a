"""Read, Write and Edit on real files (S-LOCAL-1 parameters, S-LOCAL-2 errors)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from worker.tools import ToolContext, ToolOutput, run_tool
from worker.tools._edit import apply_edit
from worker.tools._errors import ToolError, describe_os_error


async def call(name: str, cwd: Path, max_output_bytes: int = 30_000, **raw: Any) -> ToolOutput:
    return await run_tool(name, raw, ToolContext(cwd=cwd, max_output_bytes=max_output_bytes))


# --- Read ---------------------------------------------------------------------------------


async def test_read_numbers_lines_like_cat_n(tmp_path: Path) -> None:
    """S-LOCAL-1: Read(file_path) gives `cat -n` output."""
    (tmp_path / "a.txt").write_text("first\nsecond\r\nthird")
    out = await call("Read", tmp_path, file_path=str(tmp_path / "a.txt"))
    assert not out.is_error
    assert out.text == "     1\tfirst\n     2\tsecond\n     3\tthird"


async def test_read_offset_is_a_one_based_line_number_and_limit_counts_lines(
    tmp_path: Path,
) -> None:
    """S-LOCAL-1: offset/limit select lines; a note says how to continue."""
    (tmp_path / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    out = await call("Read", tmp_path, file_path="a.txt", offset=3, limit=2)
    assert out.text.splitlines()[:2] == ["     3\tline 3", "     4\tline 4"]
    assert "Showing lines 3-4 of 10" in out.text
    assert "offset=5" in out.text


async def test_read_default_limit_is_2000_lines(tmp_path: Path) -> None:
    """S-LOCAL-1: without limit, at most 2000 lines."""
    (tmp_path / "big.txt").write_text("".join(f"{n}\n" for n in range(1, 2_501)))
    out = await call("Read", tmp_path, max_output_bytes=100_000, file_path="big.txt")
    numbered = [line for line in out.text.splitlines() if "\t" in line]
    assert len(numbered) == 2_000
    assert numbered[-1] == "  2000\t2000"
    assert "of 2500" in out.text and "offset=2001" in out.text


async def test_read_cuts_long_lines_and_keeps_counting(tmp_path: Path) -> None:
    """S-LOCAL-1: long lines are cut; a huge line does not shift the numbering."""
    (tmp_path / "long.txt").write_text("x" * 5_000 + "\n" + "é" * 100_000 + "\nlast\n")
    out = await call("Read", tmp_path, max_output_bytes=100_000, file_path="long.txt")
    lines = out.text.splitlines()
    assert lines[0].startswith("     1\t" + "x" * 2_000 + " [... line cut at 2000")
    assert "x" * 2_001 not in lines[0]
    assert lines[1].startswith("     2\t" + "é" * 2_000 + " [... line cut")
    assert lines[2] == "     3\tlast"


async def test_read_stays_under_the_byte_cap_and_says_where_to_go_on(tmp_path: Path) -> None:
    """S-LOCAL-2: a long read is cut at a line, with the offset to continue from."""
    (tmp_path / "wide.txt").write_text("".join(f"{n:05} " + "y" * 90 + "\n" for n in range(500)))
    out = await call("Read", tmp_path, max_output_bytes=2_000, file_path="wide.txt")
    assert len(out.text.encode()) <= 2_000
    shown = [line for line in out.text.splitlines() if "\t" in line]
    assert shown
    assert f"offset={len(shown) + 1}" in out.text
    assert "of 500" in out.text


async def test_read_empty_file_and_offset_past_end(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "short.txt").write_text("one\ntwo\n")
    empty = await call("Read", tmp_path, file_path="empty.txt")
    assert not empty.is_error and "empty" in empty.text
    past = await call("Read", tmp_path, file_path="short.txt", offset=5)
    assert past.is_error
    assert "offset 5" in past.text and "2 lines" in past.text


async def test_read_missing_file_is_an_error_result(tmp_path: Path) -> None:
    """S-LOCAL-2: file not found is a readable result, not an exception."""
    out = await call("Read", tmp_path, file_path="nope.txt")
    assert out.is_error
    assert "No such file" in out.text and str(tmp_path / "nope.txt") in out.text


async def test_read_directory_is_an_error_result(tmp_path: Path) -> None:
    """S-LOCAL-2: a directory points the model at LS/Glob."""
    out = await call("Read", tmp_path, file_path=str(tmp_path))
    assert out.is_error
    assert "directory" in out.text and "LS" in out.text


@pytest.mark.parametrize("content", [b"PK\x03\x04\x00\x00binary", b"caf\xe9 latin-1\n"])
async def test_read_binary_or_non_utf8_file_says_binary(tmp_path: Path, content: bytes) -> None:
    """S-LOCAL-2: NUL bytes or invalid UTF-8 are reported as a binary file."""
    (tmp_path / "blob").write_bytes(content)
    out = await call("Read", tmp_path, file_path="blob")
    assert out.is_error
    assert "binary" in out.text


async def test_read_fifo_is_refused_instead_of_blocking(tmp_path: Path) -> None:
    """S-LOCAL-2: a named pipe would block a reader forever; it is refused."""
    os.mkfifo(tmp_path / "pipe")
    out = await call("Read", tmp_path, file_path="pipe")
    assert out.is_error
    assert "not a regular file" in out.text


@pytest.mark.machine_may_lack("a file even root may not write (/sys/kernel/notes)")
async def test_permission_denied_is_an_error_result(tmp_path: Path) -> None:
    """S-LOCAL-2: permission denied is readable (root ignores modes, so it meets sysfs)."""
    if os.geteuid() == 0:
        target = Path("/sys/kernel/notes")
        if not await trio.Path(target).exists():
            pytest.skip("needs a file even root may not write")
    else:
        target = tmp_path / "secret.txt"
        target.write_text("x")
        target.chmod(0o444)
    out = await call("Write", tmp_path, file_path=str(target), content="x")
    assert out.is_error
    assert f"Permission denied: {target}" in out.text


def test_permission_errors_are_described_with_the_path() -> None:
    """S-LOCAL-2: the message names the problem and the file."""
    text = describe_os_error(PermissionError(13, "Permission denied", "/etc/shadow"))
    assert text == "Error: Permission denied: /etc/shadow"


# --- Write --------------------------------------------------------------------------------


async def test_write_creates_parents_and_overwrites(tmp_path: Path) -> None:
    """S-LOCAL-1: Write(file_path, content) creates or replaces the file."""
    created = await call("Write", tmp_path, file_path="new/dir/f.txt", content="héllo\n")
    assert not created.is_error and "created" in created.text
    target = tmp_path / "new" / "dir" / "f.txt"
    assert target.read_bytes() == "héllo\n".encode()
    replaced = await call("Write", tmp_path, file_path=str(target), content="bye")
    assert not replaced.is_error and "overwritten" in replaced.text
    assert target.read_text() == "bye"


async def test_write_keeps_file_mode(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("old")
    script.chmod(0o751)
    await call("Write", tmp_path, file_path="run.sh", content="new")
    assert script.stat().st_mode & 0o777 == 0o751


async def test_write_onto_a_directory_or_under_a_file_is_an_error(tmp_path: Path) -> None:
    """S-LOCAL-2: impossible writes come back as errors."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "plain").write_text("x")
    onto_dir = await call("Write", tmp_path, file_path="sub", content="x")
    assert onto_dir.is_error and "directory" in onto_dir.text.lower()
    under_file = await call("Write", tmp_path, file_path="plain/child.txt", content="x")
    assert under_file.is_error
    assert (tmp_path / "plain").read_text() == "x"


# --- Edit ---------------------------------------------------------------------------------


async def test_edit_replaces_a_unique_string_and_shows_a_snippet(tmp_path: Path) -> None:
    """S-LOCAL-1: Edit(file_path, old_string, new_string)."""
    path = tmp_path / "code.py"
    path.write_text("a = 1\nb = 2\nc = 3\n")
    out = await call("Edit", tmp_path, file_path="code.py", old_string="b = 2", new_string="b = 20")
    assert not out.is_error
    assert path.read_text() == "a = 1\nb = 20\nc = 3\n"
    assert "     2\tb = 20" in out.text


async def test_edit_errors_leave_the_file_alone(tmp_path: Path) -> None:
    """S-LOCAL-2: not found, ambiguous and no-op edits are errors; nothing is written."""
    path = tmp_path / "f.txt"
    path.write_text("x = 1\nx = 1\n")
    missing = await call("Edit", tmp_path, file_path="f.txt", old_string="y", new_string="z")
    assert missing.is_error and "not found" in missing.text
    twice = await call("Edit", tmp_path, file_path="f.txt", old_string="x = 1", new_string="x = 2")
    assert twice.is_error and "2 times" in twice.text and "replace_all" in twice.text
    same = await call("Edit", tmp_path, file_path="f.txt", old_string="x", new_string="x")
    assert same.is_error and "same" in same.text
    assert path.read_text() == "x = 1\nx = 1\n"


async def test_edit_replace_all(tmp_path: Path) -> None:
    """S-LOCAL-1: replace_all replaces every occurrence."""
    path = tmp_path / "f.txt"
    path.write_text("x = 1\nx = 1\n")
    out = await call(
        "Edit", tmp_path, file_path="f.txt", old_string="1", new_string="2", replace_all=True
    )
    assert not out.is_error and "2 replacements" in out.text
    assert path.read_text() == "x = 2\nx = 2\n"


async def test_edit_missing_or_binary_file_is_an_error(tmp_path: Path) -> None:
    """S-LOCAL-2."""
    (tmp_path / "bin").write_bytes(b"\x00\x01abc")
    missing = await call("Edit", tmp_path, file_path="gone.txt", old_string="a", new_string="b")
    assert missing.is_error and "No such file" in missing.text
    binary = await call("Edit", tmp_path, file_path="bin", old_string="abc", new_string="x")
    assert binary.is_error and "binary" in binary.text
    assert (tmp_path / "bin").read_bytes() == b"\x00\x01abc"


async def test_edit_with_empty_old_string_creates_a_missing_file(tmp_path: Path) -> None:
    """Claude Code's convention: empty old_string on a new path creates it."""
    out = await call("Edit", tmp_path, file_path="fresh.txt", old_string="", new_string="hi\n")
    assert not out.is_error
    assert (tmp_path / "fresh.txt").read_text() == "hi\n"
    refused = await call("Edit", tmp_path, file_path="fresh.txt", old_string="", new_string="x")
    assert refused.is_error
    assert (tmp_path / "fresh.txt").read_text() == "hi\n"


async def test_edit_preserves_crlf_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "win.txt"
    path.write_bytes("\ufeffone\r\ntwo\r\n".encode())
    await call("Edit", tmp_path, file_path="win.txt", old_string="two", new_string="deux")
    assert path.read_bytes() == "\ufeffone\r\ndeux\r\n".encode()


_pieces = st.text(alphabet=st.sampled_from("ab \n\té€"), max_size=30)


def _unique_in(text: str, part: str) -> bool:
    """``part`` starts at exactly one position of ``text`` (overlaps count)."""
    first = text.find(part)
    return first != -1 and text.find(part, first + 1) == -1


@given(before=_pieces, old=_pieces.filter(bool), after=_pieces, new=_pieces)
@example(before=" ", old="  ", after="", new="a")  # "  " starts twice in "   "
def test_apply_edit_replaces_exactly_the_unique_occurrence(
    before: str, old: str, after: str, new: str
) -> None:
    """S-LOCAL-1: a unique old_string is replaced and nothing else changes."""
    text = before + old + after
    if not _unique_in(text, old) or old == new:
        with pytest.raises(ToolError):
            apply_edit(text, old, new, replace_all=False)
        return
    result, count = apply_edit(text, old, new, replace_all=False)
    assert count == 1
    assert result == before + new + after


@settings(max_examples=40, deadline=None)
@given(text=_pieces, old=_pieces.filter(bool), new=_pieces)
def test_edit_round_trips_through_a_real_file(text: str, old: str, new: str) -> None:
    """S-LOCAL-1: Edit old->new then new->old restores the file when both are unique."""
    content = text + old
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "f.txt").write_bytes(content.encode())

        async def edit(old_string: str, new_string: str) -> ToolOutput:
            return await call(
                "Edit", cwd, file_path="f.txt", old_string=old_string, new_string=new_string
            )

        there = trio.run(edit, old, new)
        if not _unique_in(content, old) or old == new:
            assert there.is_error
            assert (cwd / "f.txt").read_bytes() == content.encode()
            return
        assert not there.is_error
        edited = content.replace(old, new)
        assert (cwd / "f.txt").read_bytes() == edited.encode()
        if new and _unique_in(edited, new):
            back = trio.run(edit, new, old)
            assert not back.is_error
            assert (cwd / "f.txt").read_bytes() == content.encode()
