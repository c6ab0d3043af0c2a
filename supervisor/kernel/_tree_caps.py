"""Reading a worker's whole process tree, and judging it against its caps (S-SEC-4).

Two ways to read a tree, and the caps are judged the same way on either:

- its cgroup (``_cgroups``): the kernel counts every descendant and already
  enforces the memory and process caps; what we read tells us that it did;
- sampling (``TreeSampler``), where no cgroup could be made: one walk of
  ``/proc`` per round maps parents to children, and each worker's tree
  (which stays beneath it: it is a child subreaper) is summed from that.
  A breach is then only seen at the next sample, so the caps act a sample
  late. Memory is each process's resident set: what a tree holds without
  mapping it (a memfd or tmpfs file, pipe and socket buffers) is not
  counted, and the breach says RSS. That is why cgroups are preferred.

The process cap counts threads, as the cgroup's ``pids`` controller does:
one process of a thousand threads took a thousand pids past a 40-process
cap (red team Q).

Races: a process may exit between the walk and reading its figures; it
then counts as nothing. A child already reaped is counted in its reaper's
``children_*`` CPU times, for every process of the tree (Bash reaps what it
ran), so its CPU counts while its reaper lives. A child the kernel reaps
itself (its parent ignores ``SIGCHLD``) reaches no such count: a tree of
such children ran 9.8 s of CPU under a 2 s cap (red team Q). So the sampler
also keeps each process's own CPU as last seen, gone ones included, and the
tree's CPU is the larger of the two sums (each undercounts, neither counts a
second twice). What a process spends after its last sample, or a whole
child that lives between two samples, is still not seen.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import psutil

from protocol import ResourceLimits

from ._cgroups import CgroupUsage, WorkerCgroup
from ._exit import ExitKind

__all__ = ["TreeSampler", "TreeUsage", "breach", "signal_tree", "tree_breach"]

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TreeUsage:
    """One reading of a worker's tree: memory, processes, CPU, and breaches already seen."""

    memory_bytes: int
    processes: int
    cpu_seconds: float
    oom_kills: int = 0
    fork_refusals: int = 0
    mechanism: str = "sampling"

    @classmethod
    def from_cgroup(cls, usage: CgroupUsage, mechanism: str) -> TreeUsage:
        """A cgroup's reading as a tree reading."""
        return cls(
            memory_bytes=usage.memory_bytes,
            processes=usage.processes,
            cpu_seconds=usage.cpu_seconds,
            oom_kills=usage.oom_kills,
            fork_refusals=usage.fork_refusals,
            mechanism=mechanism,
        )


def breach(usage: TreeUsage, limits: ResourceLimits) -> tuple[ExitKind, str] | None:
    """The first cap ``usage`` breaks, as an exit kind and a reason naming it; None if none."""
    by = f"(whole process tree, {usage.mechanism})"
    memory = limits.memory_mb
    if usage.oom_kills:
        return ExitKind.MEMORY_CAP, (
            f"memory cap exceeded: the tree reached the {memory:g} MB cap and the kernel "
            f"killed a process in it {by}"
        )
    if memory is not None and usage.mechanism == "sampling" and usage.memory_bytes > memory * _MIB:
        return ExitKind.MEMORY_CAP, (
            f"memory cap exceeded: RSS {usage.memory_bytes / _MIB:.0f} MB over the "
            f"{memory:g} MB cap {by}"
        )
    most = limits.max_processes
    if usage.fork_refusals or (most is not None and usage.processes > most):
        return ExitKind.PROCESS_CAP, (
            f"process cap exceeded: more than {most} processes (threads count) {by}"
        )
    cpu = limits.cpu_seconds
    if cpu is not None and usage.cpu_seconds >= cpu:
        return ExitKind.CPU_CAP, (
            f"cpu cap exceeded: used {usage.cpu_seconds:.1f} s of CPU, cap {cpu} s {by}"
        )
    return None


