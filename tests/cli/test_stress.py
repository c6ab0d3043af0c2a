"""`subvisor stress`: nothing lost, nothing duplicated, every fault named, caps shown (issue 6)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from supervisor.cli import main
from supervisor.cli._stress import (
    StressOptions,
    StressProgress,
    parse_latency,
    progress_bar,
    run_stress,
)
from tests.support.cli import run_cli

FAULT_REASONS = {
    "killed by signal SIGSEGV (segmentation fault)",
    "exited with code 1",
    "memory cap exceeded",
    "idle watchdog",
}


def test_stress_with_every_fault_loses_nothing() -> None:
    result = run_stress(
        StressOptions(
            agents=40,
            concurrency=10,
            background_ratio=0.5,
            fault_rate=0.3,
            idle_timeout_s=1.0,
            seed=7,
        )
    )
    report = result.summary
    assert report["lost"] == 0 and report["duplicates"] == 0
    assert report["completed"] + report["failed"] == 40
    assert report["failed"] == report["faults_planned"] > 0
    assert report["notifications"] == report["background"]
    assert 0 <= report["notification_p50_ms"] <= report["notification_p99_ms"]
    assert report["peak_concurrent_workers"] <= 10
    assert set(report["failed_by_reason"]) <= FAULT_REASONS
    assert report["refused"] == 0


def test_stress_records_each_agents_timeline() -> None:
    """Per-agent timings feed --report: one per planned agent, in causal order."""
    result = run_stress(
        StressOptions(agents=16, concurrency=4, fault_rate=0.4, idle_timeout_s=1.0, seed=3)
    )
    timings = result.timings
    assert sorted(t.name for t in timings) == sorted(f"agent {i}" for i in range(16))
    assert sum(t.status == "completed" for t in timings) == result.summary["completed"]
    for t in timings:
        assert t.task_id is not None and t.ended_s is not None
        assert t.worker_started_s is not None and t.worker_exited_s is not None
        assert t.ready_s is not None
        assert 0 <= t.requested_s <= t.ready_s <= t.ended_s
        assert t.worker_started_s <= t.ready_s <= t.worker_exited_s
        assert (t.reason is None) == (t.status == "completed")
        assert (t.fault is None) == (t.status == "completed")
        # Exactly the background agents were notified, after they ended.
        assert (t.notified_s is not None) == t.background
        assert t.notified_s is None or t.notified_s >= t.ended_s


def test_stress_hangs_are_all_killed_by_the_idle_watchdog(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 6 acceptance, small: `stress --faults hang`: every agent hangs (naming
    faults without --fault-rate gives each agent one), and every hang is killed by
    the watchdog and reported."""
    argv = ["stress", "--agents", "8", "--concurrency", "8", "--faults", "hang"]
    assert main([*argv, "--idle-timeout", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lost"] == 0 and report["duplicates"] == 0
    assert report["failed_by_reason"] == {"idle watchdog": 8}
    assert report["faults_planned"] == 8


def test_stress_shows_the_fan_out_caps_working() -> None:
    """max_concurrent_subagents bounds live workers; launches past
    max_subagents_per_session fail with the cap's clear error, and are not lost."""
    result = run_stress(
        StressOptions(agents=14, concurrency=3, max_subagents_per_session=10, seed=2)
    )
    report = result.summary
    assert report["max_concurrent_subagents"] == 3
    assert 1 <= report["peak_concurrent_workers"] <= 3
    assert report["lost"] == 0 and report["duplicates"] == 0
    assert report["completed"] == 10 and report["refused"] == 4
    assert report["failed_by_reason"] == {"refused: max_subagents_per_session": 4}
    assert "max_subagents_per_session" in report["refused_error"]
    assert "raise the cap" in report["refused_error"]
    refused = [t for t in result.timings if t.status == "refused"]
    assert len(refused) == 4 and all(t.task_id is None for t in refused)


def test_stress_reports_progress_until_every_launch_ended() -> None:
    seen: list[StressProgress] = []
    run_stress(StressOptions(agents=6, concurrency=2, seed=4), seen.append)
    last = seen[-1]
    assert (last.total, last.launched, last.completed + last.failed) == (6, 6, 6)
    assert all(p.live_workers <= 2 for p in seen)


def test_progress_bar_shows_launched_workers_and_outcomes() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with progress_bar(console) as update:
        update(StressProgress(total=10, launched=7, live_workers=3, completed=4, failed=1))
    text = out.getvalue()
    assert "5/10" in text
    assert "launched 7" in text and "workers 3" in text
    assert "completed 4" in text and "failed 1" in text


@pytest.mark.parametrize(
    ("spec", "expected"), [("10", (10.0, 10.0)), ("5-50", (5.0, 50.0)), (" 0-0 ", (0.0, 0.0))]
)
def test_latency_distribution_is_n_or_low_high(spec: str, expected: tuple[float, float]) -> None:
    assert parse_latency(spec) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--latency-ms", "fast"], "--latency-ms must be N or LOW-HIGH"),
        (["--latency-ms", "50-5"], "LOW <= HIGH"),
        (["--faults", "segfault,boom"], "unknown fault(s) boom"),
        (["--agents", "0"], "--agents must be at least 1"),
        (["--fault-rate", "1.5"], "--fault-rate must be within 0..1"),
        (["--max-subagents-per-session", "0"], "--max-subagents-per-session must be at least 1"),
        (["--report", "out.pdf"], "must end in .html"),
        (["--report", "/no/such/dir/r.png"], "no directory /no/such/dir"),
    ],
)
def test_stress_refuses_bad_options_before_running(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stress", "--agents", "2", *argv]) == 2
    captured = capsys.readouterr()
    assert message in " ".join(captured.err.split())
    assert captured.out == ""


def test_stress_command_reports_json(tmp_path: Path) -> None:
    run = run_cli(
        tmp_path / "home",
        *("stress", "--agents", "12", "--max-concurrent-subagents", "4"),
        *("--fault-rate", "0.25", "--faults", "segfault,exit", "--latency-ms", "1-5", "--json"),
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)  # no progress bar mixed in
    assert report["agents"] == 12 and report["lost"] == 0
    assert report["max_concurrent_subagents"] == 4 >= report["peak_concurrent_workers"]


def test_stress_without_json_prints_tables_in_words(tmp_path: Path) -> None:
    """Without --json the summary is a table like ps's, with failures by reason in a table
    of their own: no Python reprs (dicts, None) reach the user."""
    run = run_cli(
        tmp_path / "home",
        *("stress", "--agents", "6", "--concurrency", "3", "--faults", "exit"),
        *("--max-subagents-per-session", "5", "--latency-ms", "1"),
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "stress: 6 subagents" in out
    assert re.search(r"│ lost\s+│\s+0 │", out) and re.search(r"│ duplicates\s+│\s+0 │", out)
    assert re.search(r"│ failed\s+│\s+6 │ 6 faults planned, 1 refused", out)
    assert "failed, by reason" in out
    assert re.search(r"│ exited with code 1\s+│\s+5 │", out)
    assert re.search(r"│ refused: max_subagents_per_session\s+│\s+1 │", out)
    assert "{" not in out and "None" not in out
