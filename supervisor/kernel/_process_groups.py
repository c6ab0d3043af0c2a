"""``WorkerProcessGroups``: the process groups a worker's commands run in, killed with it.

A worker's Bash runs each command in a process group of its own and names it
in a ``process_group`` event, so that a job the command left in the
background dies with the agent. The event is the worker's word, and the
worker is untrusted: the supervisor kills with its own rights (root, in a
container), so a group named on the worker's word alone could be any on the
machine, the supervisor's own included.

Invariants:

- A group is kept only if its leader (pid == pgid), when the event is read,
  is a live descendant of the worker on this machine. A remote worker's
  pids name processes of another node: none is kept.
- The leader is held by a pidfd from before that check, so the check and
  the kill are about one process, never a later one that reuses its pid.
- At the end a group is killed only while its leader lives: the leader
  holds the group's id, which no other group can take before it exits.
  A group whose leader already exited is left to the worker's cgroup or
  tree kill (``signal_tree``), which is how its members die anyway.

- At most ``MAX_KEPT_GROUPS`` are kept, each holding one of the
  supervisor's fds: the pidfds of leaders that have exited are closed when
  the count reaches it, and past it a group is not kept. A group not kept
  still dies with the worker's cgroup or tree kill.

Races: a command may end before its event is read; its pid may even be
reused by then. The pidfd is opened first and checked last: a leader that
is alive after the ancestry walk was alive during it, so the walk saw that
process and not a successor.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["MAX_KEPT_GROUPS", "WorkerProcessGroups", "descends_from"]

#: Groups kept per worker: far more background jobs than an agent leaves
#: running, and few enough that a fleet's pidfds stay far from the fd limit.
MAX_KEPT_GROUPS = 128
#: Adds refused at the cap between two sweeps for exited leaders: a worker
#: whose leaders all live cannot make every event cost a sweep.
_ADDS_PER_SWEEP = 32

# Deeper chains than this are not real process trees.
_MAX_DEPTH = 4096


def _parent(pid: int) -> int | None:
    """The ppid of ``pid`` from ``/proc``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: it runs to the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1])


def descends_from(pid: int, ancestor: int) -> bool:
    """True if ``ancestor`` is above ``pid`` in ``/proc`` now (False if either is gone)."""
    current = pid
    for _ in range(_MAX_DEPTH):
        parent = _parent(current)
        if parent is None or parent <= 1:
            return False
        if parent == ancestor:
            return True
        current = parent
    return False


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    return True


class WorkerProcessGroups:
    """The verified process groups of one worker; ``kill`` ends those still led."""

    def __init__(self, worker_pid: int, *, local: bool) -> None:
        self._worker_pid = worker_pid
        self._local = local
        self._leaders: dict[int, int] = {}  # pgid -> pidfd of its leader
        self._refused_since_sweep = _ADDS_PER_SWEEP

    def add(self, pgid: int) -> bool:
        """Keep ``pgid`` if its leader is a live descendant of the worker; say whether kept."""
        if not self._local or pgid <= 1 or pgid in self._leaders:
            return pgid in self._leaders
        if len(self._leaders) >= MAX_KEPT_GROUPS:
            if self._refused_since_sweep >= _ADDS_PER_SWEEP:
                self._sweep()
            if len(self._leaders) >= MAX_KEPT_GROUPS:
                self._refused_since_sweep += 1
                return False
        try:
            pidfd = os.pidfd_open(pgid)
        except OSError:
            return False  # already ended, or no such process
        try:
            kept = (
                os.getpgid(pgid) == pgid and descends_from(pgid, self._worker_pid) and _alive(pidfd)
            )
        except OSError:
            kept = False
        if not kept:
            os.close(pidfd)
            return False
        self._leaders[pgid] = pidfd
        return True

    def _sweep(self) -> None:
        """Forget the groups whose leader has exited (closing its pidfd)."""
        self._refused_since_sweep = 0
        for pgid, pidfd in list(self._leaders.items()):
            if not _alive(pidfd):
                del self._leaders[pgid]
                os.close(pidfd)

    def kill(self) -> None:
        """SIGKILL every kept group whose leader still lives; forget them all."""
        leaders, self._leaders = self._leaders, {}
        for pgid, pidfd in leaders.items():
            try:
                if _alive(pidfd):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, signal.SIGKILL)
            finally:
                os.close(pidfd)

    def __len__(self) -> int:
        return len(self._leaders)
