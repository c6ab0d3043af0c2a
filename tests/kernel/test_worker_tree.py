"""S-SEC-7: the worker-tree check in a PID namespace of its own.

There ``os.getpid()`` is 1, and ``/proc/1`` (of the host's ``/proc``) is the
host's init: the walk must start from the pid ``/proc/self`` names.
"""

from __future__ import annotations

import subprocess
import sys

from protocol import WORKER_PROCESS_NAME

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
