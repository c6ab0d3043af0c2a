"""A subagent that fills the disk holding subvisor's state: one line, and nothing shown running.

The disk is a 64 MB tmpfs in a private mount namespace (``unshare -m``), holding
both subvisor's home and the project, as one filesystem does on a laptop. A
workspace-write subagent fills it from Bash. The run cannot record its end: it
says so in one line each (no traceback), exits 2, and once space is freed the
next ``subvisor ps`` shows the run and its task interrupted, not running.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli_env

_SCENARIO = """\
agents:
  root:
    - tool_calls: [{name: Agent, input: {description: fill, prompt: fill,
                    subagent_type: general-purpose}}]
    - text: "root got {{tool_result}}"
  fill:
    - tool_calls: [{name: Bash, input: {command: "for i in $(seq 100); do
        head -c 1000000 /dev/zero > f$i || break; done"}}]
    - text: filled
"""

_SCRIPT = """
set -u
mount -t tmpfs -o size=64m tmpfs "$DISK"
mkdir "$DISK/home" "$DISK/project" "$DISK/user"
cp "$SCENARIO" "$DISK/s.yaml"
cd "$DISK/project"
export SUBVISOR_HOME="$DISK/home" HOME="$DISK/user"
"$PY" -m supervisor.cli run --model "scripted:$DISK/s.yaml" go 2> "$OUT/run.err"
echo $? > "$OUT/run.rc"
rm -f "$DISK"/project/f*
"$PY" -m supervisor.cli ps > "$OUT/ps.out" 2>&1
echo $? > "$OUT/ps.rc"
"""


@pytest.mark.machine_may_lack(
    "root and unshare, to mount a small disk in a private mount namespace",
    when=os.geteuid() != 0 or shutil.which("unshare") is None,
)
def test_a_disk_a_subagent_filled_ends_the_run_in_one_line_each(tmp_path: Path) -> None:
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(_SCENARIO)
    env = {
        **cli_env(tmp_path / "unused-home"),
        "DISK": str(disk),
        "OUT": str(out),
        "SCENARIO": str(scenario),
        "PY": sys.executable,
    }
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    errors = (out / "run.err").read_text()
    assert (out / "run.rc").read_text().strip() == "2", errors
    assert "Traceback" not in errors, errors
    last = errors.strip().splitlines()[-1]
    assert last.startswith(f"no space left on the disk that holds {disk / 'home'}"), errors
    assert "free space there and run again" in last
    listing = " ".join((out / "ps.out").read_text().split())
    assert (out / "ps.rc").read_text().strip() == "0", listing
    assert "interrupted" in listing and "running" not in listing, listing
