"""The command line as a user runs it: real processes, a temporary SUBVISOR_HOME."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli, start_cli
from tests.support.delegation import agent_call, home_for, write_scenario


def _start_run(home: Path, project: Path, model: str, *flags: str) -> subprocess.Popen[str]:
    """A live `subvisor run` in the background, as a user would start one."""
    return start_cli(
        home,
        *("run", *flags, "--model", model, "go"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_running(home: Path, project: Path, count: int) -> list[str]:
    """Poll `subvisor ps` until ``count`` tasks run; their ids."""
    deadline = time.monotonic() + 60
    running: list[str] = []
    while len(running) < count and time.monotonic() < deadline:
        ps = run_cli(home, "ps", "--json", cwd=project)
        if ps.returncode == 0:
            tasks = json.loads(ps.stdout)["tasks"]
            running = [t["task_id"] for t in tasks if t["status"] == "running"]
        time.sleep(0.1)
    assert len(running) >= count, f"only {len(running)} of {count} tasks ever ran"
    return running


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "app.py").write_text("def main():\n    return 1\n\nclass Thing:\n    pass\n")
    (root / "README.md").write_text("# demo project\n")
    return root


def test_demo_runs_offline_and_reports_every_subagent(tmp_path: Path, project: Path) -> None:
    """`subvisor demo`: parallel Explore agents, a background notification, an isolated segfault."""
    home = home_for(tmp_path)
    demo = run_cli(home, "demo", cwd=project)
    assert demo.returncode == 0, demo.stderr
    out = demo.stdout
    assert "app.py" in out  # real Glob/Grep/LS results travelled back through the pipes
    assert '[notification] Agent "background inventory" completed' in out
    assert "killed by signal SIGSEGV" in out
    ps = run_cli(home, "ps", "--json", cwd=project)
    assert ps.returncode == 0, ps.stderr
    tasks = json.loads(ps.stdout)["tasks"]
    statuses = sorted(t["status"] for t in tasks)
    assert statuses == ["completed"] * 4 + ["failed"]
    explore = next(t for t in tasks if t["description"] == "find definitions")
    logs = run_cli(home, "logs", explore["task_id"][:14], cwd=project)
    assert logs.returncode == 0, logs.stderr
    assert "Find which files define functions or classes." in logs.stdout
    assert "app.py:2" in logs.stdout


def test_run_flags_set_the_fan_out_caps(tmp_path: Path, project: Path) -> None:
    """Fan-out caps come from config and from `run`/`demo` flags; a bad value names the flags."""
    home = home_for(tmp_path)
    capped = run_cli(home, "demo", "--json", "--max-subagents-per-session", "2", cwd=project)
    assert capped.returncode == 0, capped.stderr
    report = json.loads(capped.stdout)
    assert len(report["tasks"]) == 2
    assert "its max_subagents_per_session" in capped.stdout
    bad = run_cli(home, "demo", "--max-concurrent-subagents", "0", cwd=project)
    assert bad.returncode == 2
    assert "max_concurrent_subagents" in bad.stdout + bad.stderr
    assert "the command-line flags" in " ".join((bad.stdout + bad.stderr).split())


def test_run_json_reports_answer_usage_and_tasks(tmp_path: Path, project: Path) -> None:
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("peek", "look")]},
                {"text": "root says {{tool_result}}"},
            ],
            "peek": [
                {"tool_calls": [{"name": "Read", "input": {"file_path": "README.md"}}]},
                {"text": "it is {{tool_result}}"},
            ],
        },
    )
    run = run_cli(home_for(tmp_path), "run", "--json", "--model", model, "look around", cwd=project)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert "# demo project" in report["answer"]
    assert report["tasks"][0]["status"] == "completed"
    assert report["usage"]["subagents"]["model_calls"] == 2
    assert report["usage"]["total_tokens"] > 0


def test_run_without_a_model_says_how_to_choose_one(tmp_path: Path, project: Path) -> None:
    run = run_cli(home_for(tmp_path), "run", "hello", cwd=project)
    assert run.returncode == 2
    assert "no model configured" in run.stderr and "--model" in run.stderr


def test_run_with_an_unknown_provider_is_a_clear_error(tmp_path: Path, project: Path) -> None:
    run = run_cli(home_for(tmp_path), "run", "--model", "nosuch:model", "hello", cwd=project)
    assert run.returncode == 1
    assert "nosuch" in run.stderr and "openai" in run.stderr


def test_stop_reaches_the_running_session(tmp_path: Path, project: Path) -> None:
    """`subvisor stop ID` stops a background agent of a live `subvisor run`."""
    home = home_for(tmp_path)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("slow", "wait", run_in_background=True)]},
                {"text": "waiting"},
                {"text": "the slow one ended"},
            ],
            "slow": [{"text": "never", "latency_ms": 60000}],
        },
    )
    runner = _start_run(home, project, model, "--json")
    try:
        [task_id] = _wait_for_running(home, project, 1)
        stop = run_cli(home, "stop", task_id, cwd=project)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        out, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0, err
    report = json.loads(out)
    assert report["tasks"][0]["status"] == "killed"
    assert report["answer"] == "the slow one ended"


def test_doctor_passes_here(tmp_path: Path) -> None:
    doctor = run_cli(home_for(tmp_path), "doctor", cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "all checks passed" in doctor.stdout


def test_agents_lists_profiles_and_their_errors(tmp_path: Path, project: Path) -> None:
    """`subvisor agents --json`: every profile with source, scope and errors (S-PROF-3)."""
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text("---\nname: reviewer\ndescription: Reviews\n---\nReview.\n")
    (agents / "broken.md").write_text("---\nname: broken\ndescription: [oops\n---\nx\n")
    listing = run_cli(home_for(tmp_path), "agents", "--json", cwd=project)
    assert listing.returncode == 1  # one profile is broken
    entries = {e["name"]: e for e in json.loads(listing.stdout)["profiles"]}
    assert entries["reviewer"]["scope"] == "project" and entries["reviewer"]["launchable"]
    assert entries["broken"]["error"]["line"] == 3
    assert {"general-purpose", "Explore"} <= set(entries)


def test_agents_help_documents_its_exit_status(tmp_path: Path) -> None:
    """`subvisor agents --help` says that a profile failing to load makes it exit 1."""
    shown = run_cli(home_for(tmp_path), "agents", "--help", cwd=tmp_path)
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    assert "Exit status: 0 when every profile loaded; 1 when any profile failed to load" in text


def test_ctrl_c_stops_every_subagent_as_killed(tmp_path: Path, project: Path) -> None:
    """S-RUN-8: Ctrl-C stops the background agents, recorded as killed, and nothing is left."""
    home = home_for(tmp_path)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call(f"slow {i}", "wait", run_in_background=True) for i in range(3)
                    ]
                },
                {"text": "waiting"},
            ],
            **{f"slow {i}": [{"text": "never", "latency_ms": 60000}] for i in range(3)},
        },
    )
    runner = _start_run(home, project, model)
    try:
        _wait_for_running(home, project, 3)
        runner.send_signal(signal.SIGINT)
        _, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 130, err
    assert "interrupted" in err
    tasks = json.loads(run_cli(home, "ps", "--json", cwd=project).stdout)["tasks"]
    assert sorted(t["status"] for t in tasks) == ["killed"] * 3


def test_run_timeout_stops_everything_as_killed(tmp_path: Path, project: Path) -> None:
    """S-RUN-8: a run timeout stops the subagents, reported as killed."""
    home = home_for(tmp_path)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("slow", "wait")]}, {"text": "never"}],
            "slow": [{"text": "never", "latency_ms": 60000}],
        },
    )
    run = run_cli(home, "run", "--json", "--timeout", "1", "--model", model, "go", cwd=project)
    assert run.returncode == 124, run.stderr
    report = json.loads(run.stdout)
    assert report["status"] == "timeout"
    [task] = report["tasks"]
    assert task["status"] == "killed" and "timed out" in task["error"]


def test_bg_moves_a_foreground_agent_of_a_live_run(tmp_path: Path, project: Path) -> None:
    """S-RUN-5: `subvisor bg ID` moves a running foreground agent; the run ends after its
    notification."""
    home = home_for(tmp_path)
    # The agent waits for this file, so it is still running when `bg` reaches
    # it however slow the machine is.
    gate = project / "gate"
    wait_for_gate = {
        "name": "Bash",
        "input": {"command": f"until [ -e {gate} ]; do sleep 0.05; done"},
    }
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("slow", "wait")]},
                {"text": "moved on: {{tool_result}}"},
                {"text": "notified"},
            ],
            "slow": [{"tool_calls": [wait_for_gate]}, {"text": "late answer"}],
        },
    )
    runner = _start_run(home, project, model, "--json")
    try:
        [task_id] = _wait_for_running(home, project, 1)
        moved = run_cli(home, "bg", task_id, cwd=project)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        gate.touch()
        out, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0, err
    report = json.loads(out)
    assert report["answer"] == "notified"
    assert report["tasks"][0]["background"] and report["tasks"][0]["status"] == "completed"
