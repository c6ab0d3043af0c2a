"""``ProcessIdentity``: a process named so that a recycled pid cannot pass for it (S-SEC-6).

A pid alone is reused; a pid with the process's start time (clock ticks
since boot, from ``/proc/<pid>/stat``) is not, within one boot. The boot id
tells a record written before a restart, and the pid namespace tells a
record this process cannot judge: a pid seen from another container's
namespace names nothing here, so such a record is never declared dead.

Invariants:

- ``gone_reason`` answers ``None`` unless the process is certainly gone: a
  live supervisor is never declared dead, at worst a dead one stays
  unjudged.
- A zombie counts as gone: it runs no code, whatever its parent does later.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessIdentity", "this_process"]

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process as (pid, start ticks), within one boot and one pid namespace.

    ``str()`` gives the form stored in the session store; ``parse`` reads it back.
    """

    pid: int
    start_ticks: int
    pid_namespace: str
    boot_id: str

    def __str__(self) -> str:
        return f"{self.pid}/{self.start_ticks}/{self.pid_namespace}/{self.boot_id}"

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The identity of the running process ``pid`` (of this namespace); ``None`` if none."""
        stat = _read_stat(pid)
        if stat is None:
            return None
        return cls(pid, stat[1], _pid_namespace(), _boot_id())

    @classmethod
    def parse(cls, text: str) -> ProcessIdentity | None:
        """The identity ``str()`` wrote, or ``None`` for anything else."""
        parts = text.split("/", 3)
        if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        return cls(int(parts[0]), int(parts[1]), parts[2], parts[3])

    def gone_reason(self) -> str | None:
        """Why this process certainly no longer runs, or ``None`` (it runs, or nobody can tell)."""
        if self.boot_id and _boot_id() and self.boot_id != _boot_id():
            return "the machine restarted since"
        if self.pid_namespace != _pid_namespace() or _read_stat(os.getpid()) is None:
            return None  # another namespace's pid, or no procfs to look in
        stat = _read_stat(self.pid)
        if stat is None:
            return "killed or crashed"
        state, start_ticks = stat
        if self.start_ticks and start_ticks != self.start_ticks:
            return "killed or crashed; its pid now belongs to another process"
        if state in ("Z", "X"):
            return "killed or crashed"
        return None


def this_process() -> ProcessIdentity:
    """The identity of the calling process."""
    pid = os.getpid()
    known = _mine.get(pid)
    if known is None:
        # Without /proc the start time is unknown (0): such a record reads
        # as gone only once its pid is free.
        known = ProcessIdentity.of(pid) or ProcessIdentity(pid, 0, _pid_namespace(), _boot_id())
        _mine.clear()  # a forked child must not answer with its parent's identity
        _mine[pid] = known
    return known


_mine: dict[int, ProcessIdentity] = {}


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state, start ticks) of ``pid`` from ``/proc/<pid>/stat``; ``None`` if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields
    # after its closing parenthesis start at field 3 (state); field 22 is
    # the start time.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _boot_id() -> str:
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""
