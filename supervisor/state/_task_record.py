"""What a task is: its record, its usage and the files of its output dir (S-RUN-1).

A task's record lives in three places that agree: the registry's memory,
the session store and ``metadata.json`` in its output dir; this module is
what all three share, below both the store and the registry.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol import SandboxReport

from ..files._atomic_write import write_atomically

__all__ = [
    "LOG_FILE",
    "METADATA_FILE",
    "RESULT_FILE",
    "TERMINAL_STATUSES",
    "TaskKind",
    "TaskRecord",
    "TaskStatus",
    "TaskUsage",
    "new_task_id",
    "write_metadata",
]

#: Where a task is in its life; the last four are terminal. ``killed``: stopped
#: (on request, by a timeout, by Ctrl-C); ``interrupted``: its supervisor died
#: before recording its end, found so by a later start (S-SEC-6).
TaskStatus = Literal["pending", "running", "completed", "failed", "killed", "interrupted"]
#: A subagent, a background Bash command (S-RUN-6), a workflow the root created, or
#: one of its actors (``parent_task_id`` names the workflow).
TaskKind = Literal["local_agent", "local_bash", "workflow", "workflow_actor"]

#: Statuses a task never leaves.
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "killed", "interrupted"})

#: The files of a task's output dir (S-RUN-1): its record, its final output, its running log.
METADATA_FILE = "metadata.json"
RESULT_FILE = "output.txt"
LOG_FILE = "task.output"

_ID_PREFIXES: dict[TaskKind, str] = {
    "local_agent": "agent",
    "local_bash": "bash",
    "workflow": "wf",
    "workflow_actor": "actor",
}


class TaskUsage(BaseModel):
    """What a task consumed: tokens, calls, time, CPU and memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    duration_ms: int = 0
    cpu_seconds: float = 0.0
    peak_rss_bytes: int = 0

    @property
    def total_tokens(self) -> int:
        """Input, output and cache tokens together."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )


class TaskRecord(BaseModel):
    """One task: a subagent (``local_agent``), a background command (``local_bash``), a
    workflow the root created (``workflow``) or one of its actors (``workflow_actor``).

    ``task_id`` is the agentId for agents. ``output_dir`` and ``output_file``
    may be left empty: ``TaskRegistry.register`` fills them in (S-RUN-1).
    A stored record may still carry ``generation`` (a branch number no code
    ever moved); it is dropped on reading.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    kind: TaskKind
    parent_session_id: str
    description: str
    child_session_id: str | None = None
    subagent_type: str | None = None
    prompt: str | None = None
    model: str | None = None
    status: TaskStatus = "pending"
    background: bool = False
    notified: bool = False
    tool_use_id: str | None = None
    output_dir: str = ""
    output_file: str = ""
    result: str | None = None
    error: str | None = None
    usage: TaskUsage = TaskUsage()
    created_at: float = Field(default_factory=time.time)
    ended_at: float | None = None
    worker_exit: str | None = None
    #: The sandbox the agent's worker reported in force (S-SBX-1, S-SBX-2).
    sandbox: SandboxReport | None = None
    #: Its caps over the worker's whole process tree, and what enforces them (S-SEC-4).
    caps: str = ""
    #: The directories its worker could write, from the supervisor's own policy (never
    #: the worker's claim): walked for repositories it planted if its supervisor dies
    #: before the walk that follows every worker (S-SEC-3).
    swept_roots: tuple[str, ...] = ()
    #: The task this one runs under: a workflow actor's workflow.
    parent_task_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_fields(cls, data: Any) -> Any:
        # Records stored by earlier versions carry a ``generation``.
        if isinstance(data, dict) and "generation" in data:
            data = {key: value for key, value in data.items() if key != "generation"}
        return data

    @property
    def is_terminal(self) -> bool:
        """Whether the task has ended (completed, failed, killed or interrupted)."""
        return self.status in TERMINAL_STATUSES

    @property
    def log_file(self) -> str:
        """Path of ``task.output``, the task's running log."""
        return os.path.join(self.output_dir, LOG_FILE)


def new_task_id(kind: TaskKind) -> str:
    """A fresh task id: ``agent_<hex>`` or ``bash_<hex>``."""
    return f"{_ID_PREFIXES[kind]}_{uuid.uuid4().hex}"


def write_metadata(record: TaskRecord) -> None:
    """Rewrite the task's ``metadata.json`` (atomically) from ``record``."""
    path = os.path.join(record.output_dir, METADATA_FILE)
    write_atomically(path, record.model_dump_json(indent=2))
