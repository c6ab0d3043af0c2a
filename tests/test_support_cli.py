"""The suite's own harness: a ``run_cli`` child forked warm answers as a cold start does.

``tests.support.cli`` forks most ``subvisor`` children from a warm interpreter
(``tests.support.cli_forkserver``); every CLI test relies on such a child being
what ``python -m supervisor.cli`` started cold would be.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import cli
from tests.support.delegation import READ_README, home_for, readme_project, write_scenario


def _both(
    monkeypatch: pytest.MonkeyPatch, home: Path, *args: str, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    warm = cli.run_cli(home, *args, cwd=cwd)
    with monkeypatch.context() as cold:
        cold.setenv(cli.COLD_ENV, "1")
        return warm, cli.run_cli(home, *args, cwd=cwd)


def test_a_warm_child_answers_as_a_cold_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same exit status, stdout and stderr: a run in a project (its directory, its
    home), and a command line argparse refuses (exit 2, usage on stderr)."""
    home, project = home_for(tmp_path), readme_project(tmp_path)
    # The answer quotes the project's README: the run really ran in that directory.
    turns = [{"tool_calls": [READ_README]}, {"text": "read: {{tool_result}}"}]
    model = write_scenario(tmp_path / "s.yaml", {"root": turns})
    warm_server = cli._warm_cli()
    assert warm_server is not None
    env = cli.cli_env(home)
    changed = sorted(
        k for k in env.keys() | warm_server.env.keys() if env.get(k) != warm_server.env.get(k)
    )
    # Only the per-call variables may differ (else an earlier test left some behind).
    assert warm_server.serves(env, project), changed

    warm, cold = _both(monkeypatch, home, "run", "--model", model, "go", cwd=project)
    assert warm.returncode == 0 and "# demo project" in warm.stdout, warm.stderr
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )

    warm, cold = _both(monkeypatch, home, "no-such-command")
    assert warm.returncode == 2 and "invalid choice: 'no-such-command'" in warm.stderr
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )
