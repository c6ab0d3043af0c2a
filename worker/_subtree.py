"""The processes below this one: list them, reap adopted orphans, kill them all (S-SEC-5).

Workers and the zygote are child subreapers: a descendant whose parent dies
(``setsid``, ``nohup``, a double fork) is re-parented to the nearest of them
rather than to init, so "everything below this process" stays findable by
walking children, and nothing a model starts can slip out of the tree while
its worker lives.

Races handled here:
- A process may fork while we kill its tree. Killing goes round by round:
  each round SIGKILLs every process found below us and reaps what became our
  zombie; children re-parented to us meanwhile are found by the next round.
  It ends when no child is left (or at a deadline, for a fork bomb that a
  process cap did not stop).
- We never reap a child we did not adopt (``keep``): its owner waits for it
  by pid, and taking its status away would make that wait fail.
- A descendant that made itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``,
  or an exec of a file it may not read) is hidden from a worker's ``/proc``
  (``hidepid=ptraceable``, no capability), and so is the walk below it: a
  chain of them cost a round each, and 240 outlived the worker's one-second
  way out when its zygote and supervisor were SIGKILLed together (red team
  S). Where the worker's Landlock domain scopes signals (``scope_signals_to_tree``),
  ``kill(-1)`` reaches exactly its own tree, hidden or not, however deep,
  and is sent first; its own process is never among them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection

__all__ = [
    "children",
    "descendants",
    "kill_descendants",
    "reap_adopted",
    "scope_signals_to_tree",
    "signal_subtrees",
]

#: Set once this process is in a Landlock domain that scopes signals: then every
#: process it may signal is in its own tree (see the module docstring).
_tree_scoped = False


def scope_signals_to_tree() -> None:
    """Say that this process's signals now reach its own tree alone (Landlock's signal scope)."""
    global _tree_scoped
    _tree_scoped = True


def children(pid: int | None = None) -> list[int]:
    """Direct children of ``pid`` (default: this process), zombies included."""
    pid = os.getpid() if pid is None else pid
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Every process below ``pid``, parents before their children."""
    found: list[int] = []
    frontier = children(pid)
    while frontier:
        found.extend(frontier)
        frontier = [c for p in frontier for c in children(p)]
    return found


def reap_adopted(keep: Collection[int] = ()) -> list[int]:
    """Reap every exited child of ours not in ``keep`` (adopted orphans); their pids."""
    reaped = []
    for child in children():
        if child in keep:
            continue
        with contextlib.suppress(ChildProcessError):
            pid, _ = os.waitpid(child, os.WNOHANG)
            if pid:
                reaped.append(pid)
    return reaped


def signal_subtrees(keep: Collection[int] = (), sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to each child of ours not in ``keep``, and to everything below it.

    One round, without waiting: what is re-parented to us as these die is
    found by the next call (the zygote makes one per SIGCHLD).
    """
    signalled = 0
    for child in children():
        if child in keep:
            continue
        for pid in (child, *descendants(child)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                signalled += 1
    return signalled


def kill_descendants(
    keep: Collection[int] = (), *, deadline_s: float = 5.0, poll_s: float = 0.005
) -> int:
    """SIGKILL everything below this process except ``keep`` and their trees; reap it.

    Returns how many processes were signalled. Blocks (briefly): for the
    zygote's loop and a worker's way out, never for an event loop's thread.
    """
    deadline = time.monotonic() + deadline_s
    signalled = 0
    while any(c not in keep for c in children()):
        if _tree_scoped and not keep:
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        signalled += signal_subtrees(keep)
        time.sleep(poll_s)
        reap_adopted(keep)
        if time.monotonic() > deadline:
            break
    return signalled