def tree_breach(
    pid: int,
    limits: ResourceLimits,
    cgroup: WorkerCgroup | None,
    sampler: TreeSampler,
    mechanism: str,
) -> tuple[ExitKind, str] | None:
    """The cap the tree of worker ``pid`` breaks now; None if none (or it is gone).

    With a cgroup, whose kernel already holds memory and processes under
    their caps, only whether it had to is read, and the CPU if that is
    capped: a few ``pread`` s. Without one, the tree as of ``sampler``'s last
    walk of ``/proc``.
    """
    if cgroup is not None:
        reading = cgroup.usage(breaches_only=True, cpu=limits.cpu_seconds is not None)
        usage: TreeUsage | None = TreeUsage.from_cgroup(reading, mechanism)
    else:
        usage = sampler.usage(pid)
    return breach(usage, limits) if usage is not None else None


@dataclass(slots=True)
class _OwnCpu:
    """A tree's own CPU as sampled: each member's by (pid, start), and the gone ones' sum.

    A member not found in one walk is ``missing`` for a round before it counts
    as gone: a process re-parented to the worker while ``/proc`` was walked
    can drop out of one walk, and would count twice when it comes back.
    """

    live: dict[tuple[int, float], float]
    missing: dict[tuple[int, float], float]
    gone: float = 0.0

    def update(self, now: dict[tuple[int, float], float]) -> float:
        """Take this round's members; the tree's own CPU seen so far."""
        self.gone += sum(spent for key, spent in self.missing.items() if key not in now)
        self.missing = {key: spent for key, spent in self.live.items() if key not in now}
        self.live = now
        return self.gone + sum(self.missing.values()) + sum(now.values())


class TreeSampler:
    """Sums each worker's tree from one walk of ``/proc`` per round (no cgroup)."""

    def __init__(self) -> None:
        self._children: dict[int, list[int]] = {}
        self._own_cpu: dict[int, _OwnCpu] = {}

    def refresh(self) -> None:
        """Walk ``/proc`` once: who is whose child, for the ``usage`` calls of this round."""
        children: dict[int, list[int]] = {}
        pids = set()
        for proc in psutil.process_iter(["ppid"]):
            pids.add(proc.pid)
            ppid = proc.info.get("ppid")
            if ppid:
                children.setdefault(ppid, []).append(proc.pid)
        self._children = children
        for root in self._own_cpu.keys() - pids:
            del self._own_cpu[root]  # its worker is gone

    def usage(self, pid: int) -> TreeUsage | None:
        """The tree of ``pid`` as of the last ``refresh``; None if ``pid`` is gone."""
        tree, frontier = [pid], [pid]
        while frontier:
            frontier = [c for p in frontier for c in self._children.get(p, ())]
            tree.extend(frontier)
        memory = 0
        cpu = 0.0
        tasks = 0
        own: dict[tuple[int, float], float] = {}
        for member in tree:
            with contextlib.suppress(psutil.Error, OSError):
                proc = psutil.Process(member)
                with proc.oneshot():
                    memory += proc.memory_info().rss
                    times = proc.cpu_times()
                    # A reaped process's CPU lives on in its reaper's count of
                    # reaped children (each is reaped once): Bash's, for what it ran.
                    cpu += times.user + times.system + times.children_user + times.children_system
                    own[member, proc.create_time()] = times.user + times.system
                    tasks += proc.num_threads()
        if not own:
            self._own_cpu.pop(pid, None)
            return None
        cpu = max(cpu, self._own_cpu.setdefault(pid, _OwnCpu({}, {})).update(own))
        return TreeUsage(memory_bytes=memory, processes=tasks, cpu_seconds=cpu)


def signal_tree(
    pid: int, sig: int, cgroup: WorkerCgroup | None, process: psutil.Process | None
) -> None:
    """Send ``sig`` to the worker ``pid``'s whole tree, then to its process group.

    The caller makes sure ``pid`` is still unreaped. The worker leads its own
    group (pgid == pid), whose id cannot be recycled while any member lives.
    What the worker started runs in sessions of its own, so the tree is
    signalled too: every process of its cgroup or, without one, every
    descendant, all still beneath it while it lives (it is a child subreaper).
    """
    if cgroup is not None:
        members = [member for member in cgroup.pids() if member != pid]
    else:
        members = []
        if process is not None:
            with contextlib.suppress(psutil.Error):
                members = [child.pid for child in process.children(recursive=True)]
    for member in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
