"""Caps over a worker's whole process tree, by cgroup where the machine allows (S-SEC-4).

One cgroup per worker, under one per supervisor, in each controller
hierarchy we need, below the cgroup this process already lives in::

    <hierarchy>/<ours>/subvisor-<supervisor pid>-<tree id>/<worker id>

==========  ============================  ==========================================
controller  cap                           how a breach is seen
==========  ============================  ==========================================
memory      ``memory.limit_in_bytes``     the kernel's OOM killer acts inside the
            (and ``memsw`` if present)    cgroup; ``oom_kill`` in ``oom_control``
pids        ``pids.max``                  fork fails; the ``max`` count in
                                          ``pids.events`` grows
cpuacct     none (accounting)             ``cpuacct.usage`` reaches the CPU cap
cpu         the fleet's weight            (a share, not a cap: nothing to breach)
==========  ============================  ==========================================

The ``cpu`` controller is used where it can be (optional: the caps hold
without it). The supervisor's cgroup of the fleet weighs, for the CPU, what
one process at nice 0 does, however many workers and processes it holds,
and each worker's cgroup an equal part of that: the fleet never outweighs
the supervisor's own processes, and a worker that forks does not outweigh
the others. A nice value alone does not hold the supervisor above a tree:
with the kernel's autogroup (``sched_autogroup_enabled``), a process that
calls ``setsid`` gets a scheduling group of its own that weighs as much as
the supervisor's whole session, whatever its nice value. Tasks in a cpu
cgroup other than the root are never autogrouped. The weight is a share,
not a cap: an idle supervisor leaves the fleet every CPU. (Lower, the fleet
starved: with the weight of one nice-10 process, workers launched 500 at
once missed their 10 s handshake.)

The supervisor moves a worker into its cgroup as soon as it knows the pid,
before it sends the worker anything to do: the worker starts no process of
its own before that, so every descendant is born inside. A worker cannot
leave: it holds no capability, and the cgroup filesystem is hidden from it
(``worker._sandbox``), so not even uid 0 can write ``cgroup.procs``.

Only cgroup v1 hierarchies whose directory we may write are used, as on a
root container; cgroup v2 is used where the controllers are enabled for the
subtree of a cgroup we may write (a systemd user delegation). Elsewhere
``CgroupTree.create`` says why not, and the supervisor samples the tree
instead (``TreeSampler``): the mechanism in force is reported, never assumed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from protocol import ResourceLimits

from ._worker_tree import process_exists

__all__ = ["CgroupTree", "CgroupUsage", "WorkerCgroup"]

_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids", "cpuacct")
_MIB = 1024 * 1024
#: The fleet's CPU weight: one process at nice 0 (v1 ``cpu.shares``; v2 ``cpu.weight``).
_FLEET_SHARES_V1 = 1024
_FLEET_WEIGHT_V2 = 100
_PREFIX = "subvisor-"


def _own_paths() -> dict[str, str]:
    """``{controller: path}`` of this process's cgroups (v1), ``{"": path}`` for v2."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(","):
                paths[controller] = path
    return paths


def _parse_int(text: bytes, key: bytes | None = None) -> int:
    """An integer file's value, or that of ``key`` in a ``key value`` file; 0 if none."""
    if key is None:
        value = text.strip()
        return int(value) if value.isdigit() else 0
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _write(path: str, value: str) -> None:
    # os calls on plain strings: a worker's caps are written on every spawn.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class CgroupUsage:
    """One sample of a worker's cgroup: the whole tree's usage and breaches."""

    memory_bytes: int
    processes: int
    cpu_seconds: float
    oom_kills: int
    fork_refusals: int


#: (controller, file, key) of each figure of a ``CgroupUsage``, v1 then v2.
_FIGURES_V1 = {
    "memory": ("memory", "memory.usage_in_bytes", None),
    "processes": ("pids", "pids.current", None),
    "cpu": ("cpuacct", "cpuacct.usage", None),
    "oom_kills": ("memory", "memory.oom_control", b"oom_kill"),
    "fork_refusals": ("pids", "pids.events", b"max"),
}
_FIGURES_V2 = {
    "memory": ("", "memory.current", None),
    "processes": ("", "pids.current", None),
    "cpu": ("", "cpu.stat", b"usage_usec"),
    "oom_kills": ("", "memory.events", b"oom_kill"),
    "fork_refusals": ("", "pids.events", b"max"),
}


