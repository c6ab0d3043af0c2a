"""S-SEC-6 Recovery: a dead supervisor's state is ended at the next start; signals stop gracefully.

Real processes throughout: a real `subvisor run` whose subagent's Bash runs a
long `sleep`, killed or signalled by the test, then the `subvisor` CLI (or a
store opened by another real process) reading what it left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from supervisor.kernel._planted_repos import CTIME_SLACK_S, DISARMED_SUFFIX
from supervisor.state._paths import database_path, run_dir
from supervisor.state._process_identity import ProcessIdentity, this_process
from supervisor.state._recovery import UNRECORDED_OWNER, recover_dead_runs
from supervisor.state._store import SessionStore
from supervisor.state._task_record import TaskRecord
from tests.support.cli import run_cli, start_cli
from tests.support.delegation import agent_call, home_for, write_scenario

#: The subagent's Bash command: long enough to outlast any test, and easy to find.
SLEEP = "sleep 3141"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def _start_run(
    tmp_path: Path, project: Path, *options: str, command: str = SLEEP
) -> subprocess.Popen[str]:
    """A real `subvisor run --json OPTIONS` whose one subagent runs ``command`` in its Bash
    (it must end in ``SLEEP``, which the tests wait for)."""
    model = write_scenario(
        tmp_path / "sleeper.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("sleeper", "sleep", subagent_type="general-purpose")]},
                {"text": "the sleeper came back"},
            ],
            "sleeper": [
                {"tool_calls": [{"name": "Bash", "input": {"command": command}}]},
                {"text": "slept"},
            ],
        },
    )
    return start_cli(
        home_for(tmp_path),
        *("run", "--json", *options, "--model", model, "go"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ps(tmp_path: Path, project: Path) -> dict[str, object]:
    ps = run_cli(home_for(tmp_path), "ps", "--json", cwd=project)
    assert ps.returncode == 0, ps.stderr
    report: dict[str, object] = json.loads(ps.stdout)
    return report


def _wait_for_the_sleep(tmp_path: Path, project: Path, runner: subprocess.Popen[str]) -> None:
    """Until `ps` shows the task running and the subagent's ``SLEEP`` runs under the supervisor."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert runner.poll() is None, runner.communicate()
        ps = run_cli(home_for(tmp_path), "ps", "--json", cwd=project)
        tasks = json.loads(ps.stdout)["tasks"] if ps.returncode == 0 else []
        if any(t["status"] == "running" for t in tasks) and any(
            SLEEP in _cmdline(p) for p in _descendants(runner.pid)
        ):
            return
        time.sleep(0.1)
    raise AssertionError("the subagent's sleep never started")


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE or not process.is_running()
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def leftovers() -> Iterator[list[psutil.Process]]:
    """Processes a test saw; whatever of them still runs at its end is killed."""
    seen: list[psutil.Process] = []
    yield seen
    for process in seen:
        try:
            # is_running() compares the start time too: never a reused pid.
            if process.is_running():
                process.kill()
        except psutil.Error:
            pass


def test_s_sec_6_after_sigkill_the_next_start_marks_session_and_task_interrupted(
    tmp_path: Path, project: Path, leftovers: list[psutil.Process]
) -> None:
    """S-SEC-6: SIGKILL a live `subvisor run`; the next `subvisor ps` shows its session and
    task `interrupted`, naming the dead supervisor's pid, and no file of it is left in run/."""
    runner = _start_run(tmp_path, project)
    try:
        _wait_for_the_sleep(tmp_path, project, runner)
        leftovers.extend(_descendants(runner.pid))
        live = _ps(tmp_path, project)
        assert live["live"] is True and live["status"] == "running"
        assert list(run_dir(home_for(tmp_path)).iterdir())  # its control socket
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
    finally:
        runner.kill()
        runner.communicate()

    report = _ps(tmp_path, project)
    reason = f"supervisor pid {runner.pid} is gone (killed or crashed)"
    assert report["live"] is False
    assert report["status"] == "interrupted"
    assert report["status_reason"] == reason
    [task] = report["tasks"]  # type: ignore[misc]
    assert task["status"] == "interrupted" and task["error"] == reason
    assert task["ended_at"] is not None
    # The task's own files say the same as the store.
    metadata = json.loads((Path(task["output_dir"]) / "metadata.json").read_text())
    assert metadata["status"] == "interrupted" and metadata["error"] == reason
    assert Path(task["output_file"]).read_text() == reason
    assert list(run_dir(home_for(tmp_path)).iterdir()) == []
    # The child session too, as every other reader sees it.
    with SessionStore(database_path(home_for(tmp_path))) as store:
        child = store.get_session(task["child_session_id"])
        assert child is not None and child.status == "interrupted"
    logs = run_cli(home_for(tmp_path), "logs", task["task_id"], cwd=project)
    assert logs.returncode == 0, logs.stderr
    assert "(interrupted)" in logs.stdout and reason in logs.stdout


