"""The script API's calls: ``agent()`` and ``Actor.ask`` over the script worker's pipe.

See ``worker.workflow`` for how a script reaches it.

Invariants:

- An actor is declared in the order of its ``agent()`` calls, each
  declaration after the previous one was answered; its asks wait for it.
- A name used twice in one run is refused here at once, and again by the
  supervisor, which is the one that counts (S-ACT-2).
- A typed ask's answer is validated here, against the script's own type:
  while the ask is pending, the supervisor checks each answer through
  ``ScriptRun.check_answer`` (``workflow.check_answer``), so the script's
  schema costs this worker's CPU, never the supervisor's.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeVar, overload

import trio
from pydantic import BaseModel, TypeAdapter, ValidationError

from protocol import (
    WORKFLOW_ASK,
    WORKFLOW_DECLARE_ACTOR,
    MethodSpec,
    WorkflowActorDeclaration,
    WorkflowActorRef,
    WorkflowAsk,
)

from ._script import describe_errors, strip_fence

__all__ = [
    "ERROR_CODES",
    "Actor",
    "ActorAnswerInvalid",
    "ActorAnswerInvalidError",
    "ActorAskFailed",
    "ActorAskFailedError",
    "ActorCrashed",
    "ActorCrashedError",
    "CallRefusedError",
    "DuplicateActorName",
    "DuplicateActorNameError",
    "EscalationUnansweredError",
    "ScriptRun",
    "SupervisorCalls",
    "WorkflowActorPinnedModelError",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowFailedError",
    "WorkflowScriptError",
    "agent",
    "enter_run",
    "leave_run",
]

T = TypeVar("T")
P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class WorkflowError(Exception):
    """Base class of the errors a workflow script sees."""


class WorkflowScriptError(WorkflowError):
    """The script cannot be run as written."""


class WorkflowFailedError(WorkflowError):
    """A workflow run failed (never raised inside a script; named for scripts that catch it)."""


class DuplicateActorNameError(WorkflowError):
    """Two actors of one run have the same name (S-ACT-2)."""


class WorkflowActorPinnedModelError(WorkflowError):
    """The journal pins an actor to a malformed model string (S-ACT-5)."""


class ActorAskFailedError(WorkflowError):
    """An ask got no answer: the model failed, or the actor hit its turn limit."""


class ActorCrashedError(ActorAskFailedError):
    """The actor's worker process ended during the ask; its next ask starts a new one."""


class ActorAnswerInvalidError(ActorAskFailedError):
    """A typed ask's answer did not validate, even after one correction."""


class EscalationUnansweredError(ActorAskFailedError):
    """The actor escalated a question to the workflow's creator, and no answer came in time."""


# The old names, as ``supervisor.workflow`` keeps them.
ActorAnswerInvalid = ActorAnswerInvalidError
ActorAskFailed = ActorAskFailedError
ActorCrashed = ActorCrashedError
DuplicateActorName = DuplicateActorNameError
WorkflowFailed = WorkflowFailedError

#: The supervisor's error codes for a script's calls, and what the script sees for each.
ERROR_CODES: dict[str, type[WorkflowError]] = {
    "workflow_error": WorkflowError,
    "duplicate_actor_name": DuplicateActorNameError,
    "pinned_model": WorkflowActorPinnedModelError,
    "actor_ask_failed": ActorAskFailedError,
    "actor_crashed": ActorCrashedError,
    "actor_answer_invalid": ActorAnswerInvalidError,
    "escalation_unanswered": EscalationUnansweredError,
}


class CallRefusedError(Exception):
    """The supervisor answered a call of the script API with an error ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SupervisorCalls(Protocol):
    """How the script API asks the supervisor: the worker's link, adapted by its command.

    It returns the method's result, or raises ``CallRefusedError``.
    """

    async def __call__(self, method: MethodSpec[P, R], params: P, /) -> R:
        """Ask ``method`` with ``params``."""
        ...


class ScriptRun:
    """The run of one script in this worker: how it asks, its nursery, its actors' names."""

    def __init__(self, ask: SupervisorCalls, nursery: trio.Nursery, filename: str) -> None:
        self._ask = ask
        self.nursery = nursery
        self.filename = filename
        self.names: dict[str, int] = {}
        self.anonymous = 0
        self._last_declared: trio.Event | None = None
        #: The types of the typed asks in flight, by their ``check_id``.
        self._checks: dict[int, TypeAdapter[Any]] = {}
        self._next_check = 0

    async def call(self, method: MethodSpec[P, R], params: P) -> R:
        """Ask the supervisor; an error answer becomes the script's exception for its code."""
        try:
            return await self._ask(method, params)
        except CallRefusedError as exc:
            raise ERROR_CODES.get(exc.code, WorkflowError)(exc.message) from None

    def open_check(self, adapter: TypeAdapter[Any]) -> int:
        """Register a typed ask's type until its answer is in; its ``check_id``."""
        check_id, self._next_check = self._next_check, self._next_check + 1
        self._checks[check_id] = adapter
        return check_id

    def close_check(self, check_id: int) -> None:
        """The ask ``check_id`` has ended: its answers are no longer checked."""
        self._checks.pop(check_id, None)

    def check_answer(self, check_id: int, text: str) -> str | None:
        """What is wrong with ``text`` as the answer of ask ``check_id``, or None.

        Raises ``KeyError`` for an ask that is not in flight.
        """
        adapter = self._checks[check_id]
        try:
            adapter.validate_json(strip_fence(text))
        except ValidationError as exc:
            return describe_errors(exc) or "the answer does not fit the type"
        return None

    def after_last_declaration(self, declared: trio.Event) -> trio.Event | None:
        """The declaration ``declared`` must wait for (the previous one), and queue it."""
        previous, self._last_declared = self._last_declared, declared
        return previous


