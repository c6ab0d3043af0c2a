"""S-POL-2: a ``read`` deny on a file holds for every tool that reads it and every name it has.

A real subagent (scripted) under ``read: {"*": allow, "*/.env": deny}`` tries to
get ``.env``'s contents: by Grep or Glob on its path (their own rules match the
search pattern, and Claude Code's Read denies cover them), and by Read of a
link to it under another name. Each test asserts what the child got back.
These rules are a policy over an honest worker's tools; the sandbox, not
them, is what holds a lying one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from supervisor import RootSession
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

pytestmark = pytest.mark.trio

SECRET = "SECRET-1234"
#: What a search for ``API_KEY`` may find: the code that reads the key, not the key.
CODE_LINE = 'API_KEY = os.environ["API_KEY"]'
#: Everything allowed (so Grep and Glob need not even ask) but reading .env.
RULES = {"*": "allow", "read": {"*": "allow", "*/.env": "deny"}}


async def _child_gets(tmp_path: Path, call: dict[str, Any], rules: Any = RULES) -> str:
    """What a child's ``call`` returned to it, in a project with ``.env`` and links to it."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / ".env").write_text(f"API_KEY={SECRET}\n")
    (project / "src" / "ok.txt").write_text("nothing secret\n")
    (project / "src" / "a.py").write_text(f"{CODE_LINE}\n")
    os.symlink("../.env", project / "src" / "notes.txt")
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("look", "look")]}, {"text": "{{tool_result}}"}],
            "look": [{"tool_calls": [call]}, {"text": "got: {{tool_result}}"}],
        },
    )
    async with subvisor(home_for(tmp_path), permission=rules) as host:
        root = RootSession(host, model=model, cwd=project)
        return (await root.run("go")).text


@pytest.mark.parametrize(
    "call",
    [
        {"name": "Grep", "input": {"pattern": "API", "path": ".env", "output_mode": "content"}},
        {"name": "grep", "input": {"pattern": "API", "path": "src/notes.txt"}},
        {"name": "Read", "input": {"file_path": "src/notes.txt"}},
    ],
    ids=["grep-path", "grep-link", "read-link"],
)
async def test_s_pol_2_a_read_deny_covers_searches_and_links(tmp_path: Path, call: Any) -> None:
    """Grep on ``.env`` or on a link to it, Read of a link to it: the child gets a refusal
    naming the rule, not the secret (Grep is not even asked about without the read deny)."""
    out = await _child_gets(tmp_path, call)
    assert SECRET not in out, out
    assert "denied by the rule read '*/.env'" in out, out


async def test_s_pol_2_a_glob_under_a_denied_directory_is_refused(tmp_path: Path) -> None:
    """Glob is a read of the directory it lists: a deny on the directory holds for it."""
    rules = {"*": "allow", "read": {"*": "allow", "*/src": "deny"}}
    glob = {"name": "Glob", "input": {"pattern": "*.txt", "path": "src"}}
    out = await _child_gets(tmp_path, glob, rules)
    assert "ok.txt" not in out and "denied by the rule read '*/src'" in out, out


@pytest.mark.parametrize(
    "call",
    [
        {"name": "Grep", "input": {"pattern": "nothing", "output_mode": "content"}},
        {"name": "Read", "input": {"file_path": "src/ok.txt"}},
    ],
    ids=["grep-project", "read-file"],
)
async def test_s_pol_2_honest_reads_still_run(tmp_path: Path, call: Any) -> None:
    """Control: a search of the project and a Read of an ordinary file run."""
    out = await _child_gets(tmp_path, call)
    assert "nothing secret" in out and "denied" not in out, out


def _search(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "input": params}


@pytest.mark.parametrize(
    "call",
    [
        _search("Grep", pattern="API_KEY", path=".", output_mode="content"),
        _search("Grep", pattern="API_KEY", output_mode="content"),
        _search("grep", pattern="API_KEY", path="src", output_mode="content"),
        _search("Grep", pattern="API_KEY", glob="*", output_mode="content", **{"-i": True}),
    ],
    ids=["grep-dot", "grep-no-path", "grep-folder-with-link", "grep-glob"],
)
async def test_s_pol_2_a_search_of_a_folder_skips_read_denied_files(
    tmp_path: Path, call: Any
) -> None:
    """S-POL-2, S-SEC-1: Grep over the project (named ``.``, or no path at all) or over a
    folder holding a link to ``.env`` returns the code's matching line and never ``.env``'s
    secret: the files a read deny covers are skipped, as Claude Code's Read denies cover Grep."""
    out = await _child_gets(tmp_path, call)
    assert CODE_LINE in out, out
    assert SECRET not in out, out


@pytest.mark.parametrize("mode", ["files_with_matches", "count"])
async def test_s_pol_2_a_search_does_not_name_read_denied_files(tmp_path: Path, mode: str) -> None:
    """S-POL-2: listing matching files (or counting per file) does not tell the child that
    ``.env`` (or the link to it) holds the pattern; the code file is still listed."""
    secret = await _child_gets(
        tmp_path / "secret", _search("Grep", pattern="SECRET", output_mode=mode)
    )
    assert "No matches found" in secret and ".env" not in secret, secret
    out = await _child_gets(tmp_path / "key", _search("Grep", pattern="API_KEY", output_mode=mode))
    assert "a.py" in out and ".env" not in out and "notes.txt" not in out, out


async def test_s_pol_2_glob_does_not_list_read_denied_files(tmp_path: Path) -> None:
    """S-POL-2: Glob over the project lists the code, not ``.env`` nor the link to it."""
    out = await _child_gets(tmp_path, _search("Glob", pattern="**/*"))
    assert "a.py" in out and ".env" not in out and "notes.txt" not in out, out


async def test_s_pol_2_without_a_read_deny_a_search_finds_env(tmp_path: Path) -> None:
    """Control: with no read deny the same search returns ``.env``'s line."""
    call = _search("Grep", pattern="API_KEY", output_mode="content")
    out = await _child_gets(tmp_path, call, {"*": "allow"})
    assert SECRET in out and CODE_LINE in out, out
