"""Background shell commands of a root session, in the shared task registry (S-RUN-6).

``Bash`` with ``run_in_background`` starts the command in its own process
group, its output going straight to the task's ``task.output``; the call
returns the task id at once. The command is a ``local_bash`` task beside the
subagents: ``TaskOutput`` reads it, ``TaskStop`` (and ``subvisor stop``)
stops it, and when it ends the parent gets one ``<task-notification>``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import trio

from protocol import ToolCall, ToolSpec
from worker.tools import BashInput, ToolContext, ToolOutput, get_local_tool, run_tool
from worker.tools._bash import shell_argv
from worker.tools._process import with_parent_death_signal

from ..kernel import reap_child
from ..state._task_record import TaskRecord, TaskUsage, new_task_id
from ..state._tasks import TaskError, TaskRegistry
from ._notifications import Command, CommandQueue, build_task_notification, format_task_output
from ._subagents import BackgroundSpawner

__all__ = ["BashWithBackground", "TaskListTool", "TaskOutputTool", "TaskStopTool"]

_TERM_GRACE_S = 2.0


class BashWithBackground:
    """The root's ``Bash``: the local tool, plus ``run_in_background``."""

    aliases: tuple[str, ...] = ("bash",)
    concurrency_safe = False

    def __init__(
        self,
        context: ToolContext,
        *,
        registry: TaskRegistry,
        queue: CommandQueue,
        spawn: BackgroundSpawner,
        session_id: str,
    ) -> None:
        """``queue`` is the session's: a command's end is its notification there."""
        self._context = context
        self._registry = registry
        self._queue = queue
        self._spawn = spawn
        self._session_id = session_id
        local = get_local_tool("Bash")
        assert local is not None
        schema = dict(local.spec.input_schema)
        schema["properties"] = {
            **schema.get("properties", {}),
            "run_in_background": {
                "type": "boolean",
                "description": "Run the command in the background and return at once with "
                "its task id; you are notified when it ends. Read its output with "
                "TaskOutput, stop it with TaskStop.",
            },
        }
        self.spec = ToolSpec(name="Bash", description=local.spec.description, input_schema=schema)

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Run in the foreground (the local tool) or start a background task."""
        raw = dict(call.input)
        background = raw.pop("run_in_background", False)
        if background is not True:
            return await run_tool("Bash", raw, self._context)
        try:
            params = BashInput.model_validate(raw)
        except ValueError as exc:
            return ToolOutput(f"Error: invalid Bash input: {exc}", is_error=True)
        record = await self._start(params.command, params.description, call.id)
        return ToolOutput(
            f"Command running in the background with task id {record.task_id}. Its output "
            f"goes to {record.log_file}; read it with TaskOutput, stop it with TaskStop. You "
            "will be notified when it ends."
        )

    async def _start(self, command: str, description: str | None, tool_use_id: str) -> TaskRecord:
        registry = self._registry
        record = registry.register(
            TaskRecord(
                task_id=new_task_id("local_bash"),
                kind="local_bash",
                parent_session_id=self._session_id,
                child_session_id=None,
                description=description or command[:80],
                subagent_type=None,
                prompt=command,
                model=None,
                status="pending",
                background=True,
                tool_use_id=tool_use_id,
                result=None,
                error=None,
                usage=TaskUsage(),
                created_at=time.time(),
                ended_at=None,
            )
        )
        process = _start_in_own_group(command, self._context.cwd, record.log_file)
        pidfd = os.pidfd_open(process.pid)
        registry.update(record.task_id, status="running")
        stopped: list[str] = []

        async def stop(reason: str) -> None:
            stopped.append(reason)
            _signal_group(process.pid, signal.SIGTERM)
            with trio.move_on_after(_TERM_GRACE_S):
                await registry.wait(record.task_id)
            _signal_group(process.pid, signal.SIGKILL)

        registry.set_stopper(record.task_id, stop)
        self._spawn(self._watch, record, process, pidfd, stopped)
        return record

    async def _watch(
        self, record: TaskRecord, process: subprocess.Popen[bytes], pidfd: int, stopped: list[str]
    ) -> None:
        status = await reap_child(process.pid, pidfd)
        process.returncode = -1  # reaped here; keep Popen from waiting on it again
        # Whatever the command left in its group goes with it.
        _signal_group(process.pid, signal.SIGKILL)
        usage = TaskUsage(cpu_seconds=status.cpu_seconds, peak_rss_bytes=status.max_rss_bytes)
        registry = self._registry
        if stopped:
            final = registry.finish(record.task_id, "killed", error=stopped[0], usage=usage)
        elif status.exit_code == 0:
            final = registry.finish(
                record.task_id, "completed", result=_tail(record.log_file), usage=usage
            )
        else:
            why = (
                f"exit code {status.exit_code}"
                if status.exit_code is not None
                else f"killed by signal {status.signal}"
            )
            final = registry.finish(
                record.task_id, "failed", error=f"{why}\n{_tail(record.log_file)}", usage=usage
            )
        if registry.mark_notified(final.task_id):
            self._queue.enqueue(
                Command(
                    kind="task-notification",
                    priority="next",
                    text=build_task_notification(final),
                    task_id=final.task_id,
                )
            )


def _start_in_own_group(command: str, cwd: Path, log_file: str) -> subprocess.Popen[bytes]:
    # Synchronous, from the event loop's thread, so the parent-death signal is
    # tied to a thread that lives as long as the supervisor (see
    # worker.tools._process for why not a trio worker thread).
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            with_parent_death_signal(shell_argv(command)),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return text if size <= limit else f"[... {size - limit} bytes before]\n{text}"


class _TaskIdTool:
    """Base of the tools that take one ``task_id``."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = True
    name = ""
    description = ""

    def __init__(self, registry: TaskRegistry) -> None:
        self._registry = registry
        self.spec = ToolSpec(
            name=self.name,
            description=self.description,
            input_schema={
                "type": "object",
                "properties": {"task_id": {"type": "string", "description": "The task id."}},
                "required": ["task_id"],
                "additionalProperties": False,
            },
        )

    def _task_id(self, call: ToolCall) -> str | None:
        value: Any = call.input.get("task_id")
        return value if isinstance(value, str) and value else None


