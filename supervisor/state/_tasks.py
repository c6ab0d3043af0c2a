"""The task registry: background agents and background Bash commands (S-RUN-1, S-RUN-6).

Every task has a record (``TaskRecord``) in three places that agree: the
registry's memory (this process), the session store (other processes,
later runs), and ``metadata.json`` in its output dir (people and scripts).
Its output dir also holds ``task.output`` (the running log) and
``output.txt`` (the final result or error, written once when the task ends,
so it is complete once the record says the task ended).

Invariants:

- A task ends once: the first ``finish`` (or ``stop``) decides its terminal
  status; later ones return the record unchanged.
- ``mark_notified`` answers ``True`` once per task, across registries and
  processes (the flag lives in the store, S-NOTE-3).
- ``update`` never moves a task to a terminal status; only ``finish`` does,
  so ``wait`` is always woken.
"""

from __future__ import annotations

import builtins
import collections
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from ..files._atomic_write import write_all
from ..files._ext4_topdir import mark_top_directory
from ..kernel import SubvisorError
from ._paths import agent_output_dir, agents_dir
from ._store import SessionStore
from ._task_record import (
    RESULT_FILE,
    TERMINAL_STATUSES,
    TaskKind,
    TaskRecord,
    TaskStatus,
    TaskUsage,
    write_metadata,
)

__all__ = [
    "STOPPED_BY_REQUEST",
    "DuplicateTaskError",
    "TaskError",
    "TaskNotRunningError",
    "TaskRegistry",
    "TaskStopper",
    "UnknownTaskError",
]

#: How ``TaskRegistry.stop`` ends a running task; it gets the reason to record.
TaskStopper = Callable[[str], Awaitable[None]]

#: The error of a task ended by ``TaskRegistry.stop``.
STOPPED_BY_REQUEST = "stopped by request"


class TaskError(SubvisorError):
    """A task registry operation cannot be done."""


class UnknownTaskError(TaskError, LookupError):
    """No task with that id is known."""


class DuplicateTaskError(TaskError):
    """A task with that id is already registered."""


class TaskNotRunningError(TaskError):
    """The task has already ended (or cannot be stopped from here)."""


@dataclass
class _Entry:
    record: TaskRecord
    ended: trio.Event = field(default_factory=trio.Event)
    stopper: TaskStopper | None = None
    stopping: bool = False


