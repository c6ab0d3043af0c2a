"""S-SEC-7 / S-POL-4: a supervisor started anywhere inside a worker tree refuses to run.

The marker is not the ``SUBVISOR_TREE`` variable: every attack here unsets it
first, so these tests would fail if the variable were the only marker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.attack import bash_attack

PY = sys.executable
REFUSAL = "inside a subvisor worker tree"


def _nested_run(tmp: str) -> str:
    """A nested `subvisor run` on the scripted model, its environment marker removed."""
    return (
        f"env -u SUBVISOR_TREE SUBVISOR_HOME={tmp}/nested-home {PY} -m supervisor.cli run "
        f"--model scripted:{tmp}/nested.yaml --json 'nested root' 2>&1; echo exit=$?"
    )


def _nested_scenario(tmp_path: Path) -> None:
    (tmp_path / "nested.yaml").write_text(
        "agents:\n  root:\n    - text: the nested supervisor ran\n"
    )


@pytest.mark.parametrize("mode", ["read-only", "workspace-write", "full"])
async def test_s_sec_7_nested_run_refuses_without_the_environment_marker(
    tmp_path: Path, mode: str
) -> None:
    """S-SEC-7: `env -u SUBVISOR_TREE subvisor run` in a subagent's Bash exits non-zero
    with the depth error, and its root model never runs."""
    _nested_scenario(tmp_path)
    attack = await bash_attack(
        tmp_path, [_nested_run(str(tmp_path))], subagent_type="general-purpose", mode=mode
    )
    out = attack.output()
    assert REFUSAL in out, out
    assert "the nested supervisor ran" not in out
    assert "exit=0" not in out


async def test_s_sec_7_a_detached_double_forked_run_also_refuses(tmp_path: Path) -> None:
    """S-SEC-7: `setsid` plus a double fork (reparented away from Bash) does not shed the
    marker: the detached nested run refuses too."""
    _nested_scenario(tmp_path)
    out_file = tmp_path / "project" / "detached.out"
    script = tmp_path / "project" / "nested.sh"
    script.parent.mkdir(exist_ok=True)
    script.write_text(_nested_run(str(tmp_path)) + "\n")
    detached = (
        f"setsid sh -c '( sh {script} > {out_file} 2>&1 & ) &' ; "
        f"for i in $(seq 100); do grep -q exit= {out_file} 2>/dev/null && break; sleep 0.1; done; "
        f"cat {out_file}"
    )
    attack = await bash_attack(
        tmp_path, [detached], subagent_type="general-purpose", mode="workspace-write"
    )
    out = attack.output()
    assert REFUSAL in out, out
    assert "the nested supervisor ran" not in out


def test_s_sec_7_control_the_same_command_outside_a_worker_runs(tmp_path: Path) -> None:
    """Control: the very command the attacks run works when no worker tree is around it."""
    import subprocess

    _nested_scenario(tmp_path)
    done = subprocess.run(
        ["bash", "-c", _nested_run(str(tmp_path))], capture_output=True, text=True, timeout=120
    )
    assert "the nested supervisor ran" in done.stdout, done.stdout
    assert "exit=0" in done.stdout