class TaskOutputTool(_TaskIdTool):
    """Read a background task's output so far (agents and shell commands alike)."""

    name = "TaskOutput"
    description = (
        "Read the output of a background task (an agent or a shell command) by its id: "
        "the final result if it has ended, else what it has written so far."
    )

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Return the task's status and output."""
        task_id = self._task_id(call)
        record = self._registry.get(task_id) if task_id else None
        if record is None:
            return ToolOutput(f"Error: no task {task_id!r}.", is_error=True)
        try:
            output = self._registry.read_output(record.task_id)
        except TaskError as exc:
            return ToolOutput(f"Error: {exc}", is_error=True)
        return ToolOutput(format_task_output(record, output))


class TaskStopTool(_TaskIdTool):
    """Stop a background task (an agent or a shell command)."""

    name = "TaskStop"
    description = "Stop a running background task (an agent or a shell command) by its id."

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Stop the task; report how it ended."""
        task_id = self._task_id(call)
        if task_id is None:
            return ToolOutput("Error: task_id is required.", is_error=True)
        try:
            record = await self._registry.stop(task_id)
        except TaskError as exc:
            return ToolOutput(f"Error: {exc}", is_error=True)
        return ToolOutput(f"task {record.task_id} {record.status}")


class TaskListTool:
    """List this session's background work: agents and shell commands (S-RUN-6)."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = True

    def __init__(self, registry: TaskRegistry, session_id: str) -> None:
        self._registry = registry
        self._session_id = session_id
        self.spec = ToolSpec(
            name="TaskList",
            description="List the tasks of this session (agents and background shell "
            "commands) with their ids and status.",
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        )

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """One line per task."""
        records = self._registry.list(self._session_id)
        if not records:
            return ToolOutput("No tasks in this session.")
        lines = [
            f"{r.task_id} [{r.kind}] {r.status}"
            + (" (background)" if r.background else "")
            + f": {r.description}"
            for r in records
        ]
        return ToolOutput("\n".join(lines))
