"""``WorkflowTask``: a workflow the root created, as a background task of its session.

The order of effects follows a background subagent's (``SubagentRun``):

1. the workflow's session is stored under the root's, its task registered
   ``running`` with its output dir, and the script written there
   (``script.py``: what ``subvisor workflow show`` names, what ran);
2. the script runs in its script worker (``run_sandboxed_workflow``); each
   actor it declares becomes a ``workflow_actor`` task (and a subagent
   session) under the workflow, ``running`` once its worker starts;
3. on any end (a value, a failure, a stop) the actors' records are ended,
   then the workflow's record, then exactly one notification is queued
   for the root (S-NOTE-1..3).

``subvisor stop WF_ID`` cancels the run: the script worker and every actor's
worker are stopped, the actors end ``killed``. Stopping one actor kills its
worker only: its pending ask fails (``ActorCrashedError``) and the script
decides what follows.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import trio

from ..delegation._notifications import CommandQueue, task_notification_command
from ..delegation._subvisor import Subvisor
from ..kernel import WorkerHandle
from ..state._paths import database_path
from ..state._task_record import TaskRecord, TaskUsage
from ..state._usage import sum_usage
from ._actor import Actor
from ._errors import WorkflowError, WorkflowFailedError
from ._escalations import EscalationDesk
from ._journal import WorkflowJournal
from ._script_host import run_sandboxed_workflow

__all__ = ["SCRIPT_FILE", "WorkflowTask"]

log = logging.getLogger("subvisor")

_Ending = Literal["completed", "failed", "killed"]

#: The script of a model-created run, in its task's output dir.
SCRIPT_FILE = "script.py"


class WorkflowTask:
    """One model-created workflow run; its ``Subvisor`` runs ``run`` in its nursery."""

    def __init__(
        self,
        host: Subvisor,
        *,
        parent_session_id: str,
        queue: CommandQueue,
        escalations: EscalationDesk,
        source: str,
        description: str,
        parent_model: str,
        cwd: Path,
        inputs: Mapping[str, Any] | None = None,
        amend: str | None = None,
        tool_use_id: str | None = None,
    ) -> None:
        #: What its script and actors run on (the engine takes the ``Subvisor``).
        self.host = host
        self._store = host.store
        self._registry = host.registry
        self.run_id = f"wf_{uuid.uuid4().hex[:12]}"
        self.parent_session_id = parent_session_id
        self.session_id = f"sess_workflow_{self.run_id}"
        self._queue = queue
        self._escalations = escalations
        self.source = source
        self.description = description
        self.parent_model = parent_model
        self.cwd = cwd
        self.inputs = dict(inputs or {})
        self.amend = amend
        self.tool_use_id = tool_use_id
        self.done = trio.Event()
        self.record: TaskRecord | None = None
        self._scope = trio.CancelScope()
        self._stop_reason: str | None = None
        self._actors: dict[str, str] = {}

    @property
    def script_path(self) -> Path:
        """Where the script is kept (its task's output dir)."""
        assert self.record is not None
        return Path(self.record.output_dir) / SCRIPT_FILE

    # -- lifecycle ------------------------------------------------------------------

    def register(self) -> TaskRecord:
        """Store the workflow's session and task, and write its script (step 1)."""
        with self._store.batch():
            self._store.create_session(
                self.session_id,
                parent_id=self.parent_session_id,
                task_type="workflow",
                agent_type="workflow",
                description=self.description,
                model=self.parent_model,
                cwd=str(self.cwd),
            )
            self.record = self._registry.register(
                TaskRecord(
                    task_id=self.run_id,
                    kind="workflow",
                    parent_session_id=self.parent_session_id,
                    child_session_id=self.session_id,
                    description=self.description,
                    subagent_type="workflow",
                    prompt=self.source,
                    model=self.parent_model,
                    status="running",
                    background=True,
                    tool_use_id=self.tool_use_id,
                    created_at=time.time(),
                )
            )
        self.script_path.write_text(self.source, encoding="utf-8")
        self._registry.set_stopper(self.run_id, self.stop)
        return self.record

    async def run(self) -> None:
        """Run the script, record the end, notify once. Never raises."""
        status: _Ending = "failed"
        result: str | None = None
        error: str | None = None
        try:
            with self._scope, WorkflowJournal(database_path(self.host.home)) as journal:
                value = await run_sandboxed_workflow(
                    self.host,
                    self.source,
                    journal=journal,
                    parent_model=self.parent_model,
                    cwd=self.cwd,
                    filename=str(self.script_path),
                    run_id=self.run_id,
                    inputs=self.inputs,
                    amend=self.amend,
                    escalations=self._escalations,
                    observer=self,
                )
                status, result = "completed", self._result_text(journal, value)
            if self._scope.cancelled_caught:
                status, result, error = "killed", None, self._stop_reason or "stopped"
        except WorkflowFailedError as exc:
            error = str(exc)
        except WorkflowError as exc:
            error = f"workflow run {self.run_id} could not start: {exc}"
        except Exception as exc:  # a bug here must not kill the Subvisor
            log.exception("workflow %s failed unexpectedly", self.run_id)
            error = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            try:
                self._finish(status, result, error)
            except Exception:
                log.exception("could not record the end of workflow %s", self.run_id)
            finally:
                self.done.set()

    async def stop(self, reason: str = "stopped by request") -> None:
        """Stop the run and its actors; returns once it has ended."""
        if self._stop_reason is None:
            self._stop_reason = self.host.stopping_reason or reason
        self._scope.cancel()
        await self.done.wait()

    def _result_text(self, journal: WorkflowJournal, value: Any) -> str:
        asks = journal.asks(self.run_id)
        cached = sum(ask.source == "cached" for ask in asks)
        calls = sum(ask.model_calls for ask in asks)
        return (
            json.dumps(value, indent=2, ensure_ascii=False)
            + f"\n\nworkflow run {self.run_id}: {len(asks)} asks ({cached} replayed from the "
            f"journal, {len(asks) - cached} fresh), {calls} model calls; "
            f"`subvisor workflow show {self.run_id}` shows each"
        )

    def _finish(self, status: _Ending, result: str | None, error: str | None) -> None:
        registry = self._registry
        ended = (registry.get(actor_id) for actor_id in self._actors.values())
        usage = sum_usage(record.usage for record in ended if record is not None)
        with self._store.batch():
            self.record = registry.finish(
                self.run_id, status, result=result, error=error, usage=usage
            )
            self._store.set_session_status(self.session_id, status)
        if registry.mark_notified(self.run_id):
            self._queue.enqueue(task_notification_command(self.record))

    # -- its actors (ActorObserver) ---------------------------------------------------

    def declared(self, actor: Actor) -> None:
        """Register the actor as a task under the workflow, and a subagent session."""
        label = actor.definition.label
        session = f"sess_actor_{actor.agent_id}"
        description = f"actor {label} of {self.run_id}"
        with self._store.batch():
            self._store.create_session(
                session,
                parent_id=self.parent_session_id,
                task_type="subagent_child",
                agent_type="workflow actor",
                description=description,
                model=actor.definition.model.model,
                cwd=str(self.cwd),
            )
            self._registry.register(
                TaskRecord(
                    task_id=actor.agent_id,
                    kind="workflow_actor",
                    parent_session_id=self.parent_session_id,
                    child_session_id=session,
                    parent_task_id=self.run_id,
                    description=description,
                    subagent_type="workflow actor",
                    model=actor.definition.model.model,
                    status="pending",
                    background=True,
                    created_at=time.time(),
                )
            )
        self._actors[label] = actor.agent_id
        self._registry.set_stopper(actor.agent_id, _actor_stopper(actor))

    def started(self, actor: Actor, handle: WorkerHandle) -> None:
        """The actor's worker is up: it is running, in the sandbox its worker reported."""
        record = self._registry.get(actor.agent_id)
        if record is not None and not record.is_terminal:
            self._registry.update(
                actor.agent_id,
                status="running",
                sandbox=handle.sandbox,
                caps=handle.caps_summary,
                swept_roots=handle.swept_roots,
            )

    def ended(
        self, actor: Actor, status: Literal["completed", "failed", "killed"], error: str | None
    ) -> None:
        """The run closed the actor: its conversation joins its session (``subvisor logs``),
        and its record ends with what its asks spent."""
        usage = TaskUsage(
            input_tokens=actor.spent.input_tokens,
            output_tokens=actor.spent.output_tokens,
            cache_read_tokens=actor.spent.cache_read_tokens,
            cache_write_tokens=actor.spent.cache_write_tokens,
            model_calls=actor.model_calls,
            tool_calls=actor.tool_calls,
        )
        store = self._store
        session = f"sess_actor_{actor.agent_id}"
        with store.batch():
            for message in actor.history:
                store.append_message(session, message)
            record = self._registry.finish(
                actor.agent_id,
                status,
                result=f"{actor.model_calls} model calls" if status == "completed" else None,
                error=error,
                usage=usage,
            )
            store.set_session_status(session, record.status)
            store.record_usage(session, record.usage)


def _actor_stopper(actor: Actor) -> Callable[[str], Any]:
    async def stop(reason: str) -> None:
        await actor.stop_worker(reason)

    return stop
