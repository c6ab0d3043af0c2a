"""S-SEC-5: nothing a subagent starts outlives its worker, its run, or its supervisor.

Each attack leaves processes behind the way a model might: in the
background, detached with ``setsid``/``nohup``, double-forked (re-parented
away from Bash), and in the foreground. Every one carries a sleep length no
other process on the machine uses, so the test can find them all afterwards.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.attack import bash_attack
from tests.support.cli import run_cli, start_cli
from tests.support.delegation import agent_call, home_for, write_scenario


def _markers() -> list[str]:
    base = random.randrange(10**6)
    return [f"7{i}.{base:06d}" for i in range(4)]


def _alive_with(markers: list[str]) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if any(m in cmdline for m in markers):
            found.append(proc.pid)
    return found


def _sleeping(markers: list[str]) -> set[str]:
    """The markers for which a ``sleep`` process runs now (not merely a shell naming it)."""
    found = set()
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if len(cmdline) == 2 and os.path.basename(cmdline[0]) == "sleep":
            found.update(m for m in markers if cmdline[1] == m)
    return found


def _wait(condition: object, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)


#: What a subagent may try so that its worker cannot end its tree: stop it ($PPID: the
#: shell's parent is the worker) with every stop signal (red team Q).
STOP_THE_WORKER = "for s in STOP TSTP TTIN TTOU; do kill -$s $PPID; done; "
#: Or kill it the moment its zygote dies, before it can end its tree (red team T): its zygote
#: is its session's leader, and a pidfd says when that ends.
KILL_THE_WORKER_WITH_ITS_ZYGOTE = (
    "import os, select, signal, sys\n"
    "worker = int(sys.argv[1])\n"
    "zygote = os.pidfd_open(os.getsid(worker))\n"
    "select.select([zygote], [], [])\n"
    "try: os.kill(worker, signal.SIGKILL)\n"
    "except OSError: pass\n"
    "signal.pause()\n"
)
#: Or hide from it: a chain of processes, each the parent of the next, that made themselves
#: non-dumpable, so the worker's /proc shows none of them (red team S).
HIDDEN_CHAIN_DEPTH = 500
HIDDEN_CHAIN = (
    "import ctypes, os, sys, time\n"
    "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE\n"
    f"for _ in range({HIDDEN_CHAIN_DEPTH}):\n"
    "    if os.fork(): break\n"
    "time.sleep(600)\n"
)


def _leaver(markers: list[str], first: str = "") -> str:
    """Bash that leaves one sleep of each kind running, then waits in the foreground."""
    bg, detached, double, foreground = markers
    return (
        f"sleep {bg} & "
        f"setsid nohup sleep {detached} > /dev/null 2>&1 & "
        f"( ( sleep {double} & ) & ) ; "
        f"{first}sleep {foreground}"
    )


def _start_run(
    tmp_path: Path, markers: list[str], first: str = "", config: str = ""
) -> subprocess.Popen[str]:
    project = tmp_path / "project"
    project.mkdir()
    if config:
        home_for(tmp_path).mkdir(exist_ok=True)
        (home_for(tmp_path) / "config.toml").write_text(config)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("leave", "leave", subagent_type="general-purpose")]},
                {"text": "{{tool_result}}"},
            ],
            "leave": [
                {"tool_calls": [{"name": "Bash", "input": {"command": _leaver(markers, first)}}]},
                {"text": "done"},
            ],
        },
    )
    return start_cli(
        home_for(tmp_path),
        *("run", "--model", model, "--json", "x"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "how",
    [
        "SIGKILL",
        "SIGTERM",
        "SIGINT",
        "SIGKILL, its zygote too",
        "SIGKILL, its zygote too, once the subagent tried to stop its worker",
        "SIGKILL, its zygote too, with a chain of processes hidden from the worker",
        "SIGKILL, its zygote too, with watchers that kill the worker as the zygote dies",
    ],
)
def test_s_sec_5_no_descendant_survives_its_supervisor(tmp_path: Path, how: str) -> None:
    """S-SEC-5: with a subagent's background, detached, double-forked and foreground
    processes all running, the supervisor is killed (SIGKILL), terminated or interrupted:
    every one of them is gone. Also with its zygote SIGKILLed at once (`pkill -9 -f
    subvisor` matches both; an OOM of the machine may take both), when neither is left
    to end the trees: each worker ends everything below it as it dies with its zygote.
    The subagent cannot stop its worker first (a stopped worker ended nothing, and the
    tree outlived them all: red team Q)."""
    markers = _markers()
    first = config = ""
    if how.endswith("stop its worker"):
        first = STOP_THE_WORKER
    elif how.endswith("as the zygote dies"):
        watcher = f"{sys.executable} -c '{KILL_THE_WORKER_WITH_ITS_ZYGOTE}' $PPID {markers[0]} & "
        first = watcher * 4
    elif how.endswith("hidden from the worker"):
        first = f"{sys.executable} -c '{HIDDEN_CHAIN}' {markers[0]} & "
        config = f"[subagent_limits]\nmax_processes = {HIDDEN_CHAIN_DEPTH + 200}\n"
    run = _start_run(tmp_path, markers, first, config)
    try:
        # Bounded (a loaded machine starts it all slowly), never a timing assertion.
        _wait(lambda: _sleeping(markers) == set(markers))
        assert _sleeping(markers) == set(markers), (
            run.stderr.read() if run.poll() is not None else ""
        )
        if how.endswith("hidden from the worker"):
            whole = HIDDEN_CHAIN_DEPTH + 2  # and the background sleep
            _wait(lambda: len(_alive_with(markers[:1])) >= whole)
            assert len(_alive_with(markers[:1])) >= whole
        supervisor = psutil.Process(run.pid)
        zygotes = [p for p in supervisor.children() if p.name() == "subvisor-zygote"]
        workers = [w for z in zygotes for w in z.children()]
        assert workers and all(w.status() != psutil.STATUS_STOPPED for w in workers)
        supervisor.send_signal(getattr(signal, how.split(",")[0]))
        if "zygote too" in how:
            assert zygotes
            for zygote in zygotes:
                zygote.kill()
        run.wait(timeout=60)
        _wait(lambda: not _alive_with(markers))
        assert _alive_with(markers) == []
    finally:
        if run.poll() is None:
            run.kill()
        for pid in _alive_with(markers):
            os.kill(pid, signal.SIGKILL)


def test_s_sec_5_what_a_worker_left_running_ends_with_it(tmp_path: Path) -> None:
    """S-SEC-5: a subagent that finishes with background, detached and double-forked
    processes still running: they end with its worker, while the run goes on."""
    markers = _markers()
    bg, detached, double, _ = markers
    project = tmp_path / "project"
    project.mkdir()
    leave = (
        f"sleep {bg} & setsid nohup sleep {detached} >/dev/null 2>&1 & "
        f"( ( sleep {double} & ) & ); echo left"
    )
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("leave", "leave", subagent_type="general-purpose")]},
                {"text": "{{tool_result}}"},
            ],
            "leave": [
                {"tool_calls": [{"name": "Bash", "input": {"command": leave}}]},
                {"text": "done"},
            ],
        },
    )
    done = run_cli(home_for(tmp_path), "run", "--model", model, "--json", "x", cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tasks"][0]["status"] == "completed"
    _wait(lambda: not _alive_with(markers))
    assert _alive_with(markers) == []


@pytest.mark.parametrize("mode", ["read-only", "workspace-write", "full"])
async def test_s_sec_5_what_a_subagent_runs_cannot_signal_its_worker(
    tmp_path: Path, mode: str
) -> None:
    """S-SEC-5: in every mode, nothing a subagent runs can signal its worker (which ends the
    tree, and must not be ended first: red team T), while it can still signal what it
    started itself; the run completes."""
    attack = await bash_attack(
        tmp_path,
        [
            "kill -TERM $PPID; echo term=$?",
            "kill -KILL $PPID; echo kill=$?",
            "sleep 30 & kill $!; echo own=$?",
        ],
        mode=mode,
    )
    assert attack.record.status == "completed", attack.record.error
    said = [attack.output(i) for i in range(3)]
    assert "term=1" in said[0] and "kill=1" in said[1] and "own=0" in said[2], said