def test_s_sec_3_and_6_what_a_subagent_planted_is_disarmed_after_its_supervisor_is_killed(
    tmp_path: Path, project: Path, leftovers: list[psutil.Process]
) -> None:
    """S-SEC-3 / S-SEC-6: a workspace-write subagent plants a repository with a hook and an
    fsmonitor, then sleeps; its `subvisor run` is killed by SIGKILL, so the walk that
    follows every worker never comes. The next `subvisor ps` disarms both (the originals
    kept aside) and the task's error says so; git there then runs neither."""
    marker = tmp_path / "PWNED"
    hook = f"printf '#!/bin/sh\\ntouch {marker}\\n' > .git/hooks/pre-commit"
    plant = (
        f"git init -q sub && cd sub && git config core.fsmonitor 'touch {marker}; false'"
        f" && {hook} && chmod +x .git/hooks/pre-commit && cd .. && {SLEEP}"
    )
    runner = _start_run(tmp_path, project, "--sandbox", "workspace-write", command=plant)
    sub = project / "sub"
    try:
        _wait_for_the_sleep(tmp_path, project, runner)
        assert (sub / ".git" / "hooks" / "pre-commit").exists()
        leftovers.extend(_descendants(runner.pid))
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=30)
    finally:
        runner.kill()
        runner.communicate()
    for process in leftovers:  # what the worker started dies with it (S-SEC-5)
        psutil.wait_procs([process], timeout=30)

    [task] = _ps(tmp_path, project)["tasks"]  # type: ignore[misc]
    assert task["status"] == "interrupted"
    assert "disarmed" in task["error"] and str(sub / ".git" / "config") in task["error"]
    assert (sub / ".git" / "hooks" / f"pre-commit{DISARMED_SUFFIX}").exists()
    assert "fsmonitor" in (sub / ".git" / f"config{DISARMED_SUFFIX}").read_text()
    (sub / "f").write_text("x\n")
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["status"],
        ["add", "f"],
        ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=sub, env=env, capture_output=True, check=False)
    assert not marker.exists()
    # Only the first reader after the death walks: a second `ps` finds it done.
    assert _ps(tmp_path, project)["tasks"][0]["error"] == task["error"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_s_sec_6_sigterm_and_ctrl_c_stop_the_run_gracefully(
    tmp_path: Path,
    project: Path,
    leftovers: list[psutil.Process],
    signum: signal.Signals,
    code: int,
) -> None:
    """S-SEC-6: SIGTERM (or the terminal hanging up) stops `subvisor run` exactly like
    Ctrl-C: every worker (and the subagent's sleep) is gone, the root session ends
    `interrupted`, the task `killed` (S-RUN-8) saying which signal, the JSON report is
    printed and the exit code is 128 + the signal; nothing is left in run/."""
    runner = _start_run(tmp_path, project)
    try:
        _wait_for_the_sleep(tmp_path, project, runner)
        tree = _descendants(runner.pid)
        leftovers.extend(tree)
        runner.send_signal(signum)
        out, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == code, err
    assert "interrupted: every running subagent was stopped" in err
    assert "Traceback" not in err
    reason = f"the run was interrupted ({signum.name})"
    printed = json.loads(out)
    assert printed["status"] == "interrupted"
    assert [t["status"] for t in printed["tasks"]] == ["killed"]
    assert [t["error"] for t in printed["tasks"]] == [reason]
    assert tree and all(_gone(p) for p in tree), [p for p in tree if not _gone(p)]
    report = _ps(tmp_path, project)
    assert report["status"] == "interrupted" and report["status_reason"] == reason
    [task] = report["tasks"]  # type: ignore[misc]
    assert task["status"] == "killed" and task["error"] == reason
    assert list(run_dir(home_for(tmp_path)).iterdir()) == []


def test_s_sec_6_control_a_run_left_alone_completes_as_before(
    tmp_path: Path, project: Path
) -> None:
    """Control: without a signal the same kind of run completes, and its session says so."""
    model = write_scenario(
        tmp_path / "quick.yaml",
        {
            "root": [{"tool_calls": [agent_call("quick", "go")]}, {"text": "all done"}],
            "quick": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "true"}}]},
                {"text": "ok"},
            ],
        },
    )
    run = run_cli(home_for(tmp_path), "run", "--json", "--model", model, "go", cwd=project)
    assert run.returncode == 0, run.stderr
    report = _ps(tmp_path, project)
    assert report["status"] == "completed" and report["status_reason"] is None
    assert [t["status"] for t in report["tasks"]] == ["completed"]  # type: ignore[union-attr]


# -- the rows of other processes, judged by their owner ------------------------------


