"""Is a process inside a subvisor worker tree? The marker behind S-SEC-7 and S-SEC-2.

A process is in a worker tree when it, or any of its ancestors, is named
``subvisor-worker`` or ``subvisor-zygote`` (see ``protocol._process_names``
for why a worker's descendants cannot shed that). The environment variable
``SUBVISOR_TREE`` is not consulted: anything a worker starts can unset it.

Races: a process may exit while we walk its ancestry; a vanished link ends
the walk, which is then answered from what was seen. The control channel
asks about a peer that is still connected to it, so its pid is live.
"""

from __future__ import annotations

import os

from protocol import WORKER_PROCESS_NAME, ZYGOTE_PROCESS_NAME

from ._environment import TREE_ENV
from ._errors import NestedSupervisorError

__all__ = [
    "TREE_PROCESS_NAMES",
    "in_worker_tree",
    "refuse_inside_worker_tree",
    "worker_tree_ancestor",
]

TREE_PROCESS_NAMES = frozenset({WORKER_PROCESS_NAME, ZYGOTE_PROCESS_NAME})
# Deeper chains than this are not real process trees: stop rather than loop.
_MAX_DEPTH = 4096


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


def worker_tree_ancestor(pid: int | None = None) -> int | None:
    """The pid of the nearest subvisor worker or zygote at or above ``pid`` (default: us)."""
    current = os.getpid() if pid is None else pid
    for _ in range(_MAX_DEPTH):
        if current <= 0:
            return None
        stat = _stat(current)
        if stat is None:
            return None
        comm, ppid = stat
        if comm in TREE_PROCESS_NAMES:
            return current
        current = ppid
    return None


def in_worker_tree(pid: int | None = None) -> bool:
    """True if ``pid`` (default: this process) runs inside a subvisor worker tree."""
    return worker_tree_ancestor(pid) is not None


def refuse_inside_worker_tree() -> None:
    """Raise ``NestedSupervisorError`` if this process runs inside a worker tree (S-SEC-7)."""
    ancestor = worker_tree_ancestor()
    if ancestor is None and TREE_ENV not in os.environ:
        return
    where = f"process {ancestor}" if ancestor is not None else os.environ[TREE_ENV]
    raise NestedSupervisorError(
        f"this process runs inside a subvisor worker tree ({where}): "
        "a worker cannot start a supervisor (delegation is one level deep)"
    )
