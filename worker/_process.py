"""Process-level setup every worker does before it speaks: parent death, rlimits."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import signal

from protocol import ResourceLimits

from ._subtree import kill_descendants

__all__ = [
    "apply_resource_limits",
    "die_with_parent",
    "end_tree_with_parent",
    "join_cgroups",
    "lower_priority",
    "prefer_for_oom_kill",
    "set_parent_death_signal",
    "set_process_name",
]

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_CPU_HARD_GRACE_S = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent thread dies."""
    if _libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")


def set_process_name(name: str) -> None:
    """Set this process's ``comm`` (what ``ps`` shows; the worker-tree marker of S-SEC-7)."""
    if _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NAME) failed: {os.strerror(err)}")


def die_with_parent(expected_parent: int, sig: int = signal.SIGKILL) -> None:
    """Arm the parent-death signal ``sig``, then exit at once if the parent is already gone.

    The parent may die between our fork and the ``prctl`` call; the signal is
    then never sent, so ``getppid()`` must be checked after arming it.
    """
    set_parent_death_signal(sig)
    if os.getppid() != expected_parent:
        os._exit(1)


#: The OOM killer's bias for every worker and all it starts: the most there is.
_OOM_SCORE_ADJ = 1000


def prefer_for_oom_kill() -> None:
    """Make this process, and all it starts, the OOM killer's first choice over the supervisor.

    A fleet's caps may add up to more than the machine has; when the machine
    (not a worker's cgroup) runs out, the kernel kills the process of most
    memory plus bias, and without one a busy supervisor is often the largest
    single process: a runaway subagent would take the parent down. Set while
    the worker holds ``CAP_SYS_RESOURCE`` (as root), which also makes it the
    floor, so nothing the worker runs can lower it again; as a user, raising
    it needs no capability. Inherited across fork and exec. Best effort: a
    ``/proc`` that refuses it changes nothing else.
    """
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write(str(_OOM_SCORE_ADJ))


def end_tree_with_parent(expected_parent: int) -> None:
    """Die with the parent, first killing everything below this process (a worker).

    The parent-death signal is SIGTERM, handled: a worker is a child
    subreaper, so what it started (a ``setsid`` daemon, a double fork) is
    below it while it lives, and is killed before it exits. Were it SIGKILL,
    a zygote killed together with its supervisor (``pkill -9 -f subvisor``)
    would leave that tree to init, with nobody left to end it (S-SEC-5).
    A SIGTERM from anywhere else ends the worker the same way.

    Nothing it runs may stop it either, or that SIGTERM would wait: the stop
    signals it can ignore are ignored (what it runs gets them back at exec,
    ``worker.tools._process``), and its seccomp filter refuses ``SIGSTOP``.
    """
    for stop in (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(stop, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_tree)
    die_with_parent(expected_parent, signal.SIGTERM)


def _end_tree(signum: int, frame: object) -> None:
    kill_descendants(deadline_s=1.0)
    # Then die of the signal itself, as unhandled: the exit reads the same.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def join_cgroups(fds: list[int]) -> str:
    """Write this process into each ``cgroup.procs`` file ``fds`` holds, then close them.

    Done first, before anything of a model's runs, so that every process the
    worker ever starts is born inside (S-SEC-4); the fds are closed at once,
    so nothing the worker runs can move a process through them. Returns ""
    when it joined all of them, else what went wrong.
    """
    problems = []
    me = str(os.getpid()).encode()
    for fd in fds:
        try:
            os.write(fd, me)
        except OSError as exc:
            problems.append(exc.strerror or str(exc))
        finally:
            os.close(fd)
    return "; ".join(problems)


def lower_priority(nice: int) -> None:
    """Yield the CPU to the supervisor: raise this process's nice value to ``nice``.

    The supervisor is the control plane of every agent (launches, approvals,
    model traffic, notifications); a worker is one of hundreds of data-plane
    processes that would each get as much CPU as it. With ``nice`` 10 a busy
    worker weighs a tenth of a normal process, and ``SCHED_BATCH`` keeps its
    wake-ups from preempting the supervisor mid-call. Whatever the worker
    starts inherits both. A worker cannot take the nice value back: it holds
    no ``CAP_SYS_NICE`` and its ``RLIMIT_NICE`` (hard too) is 0.
    It may leave ``SCHED_BATCH`` (any process may), which only costs it
    that tiebreak. ``nice`` 0 changes nothing.
    """
    if nice <= 0:
        return
    os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
    # 20 - RLIMIT_NICE is the lowest nice value a process may set itself to
    # without CAP_SYS_NICE: at 0 it can never lower its nice value.
    resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def apply_resource_limits(limits: ResourceLimits) -> dict[str, list[int]]:
    """Apply the rlimit-backed caps to this process; return what is now in force.

    Hard limits are lowered too, so the worker cannot raise them back. The
    CPU hard limit sits a little above the soft one: the soft limit delivers
    SIGXCPU (which the supervisor reports as ``cpu cap exceeded``), the hard
    one SIGKILLs a worker that ignores it. Core dumps are disabled: a crashing
    worker must not leave multi-GB files behind.
    """
    wanted: dict[int, tuple[int, int]] = {resource.RLIMIT_CORE: (0, 0)}
    if limits.cpu_seconds is not None:
        wanted[resource.RLIMIT_CPU] = (limits.cpu_seconds, limits.cpu_seconds + _CPU_HARD_GRACE_S)
    if limits.address_space_mb is not None:
        size = limits.address_space_mb * 1024 * 1024
        wanted[resource.RLIMIT_AS] = (size, size)
    if limits.file_size_mb is not None:
        size = limits.file_size_mb * 1024 * 1024
        wanted[resource.RLIMIT_FSIZE] = (size, size)
    if limits.open_files is not None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n = limits.open_files if hard == resource.RLIM_INFINITY else min(limits.open_files, hard)
        wanted[resource.RLIMIT_NOFILE] = (n, n)
    for which, (soft, hard) in wanted.items():
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            hard = min(hard, current_hard)
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))
    names = {
        resource.RLIMIT_CORE: "RLIMIT_CORE",
        resource.RLIMIT_CPU: "RLIMIT_CPU",
        resource.RLIMIT_AS: "RLIMIT_AS",
        resource.RLIMIT_NOFILE: "RLIMIT_NOFILE",
        resource.RLIMIT_FSIZE: "RLIMIT_FSIZE",
    }
    return {names[which]: list(resource.getrlimit(which)) for which in wanted}