_WRITE_A_SESSION = """
import sys
from supervisor.state._store import SessionStore
from supervisor.state._task_record import TaskRecord
with SessionStore(sys.argv[1]) as store:
    store.create_session("sess_other", parent_id=None, task_type="root")
print("written", flush=True)
sys.stdin.read()
"""


def _writer(db: Path) -> subprocess.Popen[str]:
    """A real process that creates a running session in ``db``, then waits on its stdin."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITE_A_SESSION, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "written\n"
    return writer


def test_s_sec_6_a_live_owners_session_is_left_running_and_its_files_kept(
    tmp_path: Path,
) -> None:
    """S-SEC-6: recovery never ends a session whose supervisor still runs, nor removes its
    run files; once that process is gone, the next recovery does both."""
    home = home_for(tmp_path)
    db = database_path(home)
    home.mkdir()
    writer = _writer(db)
    (run_dir(home)).mkdir()
    files = [run_dir(home) / "sess_other.sock", run_dir(home) / "sess_other.addr"]
    for path in files:
        path.write_text("")
    with SessionStore(db) as store:
        try:
            assert recover_dead_runs(store, home) == []
            row = store.get_session("sess_other")
            assert row is not None and row.status == "running"
            assert all(path.exists() for path in files)
        finally:
            writer.communicate("")  # it exits
        recover_dead_runs(store, home)
        row = store.get_session("sess_other")
    assert row is not None and row.status == "interrupted"
    assert row.status_reason == f"supervisor pid {writer.pid} is gone (killed or crashed)"
    assert not any(path.exists() for path in files)


def test_s_sec_6_a_reused_pid_does_not_pass_for_the_dead_supervisor(tmp_path: Path) -> None:
    """S-SEC-6: an owner whose pid now belongs to another process (a different start time)
    is gone: the live process with that pid (this one) does not keep its rows running."""
    db = home_for(tmp_path) / "subvisor.db"
    me = this_process()
    ghost = ProcessIdentity(me.pid, me.start_ticks + 1, me.pid_namespace, me.boot_id)
    with SessionStore(db) as store:
        store.create_session("sess_mine", parent_id=None, task_type="root")
        store.create_session("sess_ghost", parent_id=None, task_type="root")
        store._db.execute(
            "UPDATE sessions SET owner = ? WHERE session_id = 'sess_ghost'", (str(ghost),)
        )
        recover_dead_runs(store, home_for(tmp_path))
        mine, ghosts = store.get_session("sess_mine"), store.get_session("sess_ghost")
    assert mine is not None and mine.status == "running"
    assert ghosts is not None and ghosts.status == "interrupted"
    assert ghosts.status_reason is not None and "pid now belongs to another process" in (
        ghosts.status_reason
    )


def test_s_sec_6_rows_of_an_older_subvisor_migrate_and_end_interrupted(tmp_path: Path) -> None:
    """S-SEC-6: a schema-2 database (no owners) gains the owner columns, and its rows left
    running by an older subvisor end `interrupted`, saying why."""
    import sqlite3

    db = tmp_path / "subvisor.db"
    old = sqlite3.connect(db)
    old.executescript(
        """
        CREATE TABLE sessions (session_id TEXT PRIMARY KEY, parent_id TEXT,
            task_type TEXT NOT NULL, agent_type TEXT, description TEXT, model TEXT, cwd TEXT,
            status TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL);
        INSERT INTO sessions VALUES ('sess_old', NULL, 'root', NULL, NULL, NULL, NULL,
            'running', 1.0, 1.0);
        CREATE TABLE tasks (task_id TEXT PRIMARY KEY, parent_session_id TEXT NOT NULL,
            kind TEXT NOT NULL, status TEXT NOT NULL, notified INTEGER NOT NULL,
            created_at REAL NOT NULL, record TEXT NOT NULL);
        PRAGMA user_version = 2;
        """
    )
    old.close()
    with SessionStore(db) as store:
        recover_dead_runs(store, tmp_path)
        row = store.get_session("sess_old")
    assert row is not None and row.status == "interrupted"
    assert row.status_reason == UNRECORDED_OWNER


def test_s_sec_6_sigterm_stops_a_stress_run_like_ctrl_c(
    tmp_path: Path, project: Path, leftovers: list[psutil.Process]
) -> None:
    """S-SEC-6: SIGTERM stops `subvisor stress` gracefully: every worker is gone, a one-line
    message, exit 143, no traceback."""
    home = home_for(tmp_path)
    runner = start_cli(
        home,
        *("stress", "--agents", "2", "--concurrency", "2", "--background-ratio", "0"),
        *("--latency-ms", "600000", "--idle-timeout", "900"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline and len(tree) < 3:  # the zygote and two workers
            assert runner.poll() is None, runner.communicate()
            ps = run_cli(home, "ps", "--json", cwd=project)
            if ps.returncode == 0 and json.loads(ps.stdout)["live"]:
                tasks = json.loads(ps.stdout)["tasks"]
                if [t["status"] for t in tasks] == ["running", "running"]:
                    tree = _descendants(runner.pid)
            time.sleep(0.1)
        assert len(tree) >= 3, "the stress run's workers never all ran"
        leftovers.extend(tree)
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 143, err
    assert "interrupted by SIGTERM: every subagent was stopped" in err
    assert "Traceback" not in err
    assert all(_gone(p) for p in tree), [p for p in tree if not _gone(p)]
    assert list(run_dir(home).iterdir()) == []


_ENDLESS_WORKFLOW = """
import trio
from supervisor.workflow import workflow


