"""The kernel's exceptions; each message says what happened and what to do.

``SubvisorError``, their root, lives in ``supervisor._errors`` (which draws the whole tree).
"""

from __future__ import annotations

import errno
import sqlite3
from typing import TYPE_CHECKING

from .._errors import SubvisorError
from ._exit import WorkerExit

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "FleetCapacityError",
    "FleetExhaustedError",
    "NestedSupervisorError",
    "PlacementError",
    "SpawnError",
    "SubvisorError",
    "UnplaceableError",
    "WorkerExitedError",
    "WorkerRequestError",
    "disk_full_error",
    "find_exception",
    "validation_problems",
]


class SpawnError(SubvisorError):
    """A worker could not be started (fork failed, zygote gone, handshake failed)."""


class FleetCapacityError(SpawnError):
    """No worker slot became free within the spawn timeout."""


class FleetExhaustedError(SpawnError):
    """The supervisor already started as many workers as ``max_total_workers`` allows."""


class PlacementError(SpawnError):
    """Workers cannot be placed where the settings say: no Ray, no cluster, no node host."""


class UnplaceableError(PlacementError):
    """A worker claims more (``cpus``, ``memory_mb``) than any node it may run on has."""


class NestedSupervisorError(SubvisorError):
    """A supervisor was started inside a worker: delegation is one level only."""


class WorkerExitedError(SubvisorError):
    """The worker ended while something was still waiting on it."""

    def __init__(self, exit: WorkerExit) -> None:
        super().__init__(f"worker {exit.worker_id} ended: {exit.reason}")
        self.exit = exit


class WorkerRequestError(SubvisorError):
    """The worker answered a request with an error."""

    def __init__(self, method: str, code: str, message: str) -> None:
        super().__init__(f"{method} failed in the worker ({code}): {message}")
        self.method = method
        self.code = code
        self.message = message


def find_exception(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` itself or the first exception of type ``kind`` inside its groups, if any."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = find_exception(inner, kind)
            if found is not None:
                return found
    return None


def disk_full_error(exc: BaseException) -> BaseException | None:
    """A full disk's error (``ENOSPC``, SQLite's ``SQLITE_FULL``) in ``exc``, its groups or
    what it was raised while handling; None if there is none."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        if getattr(current, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def validation_problems(exc: ValidationError) -> str:
    """A pydantic error on one line: ``key.path: message; ...``."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'value'}: {error['msg']}"
        for error in exc.errors()
    )
