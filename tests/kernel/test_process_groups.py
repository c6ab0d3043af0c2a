"""A worker's ``process_group`` event is its word: only its own groups are ever killed (S-SEC-5).

The supervisor kills the groups a worker's commands ran in when the agent
ends, with the supervisor's rights. These tests stand in for the worker with
this test process (the groups' leaders are its children) and name groups
that are not its own, as a hostile worker would.
"""

from __future__ import annotations

import os
import subprocess
import sys

from supervisor.kernel._process_groups import WorkerProcessGroups

_SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _own_group() -> subprocess.Popen[bytes]:
    return subprocess.Popen(_SLEEP, start_new_session=True)


def test_s_sec_5_a_group_the_worker_leads_is_killed_with_it() -> None:
    """Control: a group led by the worker's own child dies at ``kill``."""
    child = _own_group()
    try:
        groups = WorkerProcessGroups(os.getpid(), local=True)
        assert groups.add(child.pid)
        groups.kill()
        assert child.wait(timeout=10) == -9
        assert len(groups) == 0
    finally:
        child.kill()
        child.wait()


def test_s_sec_5_a_group_outside_the_worker_is_never_killed() -> None:
    """A group named by a worker that is not its ancestor (a victim elsewhere, the
    supervisor's own, init's) is refused at once and survives ``kill``."""
    victim = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time;"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
            " start_new_session=True); print(p.pid, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert victim.stdout is not None
        grandchild = int(victim.stdout.readline())
        # The "worker" is the victim's sibling: the grandchild is not below it.
        sibling = _own_group()
        try:
            groups = WorkerProcessGroups(sibling.pid, local=True)
            for named in (grandchild, os.getpgid(0), 1, 0, -5, 2**22 + 7):
                assert not groups.add(named), named
            groups.kill()
            os.kill(grandchild, 0)  # still alive
            assert victim.poll() is None
        finally:
            sibling.kill()
            sibling.wait()
    finally:
        os.killpg(grandchild, 9)
        victim.kill()
        victim.wait()


def test_s_sec_5_a_remote_workers_groups_name_no_local_process() -> None:
    """A worker on another node names pids of that node: none is kept here."""
    child = _own_group()
    try:
        groups = WorkerProcessGroups(os.getpid(), local=False)
        assert not groups.add(child.pid)
        groups.kill()
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_s_sec_8_groups_whose_leaders_exited_hold_no_fds() -> None:
    """S-SEC-8: a worker naming group after group, each leader exiting after its event
    (one pidfd per group kept), holds at most MAX_KEPT_GROUPS of the supervisor's fds, not
    one per event; and a live group named after that is still kept and killed."""
    from supervisor.kernel._process_groups import MAX_KEPT_GROUPS

    groups = WorkerProcessGroups(os.getpid(), local=True)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3 * MAX_KEPT_GROUPS):
        leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
        groups.add(leader.pid)
        leader.kill()
        leader.wait()
    held = len(os.listdir("/proc/self/fd")) - before
    live = _own_group()
    try:
        assert groups.add(live.pid)
        groups.kill()
        assert live.wait(timeout=10) == -9
    finally:
        live.kill()
        live.wait()
    assert held <= MAX_KEPT_GROUPS, held
    assert len(os.listdir("/proc/self/fd")) <= before
