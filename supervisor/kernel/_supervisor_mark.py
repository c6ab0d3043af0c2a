"""A supervisor's name: ``subvisor-sup`` while it runs, the marker of what it started (S-SEC-2).

Every process that acts as a supervisor (``subvisor run``, ``mcp``, ``workflow
run``, ``stress``; the library's ``Supervisor`` and ``Subvisor`` while open)
sets its ``comm`` to ``SUPERVISOR_PROCESS_NAME``. What such a process starts
outside every worker tree (the stdio MCP servers it lends its agents, its
gateway, a root agent's Bash) acts for a model, not for the user: the control
channel and ``subvisor mcp --http`` refuse a peer with a supervisor above it
(``supervisor_ancestor``), in any session, not only their own.

Invariants:

- Nothing below a supervisor can take the name off it: ``/proc/PID/comm`` is
  written only from within its own thread group, ``PR_SET_NAME`` names only
  the caller, and a supervisor is not dumpable, so not ptraced.
- ``/proc/self/comm`` names the thread group's leader, the name ``/proc/PID/stat``
  shows, so a supervisor started on another thread marks its process too.
- Counted: a process that opens two fleets (or runs a CLI command in process,
  as tests do) keeps the name until the last one is closed, then gets its own
  name back, so its later children are not taken for a supervisor's.

Limits: a process that double-forks out from under the supervisor (it is no
child subreaper) is re-parented above it and no longer bears the marker; of
what a supervisor starts, only a root agent's unsandboxed Bash can do that on a
model's word, and it already acts with the user's full rights.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from protocol import SUPERVISOR_PROCESS_NAME

__all__ = ["mark_supervisor", "supervisor_marked", "unmark_supervisor"]

_lock = threading.Lock()
_marks = 0
_own_name: bytes | None = None


def _read_comm() -> bytes | None:
    try:
        with open("/proc/self/comm", "rb") as f:
            return f.read().rstrip(b"\n")
    except OSError:
        return None


def _write_comm(name: bytes) -> None:
    # Best effort: without /proc there is no ancestry walk to mislead either.
    with contextlib.suppress(OSError), open("/proc/self/comm", "wb") as f:
        f.write(name[:15])


def mark_supervisor() -> None:
    """Name this process ``SUPERVISOR_PROCESS_NAME`` (counted; see ``unmark_supervisor``)."""
    global _marks, _own_name
    with _lock:
        if _marks == 0:
            _own_name = _read_comm()
        _marks += 1
        _write_comm(SUPERVISOR_PROCESS_NAME.encode())


def unmark_supervisor() -> None:
    """Undo one ``mark_supervisor``; the last gives the process its own name back."""
    global _marks
    with _lock:
        if _marks == 0:
            return
        _marks -= 1
        if _marks == 0 and _own_name is not None and _own_name != SUPERVISOR_PROCESS_NAME.encode():
            _write_comm(_own_name)


@contextlib.contextmanager
def supervisor_marked() -> Iterator[None]:
    """``mark_supervisor`` for the block's duration."""
    mark_supervisor()
    try:
        yield
    finally:
        unmark_supervisor()
