"""S-SEC-7 and S-SEC-2: the worker-tree check, in a PID namespace and against races.

In a PID namespace of its own ``os.getpid()`` is 1, and ``/proc/1`` (of the
host's ``/proc``) is the host's init: the walk must start from the pid
``/proc/self`` names. An ancestor that exits while the walk climbs past it
must not make a process inside look outside.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from protocol import SUPERVISOR_PROCESS_NAME, WORKER_PROCESS_NAME
from supervisor.kernel import (
    UNSETTLED,
    Supervisor,
    SupervisorConfig,
    _worker_tree,
    in_worker_tree,
    supervisor_ancestor,
)

# A parent named like a worker starts a child in a user + PID namespace of its own,
# which asks whether it is inside a worker tree.
SCRIPT = f"""
import ctypes, subprocess, sys
ctypes.CDLL(None).prctl(15, b"{WORKER_PROCESS_NAME}", 0, 0, 0)
check = "import os; from supervisor.kernel._worker_tree import inside_worker_tree_reason as r; "
check += "print('pid', os.getpid(), r())"
argv = ["unshare", "--user", "--pid", "--fork", sys.executable, "-c", check]
sys.exit(subprocess.run(argv).returncode)
"""


def test_s_sec_7_a_pid_namespace_does_not_hide_the_worker_above() -> None:
    """S-SEC-7: pid 1 of a new PID namespace below a worker still finds the worker."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pid 1 " in done.stdout, done.stdout
    assert "inside a subvisor worker tree (process" in done.stdout, done.stdout


# A worker-named child subreaper holding a middle process, which holds the peer.
# SIGCHLD ignored: the middle process, once killed, is reaped at once.
_TREE = f"""
import ctypes, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None)
libc.prctl(15, b"{WORKER_PROCESS_NAME}", 0, 0, 0)
libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
middle = subprocess.Popen(
    [sys.executable, "-c", "import subprocess, time; p = subprocess.Popen(['sleep', '300']);"
     " print(p.pid, flush=True); time.sleep(300)"],
    stdout=subprocess.PIPE, text=True,
)
print(os.getpid(), middle.pid, middle.stdout.readline().strip(), flush=True)
time.sleep(300)
"""


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_s_sec_2_an_ancestor_that_exits_during_the_walk_does_not_hide_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S-SEC-2/S-SEC-7: the link between a peer and its worker vanishing mid-walk.

    The peer's parent is killed just after the walk read the peer's own
    entry: the next step finds no such process. The peer, re-parented to the
    worker (a child subreaper), must still be found inside.
    """
    tree = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    assert tree.stdout is not None
    worker, middle, peer = (int(pid) for pid in tree.stdout.readline().split())
    try:
        real_stat = _worker_tree._stat
        killed = []

        def racing_stat(pid: int) -> tuple[str, int] | None:
            seen = real_stat(pid)
            if pid == peer and not killed:
                killed.append(middle)
                os.kill(middle, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while _ppid(peer) != worker or _ppid(middle) is not None:
                    assert time.monotonic() < deadline, "the peer was not re-parented"
                    time.sleep(0.01)
            return seen

        monkeypatch.setattr(_worker_tree, "_stat", racing_stat)
        assert _worker_tree.worker_tree_ancestor(peer) == worker
        assert killed == [middle]
    finally:
        for pid in (peer, middle):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        tree.kill()
        tree.wait()


def test_s_sec_2_a_process_gone_before_it_is_checked_counts_as_inside() -> None:
    """Nothing shows a process that no longer exists to be outside a worker tree."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert in_worker_tree(gone.pid)


def test_s_sec_2_a_supervisor_above_a_process_is_found_and_a_gone_one_is_unsettled() -> None:
    """S-SEC-2: ``supervisor_ancestor`` names the nearest process called subvisor-sup strictly
    above a pid (a grandchild of one is found; the supervisor itself is not above itself);
    a process gone before the walk cannot be shown outside (UNSETTLED)."""
    script = (
        "import ctypes, subprocess, sys\n"
        f"ctypes.CDLL(None).prctl(15, b'{SUPERVISOR_PROCESS_NAME}', 0, 0, 0)\n"
        "child = subprocess.Popen(\n"
        "    ['sh', '-c', 'sleep 60 & echo $!; wait'], stdout=subprocess.PIPE\n"
        ")\n"
        "print(child.stdout.readline().decode().strip(), flush=True)\n"
        "child.wait()\n"
    )
    sup = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert sup.stdout is not None
        grandchild = int(sup.stdout.readline())
        assert supervisor_ancestor(grandchild) == sup.pid
        assert supervisor_ancestor(sup.pid) is None  # the test process is no supervisor
        assert supervisor_ancestor(os.getpid()) is None
    finally:
        sup.kill()
        sup.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert supervisor_ancestor(gone.pid) == UNSETTLED


async def test_s_sec_2_a_library_supervisor_bears_the_marker_while_open() -> None:
    """S-SEC-2: the library's Supervisor names its process subvisor-sup while it is open,
    so what it starts can be told apart; closed, the process has its own name back."""
    own = _comm()
    assert own != SUPERVISOR_PROCESS_NAME
    async with Supervisor(SupervisorConfig(spawn_mode="exec")):
        assert _comm() == SUPERVISOR_PROCESS_NAME
    assert _comm() == own


def _comm() -> str:
    with open("/proc/self/comm") as f:
        return f.read().strip()
