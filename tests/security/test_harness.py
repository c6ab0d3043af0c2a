"""The attack harness runs real Bash in a real subagent worker (the control of tests/security)."""

from __future__ import annotations

from pathlib import Path

from tests.support.attack import bash_attack


async def test_the_harness_runs_bash_in_a_subagent_worker(tmp_path: Path) -> None:
    """Control: the harness's commands really run, in a process that is not the test's."""
    import os

    attack = await bash_attack(tmp_path, ["echo hello-$((6*7))", "echo $$"])
    assert "hello-42" in attack.output(0)
    assert str(os.getpid()) not in attack.output(1).split()
    assert attack.record.status == "completed"