class TaskRegistry:
    """This process's tasks, persisted to the store and to each task's output dir.

    One list / output / stop interface for agents and background Bash (S-RUN-6).
    Tasks of other processes or earlier runs are readable (``get``,
    ``read_output``, ``mark_notified``) through the store.
    """

    def __init__(self, store: SessionStore, home: Path) -> None:
        self._store = store
        self._home = home
        self._entries: dict[str, _Entry] = {}
        self._launched: collections.Counter[tuple[str, TaskKind]] = collections.Counter()
        # Each session's dir then starts in a lightly used ext4 block group, where
        # creating its tasks' files is usually cheap (see files._ext4_topdir).
        agents = agents_dir(home)
        agents.mkdir(parents=True, exist_ok=True)
        mark_top_directory(agents)

    def register(self, record: TaskRecord) -> TaskRecord:
        """Add a new pending or running task; creates its output dir and files (S-RUN-1).

        Fills in ``output_dir`` (``home/agents/<parent>/<task_id>``) and
        ``output_file`` when they are empty. Raises ``DuplicateTaskError`` for
        an id already registered or stored.
        """
        if record.is_terminal:
            raise TaskError(
                f"task {record.task_id!r} cannot be registered as {record.status}:"
                " register it pending or running, then finish it"
            )
        if record.task_id in self._entries or self._store.get_task(record.task_id) is not None:
            raise DuplicateTaskError(f"task {record.task_id!r} is already registered")
        output_dir = record.output_dir or str(
            agent_output_dir(self._home, record.parent_session_id, record.task_id)
        )
        record = record.model_copy(
            update={
                "output_dir": output_dir,
                "output_file": record.output_file or os.path.join(output_dir, RESULT_FILE),
            }
        )
        _make_dir(output_dir)
        _write_file(record.output_file, "")
        _write_file(record.log_file, "")
        self._persist(record)
        self._entries[record.task_id] = _Entry(record)
        self._launched[record.parent_session_id, record.kind] += 1
        return record

    def get(self, task_id: str) -> TaskRecord | None:
        """The task's current record: this process's copy, else the store's, else ``None``."""
        entry = self._entries.get(task_id)
        return entry.record if entry is not None else self._store.get_task(task_id)

    def list(self, parent_session_id: str | None = None) -> builtins.list[TaskRecord]:
        """This process's tasks (of one parent session, if given), in creation order."""
        return [
            entry.record
            for entry in self._entries.values()
            if parent_session_id is None or entry.record.parent_session_id == parent_session_id
        ]

    def count(self, parent_session_id: str, kind: TaskKind) -> int:
        """How many tasks of ``kind`` this process registered for one parent session."""
        return self._launched[parent_session_id, kind]

    def running(self) -> builtins.list[TaskRecord]:
        """This process's tasks that have not ended yet (pending or running)."""
        return [entry.record for entry in self._entries.values() if not entry.record.is_terminal]

    def update(self, task_id: str, /, **changes: Any) -> TaskRecord:
        """Change fields of a live task (validated), rewriting metadata.json and the store.

        ``task_id`` cannot change, and a terminal ``status`` is refused: use
        ``finish``.
        """
        entry = self._entry(task_id)
        if "task_id" in changes and changes["task_id"] != task_id:
            raise TaskError(f"task {task_id!r} cannot be renamed")
        if changes.get("status") in TERMINAL_STATUSES:
            raise TaskError(
                f"update cannot end task {task_id!r}: call finish(task_id, status) instead"
            )
        if entry.record.is_terminal and "status" in changes:
            raise TaskNotRunningError(
                f"task {task_id!r} already {entry.record.status}; a task ends once"
                " and cannot change its status again"
            )
        record = TaskRecord.model_validate({**entry.record.model_dump(), **changes})
        self._persist(record)
        entry.record = record
        return record

    def append_output(self, task_id: str, text: str) -> None:
        """Append to the task's running log, ``task.output``."""
        record = self._entry(task_id).record
        fd = os.open(record.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            write_all(fd, text.encode("utf-8"))
        finally:
            os.close(fd)

    def finish(
        self,
        task_id: str,
        status: TaskStatus,
        *,
        result: str | None = None,
        error: str | None = None,
        usage: TaskUsage | None = None,
        worker_exit: str | None = None,
    ) -> TaskRecord:
        """End a task: write ``output.txt`` (the result, else the error), persist, wake waiters.

        A task ends once: finishing an already ended task returns its record
        unchanged. ``usage.duration_ms``, when zero, becomes the task's wall time.
        """
        if status not in TERMINAL_STATUSES:
            raise TaskError(
                "finish needs a terminal status (completed, failed, killed, interrupted),"
                f" not {status!r}"
            )
        entry = self._entry(task_id)
        if entry.record.is_terminal:
            return entry.record
        ended_at = time.time()
        usage = usage if usage is not None else entry.record.usage
        if usage.duration_ms == 0:
            wall_ms = round((ended_at - entry.record.created_at) * 1000)
            usage = usage.model_copy(update={"duration_ms": max(wall_ms, 0)})
        record = entry.record.model_copy(
            update={
                "status": status,
                "result": result,
                "error": error,
                "usage": usage,
                "worker_exit": worker_exit,
                "ended_at": ended_at,
            }
        )
        # Written in place: the file is empty until now, like a log not yet
        # written, and the ended record is published only after it.
        _write_file(record.output_file, result if result is not None else (error or ""))
        self._persist(record)
        entry.record = record
        entry.stopper = None
        entry.ended.set()
        return record

    def mark_notified(self, task_id: str) -> bool:
        """Claim the task's one completion notification: ``True`` exactly once (S-NOTE-3).

        The claim is made in the store, so it holds across registries and
        processes.
        """
        entry = self._entries.get(task_id)
        if entry is None and self._store.get_task(task_id) is None:
            raise _unknown_task(task_id)
        if not self._store.claim_notification(task_id):
            return False
        if entry is not None:
            entry.record = entry.record.model_copy(update={"notified": True})
            record: TaskRecord | None = entry.record
        else:
            record = self._store.get_task(task_id)
        # A task of another machine's home has no output dir here to update.
        if record is not None and os.path.isdir(record.output_dir):
            write_metadata(record)
        return True

    def set_stopper(self, task_id: str, stopper: TaskStopper) -> None:
        """Set how ``stop`` ends this task (cancel the agent's worker, kill the command).

        The stopper should return once the task has stopped; if its runner
        calls ``finish`` before then, that finish (with its usage) wins. On a
        task that has already ended this does nothing.
        """
        entry = self._entry(task_id)
        if not entry.record.is_terminal:
            entry.stopper = stopper

    async def stop(self, task_id: str, reason: str = STOPPED_BY_REQUEST) -> TaskRecord:
        """Stop a task and return its final record (S-RUN-6).

        Calls the task's stopper with ``reason``; a task the stopper left
        unfinished ends as ``killed`` with ``reason`` as its error. A pending
        task without a stopper simply ends as ``killed``. Raises
        ``UnknownTaskError`` or ``TaskNotRunningError`` with a message saying why.
        """
        entry = self._entries.get(task_id)
        if entry is None:
            stored = self._store.get_task(task_id)
            if stored is None:
                raise _unknown_task(task_id)
            if stored.is_terminal:
                raise _not_running(stored)
            raise TaskNotRunningError(
                f"task {task_id!r} belongs to another subvisor process (or one that ended);"
                " stop it from the process that runs it"
            )
        if entry.record.is_terminal:
            raise _not_running(entry.record)
        if entry.stopping:
            # A second stop waits for the first one rather than calling the stopper again.
            await entry.ended.wait()
            return entry.record
        stopper = entry.stopper
        if stopper is None:
            if entry.record.status == "running":
                raise TaskNotRunningError(
                    f"task {task_id!r} is still starting and cannot be stopped yet;"
                    " try again in a moment"
                )
            await trio.lowlevel.checkpoint()
            return self.finish(task_id, "killed", error=reason)
        entry.stopping = True
        try:
            await stopper(reason)
        finally:
            entry.stopping = False
        return self.finish(task_id, "killed", error=reason)

    def read_output(self, task_id: str) -> str:
        """``output.txt`` of an ended task, else its running log ``task.output``."""
        record = self.get(task_id)
        if record is None:
            raise _unknown_task(task_id)
        path = Path(record.output_file if record.is_terminal else record.log_file)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError as error:
            raise TaskError(f"output of task {task_id!r} is missing: {path}") from error

    async def wait(self, task_id: str) -> TaskRecord:
        """Wait until this process's task ``task_id`` has ended; returns its final record."""
        entry = self._entry(task_id)
        await entry.ended.wait()
        return entry.record

    def _entry(self, task_id: str) -> _Entry:
        entry = self._entries.get(task_id)
        if entry is None:
            raise _unknown_task(task_id)
        return entry

    def _persist(self, record: TaskRecord) -> None:
        write_metadata(record)
        self._store.save_task(record)


# Plain strings and os calls, not pathlib: these run for every task, on the
# supervisor's hot path.


def _make_dir(path: str) -> None:
    """``mkdir -p path``: one ``mkdir`` when its parent exists (the usual case)."""
    try:
        os.mkdir(path)
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def _write_file(path: str, text: str) -> None:
    """Set a file's content to ``text`` in place (creating it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        write_all(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def _unknown_task(task_id: str) -> UnknownTaskError:
    return UnknownTaskError(f"no task {task_id!r}: see `subvisor ps` for the known task ids")


def _not_running(record: TaskRecord) -> TaskNotRunningError:
    return TaskNotRunningError(
        f"task {record.task_id!r} already {record.status}; there is nothing to stop"
    )
