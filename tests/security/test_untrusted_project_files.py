"""S-SEC-3: what a repository (or a subagent that wrote into it) ships cannot stall every
command.

Each attack is a project as a repository would ship it, run with the real ``subvisor`` CLI
(red team E: F2, F6).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli_env, run_cli
from tests.support.delegation import home_for

_PLAIN = "agents:\n  root:\n    - text: the user's own model answered\n"


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    return line


def _project(tmp_path: Path) -> tuple[Path, Path]:
    """A git project and its subvisor home, whose config.toml picks the user's model."""
    home, project = home_for(tmp_path), tmp_path / "project"
    home.mkdir()
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (tmp_path / "plain.yaml").write_text(_PLAIN)
    (home / "config.toml").write_text(f"model = {json.dumps(f'scripted:{tmp_path}/plain.yaml')}\n")
    return home, project


def test_s_sec_3_nested_profile_dirs_a_subagent_made_are_walked_only_so_deep(
    tmp_path: Path,
) -> None:
    """S-SEC-3 (red team E F2): 1100 nested directories under `.claude/agents` (what a
    workspace-write subagent can mkdir) made every later `agents` and `run` die with a
    RecursionError. Now both work: a profile 2 levels down loads, one 40 levels down does
    not, and `agents --json` says so in one ignored entry."""
    home, project = _project(tmp_path)
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    deepest = str(agents)
    for _ in range(1100):  # one level at a time: makedirs recurses once per level
        deepest += "/a"
        os.mkdir(deepest)
    shallow, deep = agents / "a" / "a" / "ok.md", agents.joinpath(*["a"] * 40) / "deep.md"
    for path in (shallow, deep):
        path.write_text(f"---\nname: {path.stem}\ndescription: d\n---\nGo.\n")
    try:
        listed = run_cli(home, "agents", "--json", cwd=project)
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)
        names = {profile["name"] for profile in data["profiles"]}
        assert "ok" in names and "deep" not in names
        (ignored,) = data["ignored"]
        assert "more than 32 directories deep" in ignored["reason"]
        run = run_cli(home, "run", "go", cwd=project)
        assert run.returncode == 0, run.stderr
        assert "the user's own model answered" in run.stdout
    finally:
        deep.unlink()
        shallow.unlink()
        # Bottom up, without recursion (shutil.rmtree recurses once per level).
        while deepest != str(agents):
            os.rmdir(deepest)
            deepest = os.path.dirname(deepest)


#: Runs ``subvisor ARGS`` as ``python -m supervisor.cli`` does, then writes the
#: process's ``/proc/self/io`` (its ``rchar``: bytes it read) to the file ``argv[1]``.
_COUNTING_READS = """\
import atexit, runpy, sys
report = sys.argv.pop(1)
atexit.register(lambda: open(report, "w").write(open("/proc/self/io").read()))
sys.argv[0] = "subvisor"
runpy.run_module("supervisor.cli", run_name="__main__", alter_sys=True)
"""
_MIB = 1 << 20
#: Each named file: under the 64 MiB that one file may be hashed whole.
_FILE = 60 * _MIB


def _bytes_read(home: Path, project: Path, *args: str) -> tuple[int, str]:
    """What ``subvisor ARGS`` read in all, and its stderr."""
    report = project.parent / "io.txt"
    done = subprocess.run(
        [sys.executable, "-c", _COUNTING_READS, str(report), *args],
        cwd=project,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    counts = dict(line.split(": ") for line in report.read_text().splitlines())
    return int(counts["rchar"]), done.stderr


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/PID/io")
def test_s_sec_3_many_large_files_named_in_mcp_json_are_read_once_in_a_budget(
    tmp_path: Path,
) -> None:
    """S-SEC-3 (red team E F6): an untrusted `.mcp.json` naming four sparse 60 MiB files
    (and four more names of one of them) made every `agents`, `run` and `trust` read and
    hash each name whole before asking anything (480 MiB). Counted in bytes read by the
    real CLI: `agents` (starts nothing, leaves the file out) reads none of them; `run`
    hashes 64 MiB at most, so one file, the rest counting by size and ctime; and a rewrite
    of a file past the budget still makes the trusted file ask again."""
    home, project = _project(tmp_path)
    names = []
    for i in range(4):
        with (project / f"f{i}").open("wb") as file:
            file.truncate(_FILE)
        names.append(f"f{i}")
    for i in range(4):
        os.link(project / "f0", project / f"same{i}")
        names.append(f"same{i}")
    mcp_json = project / ".mcp.json"
    mcp_json.write_text(json.dumps({"mcpServers": {"s": {"command": "true", "args": names}}}))

    read, stderr = _bytes_read(home, project, "agents")
    assert read < _FILE, (read, stderr)
    read, stderr = _bytes_read(home, project, "run", "go")
    assert f"{mcp_json} is not trusted" in stderr
    assert _FILE <= read < 2 * _FILE, read

    assert run_cli(home, "trust", cwd=project).returncode == 0
    with (project / "f3").open("r+b") as file:
        file.seek(_FILE // 2)
        file.write(b"rewritten")
    line = _one_line(run_cli(home, "run", "go", cwd=project))
    assert f"{mcp_json} changed since you trusted it" in line