@workflow
async def endless(ctx):
    print("workflow started", flush=True)
    await trio.sleep_forever()
"""


def test_s_sec_6_sigterm_stops_a_workflow_run_like_ctrl_c(tmp_path: Path, project: Path) -> None:
    """S-SEC-6: SIGTERM stops `subvisor workflow run` as Ctrl-C does: the one-line message,
    exit 143, no traceback, and the run journaled as ended, not running."""
    home = home_for(tmp_path)
    script = tmp_path / "endless.py"
    script.write_text(_ENDLESS_WORKFLOW)
    model = write_scenario(tmp_path / "unused.yaml", {"default": [{"text": "unused"}]})
    runner = start_cli(
        home,
        *("workflow", "run", str(script), "--model", model),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdout is not None
        while "workflow started" not in (line := runner.stdout.readline()):
            assert line, runner.communicate()
        runner.send_signal(signal.SIGTERM)
        _, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 143, err
    assert "interrupted: every actor's worker was stopped" in err
    assert "Traceback" not in err
    shown = run_cli(home, "workflow", "show", "--json", cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert "running" not in shown.stdout and "interrupted" in shown.stdout


def test_s_sec_3_and_6_a_repository_hidden_from_a_walk_is_disarmed_after_a_kill(
    tmp_path: Path,
) -> None:
    """S-SEC-3, S-SEC-6: X planted a repository and ended; its walk, which Y (a writer of a
    directory inside X's root, still running) could dodge, covered nothing; then the
    supervisor died. The next recovery walks X's root from X's start, not only Y's (Y started
    after the plant), and disarms it, saying so in Y's error. A task that ended before the
    first of them started does not pull the walk further back."""
    project = tmp_path / "project"
    memory = project / ".subvisor" / "agent-memory" / "m"
    memory.mkdir(parents=True)
    old = TaskRecord(
        task_id="t_old", kind="local_agent", parent_session_id="s", description="old",
        status="completed", created_at=1.0, ended_at=2.0, swept_roots=(str(project),),
        output_dir=str(tmp_path / "out"), output_file=str(tmp_path / "out" / "output.txt"),
    )  # fmt: skip
    subprocess.run(["git", "init", "-q", str(project / "mine")], check=True)
    mine = ["git", "-C", str(project / "mine"), "config", "core.fsmonitor", "x"]
    subprocess.run(mine, check=True)
    # The user's own change is older than X's start, give or take the kernel's clock.
    time.sleep(CTIME_SLACK_S + 0.5)
    x_start = time.time()
    subprocess.run(["git", "init", "-q", str(memory / "hide")], check=True)
    subprocess.run(
        ["git", "-C", str(memory / "hide"), "config", "core.fsmonitor", "touch pwned"], check=True
    )
    changed = (memory / "hide" / ".git" / "config").stat().st_ctime
    y_start = changed + 3  # past the supervisor's slack for the kernel's clock
    x = old.model_copy(update={"task_id": "t_x", "created_at": x_start, "ended_at": y_start + 1})
    y = old.model_copy(
        update={
            "task_id": "t_y",
            "status": "running",
            "created_at": y_start,
            "ended_at": None,
            "swept_roots": (str(memory),),
        }
    )
    me = this_process()
    ghost = ProcessIdentity(me.pid, me.start_ticks + 1, me.pid_namespace, me.boot_id)
    with SessionStore(home_for(tmp_path) / "subvisor.db") as store:
        for record in (old, x, y):
            store.save_task(record)
        store._db.execute("UPDATE tasks SET owner = ?", (str(ghost),))
        [ended] = recover_dead_runs(store, home_for(tmp_path))
    config = memory / "hide" / ".git" / "config"
    assert ended.task_id == "t_y" and ended.error is not None
    assert f"{config}: removed core.fsmonitor" in ended.error, ended.error
    assert "fsmonitor" not in config.read_text()
    assert "mine" not in ended.error
    assert "fsmonitor" in (project / "mine" / ".git" / "config").read_text()
