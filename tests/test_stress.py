"""`subvisor stress`: nothing lost, nothing duplicated, every fault named (S-OBS, issue 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from supervisor._stress import run_stress


def test_stress_with_every_fault_loses_nothing() -> None:
    report = run_stress(
        agents=40, concurrency=10, background_ratio=0.5, fault_rate=0.3, idle_timeout_s=1.0, seed=7
    )
    assert report["lost"] == 0 and report["duplicates"] == 0
    assert report["completed"] + report["failed"] == 40
    assert report["failed"] == report["faults_planned"] > 0
    assert report["notifications"] == report["background"]
    assert 0 <= report["notification_p50_ms"] <= report["notification_p99_ms"]
    assert report["peak_concurrent_workers"] <= 10
    assert set(report["failed_by_reason"]) <= {
        "killed by signal SIGSEGV (segmentation fault)",
        "exited with code 1",
        "memory cap exceeded",
        "idle watchdog",
    }


def test_stress_command_reports_json(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SUBVISOR_TREE"}
    env["SUBVISOR_HOME"] = str(tmp_path / "home")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "supervisor.cli",
            "stress",
            "--agents",
            "12",
            "--concurrency",
            "4",
            "--fault-rate",
            "0.25",
            "--faults",
            "segfault,exit",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["agents"] == 12 and report["lost"] == 0