class WorkerCgroup:
    """The cgroups of one worker, one directory per controller (v1) or one (v2).

    The files it samples stay open: each sample is one ``pread`` per figure
    (a cgroup file is regenerated on every read from offset 0), not an
    open, read and close through ``pathlib``. With hundreds of workers
    sampled four times a second, that was most of the supervisor's CPU.
    """

    def __init__(self, dirs: dict[str, str], v2: bool) -> None:
        #: Its directory per controller (``""`` for v2), as plain paths.
        self.dirs = dirs
        self.v2 = v2
        self._figures = _FIGURES_V2 if v2 else _FIGURES_V1
        self._fds: dict[str, int] = {}
        #: Each distinct directory once (v1 hierarchies may share a mount).
        self._unique = tuple(dict.fromkeys(dirs.values()))

    def _dir(self, controller: str) -> str:
        return self.dirs["" if self.v2 else controller]

    def _figure(self, name: str) -> int:
        """One figure of the cgroup now (0 if its file cannot be read)."""
        controller, file, key = self._figures[name]
        fd = self._fds.get(name)
        try:
            if fd is None:
                path = os.path.join(self._dir(controller), file)
                fd = self._fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            return _parse_int(os.pread(fd, 4096, 0), key)
        except OSError:
            return 0

    def close_files(self) -> None:
        """Close the files ``usage`` keeps open (``remove`` does it too)."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def open_procs(self) -> list[int]:
        """Each of its ``cgroup.procs`` files, open for writing: for the worker to join itself.

        The caller closes them once the worker holds its own copies.
        """
        fds: list[int] = []
        try:
            for path in self._unique:
                fds.append(os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def add(self, pid: int) -> None:
        """Move ``pid`` into every one of this worker's cgroups (a node host's workers)."""
        for path in self._unique:
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def usage(self, *, breaches_only: bool = False, cpu: bool = True) -> CgroupUsage:
        """The tree's memory, process count, CPU, and how often a cap was hit.

        ``breaches_only`` reads only what says the kernel enforced a cap (OOM
        kills, refused forks), and the CPU when ``cpu``: all that judging the
        caps needs each round, since the kernel holds memory and processes
        under their caps itself. The figures not read are 0.
        """
        figure = self._figure
        full = not breaches_only
        cpu_figure = figure("cpu") if cpu else 0
        return CgroupUsage(
            memory_bytes=figure("memory") if full else 0,
            processes=figure("processes") if full else 0,
            cpu_seconds=cpu_figure / (1e6 if self.v2 else 1e9),
            oom_kills=figure("oom_kills"),
            fork_refusals=figure("fork_refusals"),
        )

    def pids(self) -> list[int]:
        """Every process in the worker's cgroup now."""
        try:
            with open(os.path.join(self._dir("pids"), "cgroup.procs"), "rb") as procs:
                text = procs.read()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def kill_all(self, sig: int = signal.SIGKILL, *, deadline_s: float = 2.0) -> None:
        """Signal every process in the cgroup until none is left (or the deadline).

        A process may fork between reading the list and the kill; the next
        round finds its child. ``pids.max`` bounds how many there can be.
        Blocking: run it in a thread.
        """
        deadline = time.monotonic() + deadline_s
        while pids := self.pids():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            if sig != signal.SIGKILL or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def try_remove(self) -> bool:
        """Remove the cgroups if nothing is left in them: one ``rmdir`` each, no waiting.

        True when all are gone. A worker's tree is usually gone with it, so
        this is what ends most workers' cgroups; ``remove`` handles the rest.
        """
        self.close_files()
        gone = True
        for path in self._unique:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone

    def remove(self, *, deadline_s: float = 1.0) -> bool:
        """Kill what is left and remove the cgroups; False if some remain at the deadline.

        Blocking: run it in a thread. A killed process stays in its cgroup
        until its parent reaps it, so ``rmdir`` may fail for a while (EBUSY);
        what is still there at the deadline is left to the sweep of the next
        supervisor to start (``_sweep_stale``), rather than holding this one up.
        """
        deadline = time.monotonic() + deadline_s
        self.close_files()
        self.kill_all(deadline_s=deadline_s)
        left = list(self._unique)
        while left:
            for path in list(left):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
                left.remove(path)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        return not left


