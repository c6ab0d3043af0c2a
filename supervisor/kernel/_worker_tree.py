"""Is a process inside a subvisor worker tree? The marker behind S-SEC-7 and S-SEC-2.

A process is in a worker tree when it, or any of its ancestors, is named
``subvisor-worker`` or ``subvisor-zygote`` (see ``protocol._process_names``
for why a worker's descendants cannot shed that). The environment variable
``SUBVISOR_TREE`` is not consulted: anything a worker starts can unset it.

The walk starts from the pid ``/proc/self`` names, not ``os.getpid()``: in
a PID namespace of its own a process is pid 1 there, and ``/proc/1`` (of
the host's ``/proc``) is the host's init, which no worker is above. Walking
in ``/proc``'s namespace sees every ancestor that namespace sees, the worker
included, unless ``/proc`` itself was mounted inside the worker's tree, which
takes a user namespace that the worker's seccomp filter refuses. Where
``/proc`` does not name us at all (a PID namespace whose processes it cannot
see), nothing can be proven and the process counts as inside.

Hidden links: in a worker, ``/proc`` shows only what the process may
ptrace-read (``hidepid=ptraceable``, S-SEC-1), and the worker itself, being
non-dumpable, is not among that: the walk from its Bash stops below it. A
link that ``/proc`` does not show but that exists (``kill(pid, 0)`` does
not answer ``ESRCH``) is hidden, not gone: the walk ends there, inside, and
names it. Never "outside" for what could not be seen.

Races: a process may exit while we walk its ancestry, and its children are
re-parented to the nearest child subreaper above it (a worker is one). A
vanished link (or the process asked about) therefore starts the walk again
from the start, which then climbs through the new parent; a walk that still
cannot finish after ``_WALKS`` tries, or that passes ``_MAX_DEPTH``, counts
as inside (``UNSETTLED``): a tree killing its own processes while it is
checked must not pass for one outside. (Answered from what was seen, a walk
that lost its way between a process and its worker said "outside", and the
control channel admitted a subagent.)
"""

from __future__ import annotations

import os

from protocol import SUPERVISOR_PROCESS_NAME, WORKER_PROCESS_NAME, ZYGOTE_PROCESS_NAME

from ._environment import TREE_ENV
from ._errors import NestedSupervisorError

__all__ = [
    "TREE_PROCESS_NAMES",
    "UNSETTLED",
    "in_worker_tree",
    "inside_worker_tree_reason",
    "process_exists",
    "refuse_inside_worker_tree",
    "supervisor_ancestor",
    "worker_tree_ancestor",
]

TREE_PROCESS_NAMES = frozenset({WORKER_PROCESS_NAME, ZYGOTE_PROCESS_NAME})
# Deeper chains than this are not real process trees: stop rather than loop.
_MAX_DEPTH = 4096
#: Walks of one ancestry before it counts as unsettled (each vanished link costs one).
_WALKS = 8


def _stat(pid: int) -> tuple[str, int] | None:
    """``(comm, ppid)`` of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: it runs to the last ')'.
    open_paren, close_paren = raw.find(b"("), raw.rfind(b")")
    if open_paren < 0 or close_paren < 0:
        return None
    comm = raw[open_paren + 1 : close_paren].decode("utf-8", "replace")
    fields = raw[close_paren + 2 :].split()
    return comm, int(fields[1])


def process_exists(pid: int) -> bool:
    """True if process ``pid`` exists (a zombie too), ours or not, shown in ``/proc`` or not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: there, but not ours to signal
    return True


def _hidden(pid: int) -> bool:
    """True if ``pid`` exists but ``/proc`` does not show it (``hidepid``)."""
    return not os.path.exists(f"/proc/{pid}") and process_exists(pid)


def _proc_pid() -> int | None:
    """This process's pid as ``/proc`` names it; None if ``/proc`` does not name it."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return None


#: ``worker_tree_ancestor``'s answer where no walk could finish (see Races):
#: no process has it, and it is not None, so it counts as inside.
UNSETTLED = -1


def worker_tree_ancestor(pid: int | None = None) -> int | None:
    """The pid of the nearest subvisor worker or zygote at or above ``pid`` (default: us),
    or of the nearest process there that ``/proc`` hides (see Hidden links).

    Pids are those of ``/proc``'s namespace; where ``/proc`` does not name this
    process, None (``inside_worker_tree_reason`` tells that case apart).
    ``UNSETTLED`` where the ancestry kept changing, ran too deep, or ``pid``
    is gone (see Races).
    """
    start = _proc_pid() if pid is None else pid
    if start is None:
        return None
    return _nearest_named(start, TREE_PROCESS_NAMES, include_start=True)


def supervisor_ancestor(pid: int) -> int | None:
    """The pid of the nearest supervisor strictly above ``pid``; None if none (S-SEC-2).

    A supervisor names itself ``SUPERVISOR_PROCESS_NAME`` while it runs
    (``supervisor.kernel._supervisor_mark``), so whatever it started, its MCP
    servers, gateway and a root agent's tools, has one above it. ``pid`` itself
    is not looked at: a supervisor is its user's. ``UNSETTLED`` where the
    ancestry kept changing, ran too deep, or ``pid`` is gone (see Races).
    """
    return _nearest_named(pid, frozenset({SUPERVISOR_PROCESS_NAME}), include_start=False)


def _nearest_named(start: int, names: frozenset[str], *, include_start: bool) -> int | None:
    """The nearest process named one of ``names`` above (or at) ``start``; see Races."""
    for _ in range(_WALKS):
        current, above_start = start, False
        for _ in range(_MAX_DEPTH):
            if current <= 0:
                return None
            stat = _stat(current)
            if stat is None:
                if _hidden(current):
                    return current  # a hidden link counts as a worker (see Hidden links)
                break  # gone under us: climb again from the start
            comm, ppid = stat
            if comm in names and (above_start or include_start):
                return current
            current, above_start = ppid, True
        else:
            return UNSETTLED  # deeper than any real process tree
    return UNSETTLED


def in_worker_tree(pid: int | None = None) -> bool:
    """True if ``pid`` (default: this process) runs inside a subvisor worker tree.

    Also true when its ancestry could not be settled, or ``pid`` is gone.
    """
    return worker_tree_ancestor(pid) is not None


def inside_worker_tree_reason() -> str | None:
    """One line on why this process counts as inside a worker tree; None if it is not."""
    pid = _proc_pid()
    if pid is None:
        return (
            f"this process (pid {os.getpid()} in its own PID namespace) is not named by /proc, "
            "so it cannot be shown to be outside a subvisor worker tree"
        )
    ancestor = worker_tree_ancestor(pid)
    if ancestor == UNSETTLED:
        return (
            f"the ancestry of this process (pid {pid}) kept changing while it was checked, "
            "so it cannot be shown to be outside a subvisor worker tree"
        )
    if ancestor is None and TREE_ENV not in os.environ:
        return None
    where = f"process {ancestor}" if ancestor is not None else os.environ[TREE_ENV]
    if ancestor is not None and _hidden(ancestor):
        where += ", which /proc hides from it as a worker is hidden from its tree"
    return f"this process runs inside a subvisor worker tree ({where})"


def refuse_inside_worker_tree() -> None:
    """Raise ``NestedSupervisorError`` if this process runs inside a worker tree (S-SEC-7)."""
    reason = inside_worker_tree_reason()
    if reason is not None:
        raise NestedSupervisorError(
            f"{reason}: a worker cannot start a supervisor (delegation is one level deep)"
        )