_CURRENT: contextvars.ContextVar[ScriptRun] = contextvars.ContextVar("subvisor_script_run")


def enter_run(run: ScriptRun) -> contextvars.Token[ScriptRun]:
    """Make ``run`` the one ``agent()`` declares actors of (the script command calls this)."""
    return _CURRENT.set(run)


def leave_run(token: contextvars.Token[ScriptRun]) -> None:
    """Undo ``enter_run``."""
    _CURRENT.reset(token)


class Actor:
    """A declared actor; ``await actor.ask(prompt)`` or ``ask(prompt, schema=Model)``."""

    def __init__(self, run: ScriptRun, declaration: WorkflowActorDeclaration) -> None:
        self._run = run
        self.name = declaration.name
        self._declaration = declaration
        self._ref: WorkflowActorRef | None = None
        self._error: WorkflowError | None = None
        self._declared = trio.Event()
        previous = run.after_last_declaration(self._declared)
        run.nursery.start_soon(self._declare, previous)

    async def _declare(self, previous: trio.Event | None) -> None:
        try:
            if previous is not None:
                await previous.wait()
            self._ref = await self._run.call(WORKFLOW_DECLARE_ACTOR, self._declaration)
        except WorkflowError as exc:
            self._error = exc
        finally:
            self._declared.set()

    @overload
    async def ask(self, prompt: str) -> str: ...

    @overload
    async def ask(self, prompt: str, schema: type[T]) -> T: ...

    async def ask(self, prompt: str, schema: type[Any] | None = None) -> Any:
        """Ask once and return the answer: text, or with ``schema`` a validated value."""
        await self._declared.wait()
        if self._error is not None:
            raise self._error
        assert self._ref is not None
        label = self._ref.label
        if not isinstance(prompt, str) or not prompt.strip():
            raise WorkflowError(f"actor {label}: ask() needs a non-empty prompt")
        params = WorkflowAsk(actor_id=self._ref.actor_id, prompt=prompt)
        if schema is None:
            return (await self._run.call(WORKFLOW_ASK, params)).text
        adapter: TypeAdapter[Any] = TypeAdapter(schema)
        check_id = self._run.open_check(adapter)
        try:
            params = params.model_copy(
                update={
                    "schema_name": getattr(schema, "__name__", repr(schema))[:200],
                    "json_schema": adapter.json_schema(),
                    "check_id": check_id,
                }
            )
            answer = await self._run.call(WORKFLOW_ASK, params)
        finally:
            self._run.close_check(check_id)
        try:
            return adapter.validate_json(strip_fence(answer.text))
        except ValidationError as exc:
            # A replayed answer was checked when it was first given, maybe
            # against a type with the same schema but other validators.
            raise ActorAnswerInvalidError(
                f"actor {label} could not answer: its answer does not match "
                f"{params.schema_name}: {exc.errors()[0]['msg']}"
            ) from None


def agent(
    name: str | None = None,
    *,
    system: str = "",
    tools: Sequence[str] | None = None,
    model: str | None = None,
    max_turns: int | None = None,
) -> Actor:
    """Declare an actor of the running workflow (S-ACT-1); see ``supervisor.workflow.agent``."""
    run = _CURRENT.get(None)
    if run is None:
        raise WorkflowError(
            "agent() declares an actor of a running workflow: call it inside the @workflow function"
        )
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise WorkflowError(f"an actor's name must be a non-empty string, not {name!r}")
    if tools is not None and (
        isinstance(tools, str) or not all(isinstance(tool, str) for tool in tools)
    ):
        raise WorkflowError(f"tools= must be a list of tool names, not {tools!r}")
    line = _caller_line(run.filename, sys._getframe(1))
    if name is not None:
        if name in run.names:
            raise DuplicateActorNameError(
                f"{run.filename}: actor name {name!r} is declared twice, on line "
                f"{run.names[name]} and on line {line}; actor names are unique within a run "
                "(S-ACT-2): rename one, or leave the name out for an anonymous actor"
            )
        run.names[name] = line
    try:
        declaration = WorkflowActorDeclaration(
            name=name,
            system=system,
            tools=tuple(tools) if tools is not None else None,
            model=model,
            max_turns=max_turns,
            line=line,
        )
    except ValidationError as exc:
        raise WorkflowError(f"agent(): {exc.errors()[0]['msg']}") from None
    return Actor(run, declaration)


def _caller_line(script: str, frame: FrameType | None) -> int:
    """The line of the script that called ``agent()`` (through helpers, if any)."""
    first = frame.f_lineno if frame is not None else 0
    while frame is not None:
        if Path(frame.f_code.co_filename) == Path(script):
            return frame.f_lineno
        frame = frame.f_back
    return first
