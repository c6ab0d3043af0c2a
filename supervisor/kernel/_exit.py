"""How a worker ended: one ``WorkerExit`` record per worker, classified once."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass

__all__ = ["ExitKind", "ProcessStatus", "WorkerExit", "describe_signal"]


class ExitKind(enum.StrEnum):
    """Why a worker ended, from the supervisor's point of view."""

    EXITED = "exited"
    SIGNALED = "signal"
    MEMORY_CAP = "memory cap exceeded"
    CPU_CAP = "cpu cap exceeded"
    PROCESS_CAP = "process cap exceeded"
    WALL_TIMEOUT = "wall timeout"
    IDLE_WATCHDOG = "idle watchdog"
    PROTOCOL_VIOLATION = "protocol violation"
    EVENT_BUDGET = "event budget exceeded"
    KILLED = "killed"
    LOST = "lost"
    #: Its cluster node (or that node's host) went away with it (S-DIST-2).
    NODE_LOST = "node lost"


@dataclass(frozen=True, slots=True)
class ProcessStatus:
    """What the kernel said when the process was reaped."""

    exit_code: int | None
    signal: int | None
    cpu_seconds: float
    max_rss_bytes: int
    #: Why it ended, when that was decided where it ran (a remote node's host
    #: stopped it for a cap, or its node was lost): an exit kind and reason.
    cause: tuple[ExitKind, str] | None = None


@dataclass(frozen=True, slots=True)
class WorkerExit:
    """The end of one worker: why, how, and what it used."""

    worker_id: str
    pid: int
    kind: ExitKind
    reason: str
    exit_code: int | None
    signal: str | None
    peak_rss_bytes: int
    cpu_seconds: float
    wall_seconds: float
    #: What was disarmed in its writable roots once its tree was gone: hooks
    #: and config of repositories it planted (S-SEC-3), one line each.
    disarmed: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the worker exited with code 0 on its own."""
        return self.kind is ExitKind.EXITED and self.exit_code == 0


def describe_signal(signum: int) -> str:
    """``SIGSEGV (segmentation fault)`` style name of a signal number."""
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"signal {signum}"
    description = signal.strsignal(sig) or ""
    return f"{sig.name} ({description.lower()})" if description else sig.name


def signal_name(signum: int | None) -> str | None:
    """The ``SIGxxx`` name of ``signum``, if any."""
    if signum is None:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