class CgroupTree:
    """The cgroups of one supervisor: a parent per hierarchy, a child per worker."""

    def __init__(self, dirs: dict[str, Path], v2: bool) -> None:
        self.dirs = dirs
        self.v2 = v2
        self.workers: dict[str, WorkerCgroup] = {}
        self._bases = {controller: str(path) for controller, path in dirs.items()}
        #: Whether v1's memory controller also caps swap (memsw); learnt at the first worker.
        self._memsw: bool | None = None
        #: Why the fleet has no CPU weight of its own ("" when it has one).
        self.cpu_weight_error = "not set"

    @property
    def mechanism(self) -> str:
        """``cgroup v1`` or ``cgroup v2``."""
        return "cgroup v2" if self.v2 else "cgroup v1"

    @classmethod
    def create(cls, tree_id: str) -> tuple[CgroupTree | None, str]:
        """This supervisor's cgroups, or None and why they cannot be made here.

        The fleet gets a CPU weight of its own where the ``cpu`` controller can
        be used; ``cpu_weight_error`` says why not otherwise.
        """
        name = f"{_PREFIX}{os.getpid()}-{tree_id}"
        own = _own_paths()
        if all(c in own for c in _CONTROLLERS):
            bases = {c: _ROOT / c / own[c].lstrip("/") for c in _CONTROLLERS}
            tree, why = cls._make(bases, name, v2=False)
            if tree is not None:
                tree._weigh_v1(own, name)
            return tree, why
        if "" in own:
            base = _ROOT / own[""].lstrip("/")
            enabled = set(_read_text(base / "cgroup.subtree_control").split())
            if {"memory", "pids"} <= enabled:
                tree, why = cls._make({"": base}, name, v2=True)
                if tree is None:
                    return None, why
                try:
                    # A worker's cgroup has the caps' files only where its parent enables them.
                    _write(str(tree.dirs[""] / "cgroup.subtree_control"), "+memory +pids")
                except OSError as exc:
                    tree.close(deadline_s=0)
                    return None, f"cannot enable memory and pids below {base / name}: {exc}"
                tree._weigh_v2(enabled)
                return tree, why
            return None, (
                "cgroup v2 without the memory and pids controllers delegated to "
                f"{base} (enabled there: {', '.join(sorted(enabled)) or 'none'})"
            )
        return None, "no cgroup memory, pids and cpuacct hierarchies are mounted"

    @classmethod
    def _make(cls, bases: dict[str, Path], name: str, *, v2: bool) -> tuple[CgroupTree | None, str]:
        made: dict[str, Path] = {}
        try:
            for controller, base in bases.items():
                _sweep_stale(base)
                path = base / name
                path.mkdir()
                made[controller] = path
        except OSError as exc:
            for path in made.values():
                with contextlib.suppress(OSError):
                    path.rmdir()
            return None, f"cannot make a cgroup under {base}: {exc.strerror or exc}"
        return cls(made, v2), ""

    def _weigh_v1(self, own: dict[str, str], name: str) -> None:
        """Weigh the fleet in the ``cpu`` hierarchy, making our cgroup there if apart."""
        if "cpu" not in own:
            self.cpu_weight_error = "no cgroup v1 cpu hierarchy is mounted"
            return
        path = _ROOT / "cpu" / own["cpu"].lstrip("/") / name
        try:
            # Often mounted together with cpuacct ("cpu,cpuacct"): then it is that cgroup.
            if not (path.exists() and path.samefile(self.dirs["cpuacct"])):
                _sweep_stale(path.parent)
                path.mkdir()
                self.dirs["cpu"] = path
                self._bases["cpu"] = str(path)
            _write(str(path / "cpu.shares"), str(_FLEET_SHARES_V1))
        except OSError as exc:
            self.cpu_weight_error = (
                f"cannot weigh the fleet under {path.parent}: {exc.strerror or exc}"
            )
            if self.dirs.pop("cpu", None) is not None:
                del self._bases["cpu"]
                with contextlib.suppress(OSError):
                    path.rmdir()
            return
        self.cpu_weight_error = ""

    def _weigh_v2(self, enabled: set[str]) -> None:
        """Weigh the fleet (``cpu.weight``) where the cpu controller is delegated."""
        if "cpu" not in enabled:
            self.cpu_weight_error = "the cgroup v2 cpu controller is not delegated here"
            return
        path = self.dirs[""]
        try:
            _write(str(path / "cpu.weight"), str(_FLEET_WEIGHT_V2))
            # Each worker's cgroup then weighs the same within the fleet.
            _write(str(path / "cgroup.subtree_control"), "+cpu")
        except OSError as exc:
            self.cpu_weight_error = f"cannot weigh the fleet in {path}: {exc.strerror or exc}"
            return
        self.cpu_weight_error = ""

    def add_worker(self, worker_id: str, limits: ResourceLimits) -> WorkerCgroup:
        """Make a worker's cgroups with its caps set; move it in with ``WorkerCgroup.add``."""
        join = os.path.join
        dirs = {c: join(base, worker_id) for c, base in self._bases.items()}
        cgroup = WorkerCgroup(dirs, self.v2)
        for path in cgroup._unique:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path)
        memory = int(limits.memory_mb * _MIB) if limits.memory_mb is not None else None
        if self.v2:
            d = dirs[""]
            if memory is not None:
                _write(join(d, "memory.max"), str(memory))
                with contextlib.suppress(OSError):
                    _write(join(d, "memory.swap.max"), "0")
            if limits.max_processes is not None:
                _write(join(d, "pids.max"), str(limits.max_processes))
        else:
            if memory is not None:
                _write(join(dirs["memory"], "memory.limit_in_bytes"), str(memory))
                memsw = join(dirs["memory"], "memory.memsw.limit_in_bytes")
                if self._memsw is None:
                    # Every memory cgroup of the hierarchy has the file, or none does.
                    self._memsw = os.path.exists(memsw)
                if self._memsw:
                    with contextlib.suppress(OSError):
                        _write(memsw, str(memory))
            if limits.max_processes is not None:
                _write(join(dirs["pids"], "pids.max"), str(limits.max_processes))
        self.workers[worker_id] = cgroup
        return cgroup

    def close(self, *, deadline_s: float = 2.0) -> None:
        """Kill everything left in this supervisor's cgroups and remove them (blocking).

        One deadline for all of it: what cannot be removed by then is swept by
        the next supervisor to start.
        """
        for cgroup in self.workers.values():
            cgroup.close_files()
        self.workers.clear()
        for path in dict.fromkeys(self.dirs.values()):
            _remove_tree(path, deadline_s=deadline_s)


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _remove_tree(path: Path, *, deadline_s: float = 1.0) -> None:
    """Kill every process in ``path`` and the cgroups below it; remove them, children first."""
    children: list[Path] = []
    with contextlib.suppress(OSError):
        children = [child for child in path.iterdir() if child.is_dir()]
    # Each directory alone: the same code serves every v1 hierarchy and v2.
    groups = [WorkerCgroup({"": str(d)}, v2=True) for d in (*children, path)]
    for group in groups:
        group.kill_all(deadline_s=0)
    deadline = time.monotonic() + deadline_s
    for group in groups:
        group.remove(deadline_s=max(0.0, deadline - time.monotonic()))


def _sweep_stale(base: Path) -> None:
    """Remove the cgroups of supervisors that died without closing theirs (S-SEC-5)."""
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            if not entry.name.startswith(_PREFIX) or not entry.is_dir():
                continue
            pid_text = entry.name[len(_PREFIX) :].split("-", 1)[0]
            if pid_text.isdigit() and not process_exists(int(pid_text)):
                _remove_tree(entry, deadline_s=0.2)
