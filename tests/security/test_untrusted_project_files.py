"""S-SEC-3: what a repository (or a subagent that wrote into it) ships cannot stall every
command.

Each attack is a project as a repository would ship it, run with the real ``subvisor`` CLI
(red team E: F2).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.cli import run_cli
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
