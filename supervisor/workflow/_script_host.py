"""``run_sandboxed_workflow``: a workflow script run in a sandboxed worker of its own.

A script the root model writes is untrusted code, so it never runs in the
supervisor. A run goes in this order, and stops at the first step that fails:

1. analyse the source: its actor sites and its ``@workflow`` function, a
   syntax error or ``DuplicateActorNameError`` refused before anything runs;
2. with ``amend``, read the earlier run's actors and answered asks;
3. journal the run, then start one script worker: read-only filesystem
   (its private temp dir aside), subvisor's home hidden, network denied,
   no capabilities, the subagents' caps (and, like every worker, no key);
4. ask it to run the script (``workflow.run``, the source in the request);
   its ``agent()`` and ``ask()`` calls come back as ``workflow.declare_actor``
   and ``workflow.ask``, answered here by an ``ActorRoster`` whose actors run
   as they always do, each in its own worker;
5. stop the actors and the script worker; journal how the run ended.

Invariants:

- The script worker is answered only ``workflow.declare_actor``,
  ``workflow.ask`` and ``supervisor.echo``: no model call, no tool, no MCP,
  no question. Each declaration and ask costs one event of its budget and
  the bytes the supervisor keeps and journals for it (an actor's
  instructions; an ask's prompt and schema), refused before anything is
  kept: past the budget the script's worker is stopped (S-SEC-8). A prompt
  is at most ``MAX_PROMPT_CHARS``, instructions ``MAX_SYSTEM_CHARS``, and
  a run declares at most ``MAX_ACTORS`` actors, and fewer than
  the fleet's worker slots: an actor keeps its worker for the run, so one
  more than the slots would wait for a slot forever.
- An error a call raises reaches the script as a code its API turns into
  the exception of the same name (``worker.workflow.ERROR_CODES``).
- A typed ask's schema is never evaluated here: whether an answer fits is
  asked of the script worker (``workflow.check_answer``, see ``_typed``), so
  a schema's cost is the script worker's CPU, not the event loop's.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel

from protocol import (
    WORKFLOW_CHECK_ANSWER,
    WORKFLOW_RUN,
    WORKFLOW_SCRIPT_ERROR,
    EchoRequest,
    SandboxPolicy,
    WorkerRequest,
    WorkflowActorRef,
    WorkflowAnswer,
    WorkflowAnswerCheck,
    WorkflowAskRequest,
    WorkflowDeclareActorRequest,
    WorkflowScriptSpec,
)

from ..delegation._subvisor import Subvisor
from ..kernel import (
    EventBudgetExceededError,
    RequestRefusedError,
    SubvisorError,
    WorkerExitedError,
    WorkerHandle,
    WorkerRequestError,
    default_request_handler,
    text_size,
)
from ._actor import ActorEnvironment, ActorObserver
from ._errors import (
    ActorAnswerInvalidError,
    ActorAskFailedError,
    ActorCrashedError,
    DuplicateActorNameError,
    EscalationUnansweredError,
    WorkflowActorPinnedModelError,
    WorkflowError,
    WorkflowFailedError,
    WorkflowScriptError,
)
from ._escalations import EscalationDesk
from ._journal import RunRecord, WorkflowJournal
from ._roster import ActorRoster, EarlierActor, ScriptBounds, earlier_actors
from ._sites import analyse_script, workflow_functions, workflow_model
from ._typed import ScriptAnswerSchema, dump_value

__all__ = [
    "MAX_ACTORS",
    "MAX_PROMPT_CHARS",
    "MAX_SYSTEM_CHARS",
    "SCRIPT_SANDBOX",
    "analyse_source",
    "run_sandboxed_workflow",
]

#: The most actors one run may declare.
MAX_ACTORS = 64
#: The longest prompt a script may ask, and the longest instructions it may give an actor.
MAX_PROMPT_CHARS = 1 << 20
MAX_SYSTEM_CHARS = 256 << 10

#: The script worker's sandbox; the home is hidden by the ``Supervisor`` itself.
SCRIPT_SANDBOX = SandboxPolicy(mode="read-only", network="deny")

# The codes the script API knows, most specific first.
_CODES: tuple[tuple[type[WorkflowError], str], ...] = (
    (DuplicateActorNameError, "duplicate_actor_name"),
    (WorkflowActorPinnedModelError, "pinned_model"),
    (EscalationUnansweredError, "escalation_unanswered"),
    (ActorAnswerInvalidError, "actor_answer_invalid"),
    (ActorCrashedError, "actor_crashed"),
    (ActorAskFailedError, "actor_ask_failed"),
)


def _refusal(exc: WorkflowError) -> RequestRefusedError:
    code = next((code for cls, code in _CODES if isinstance(exc, cls)), "workflow_error")
    return RequestRefusedError(code, str(exc))


def analyse_source(source: str, filename: str) -> tuple[str, list[dict[str, Any]]]:
    """Step 1: the workflow function's name and the actor sites, before anything runs.

    Raises ``WorkflowScriptError`` (not Python, not exactly one ``@workflow``,
    a ``model=`` that is no string literal) or ``DuplicateActorNameError``,
    each saying what to fix.
    """
    sites = analyse_script(source, filename)
    workflow_model(source, filename)  # a model that is no literal is the script's to fix
    names = workflow_functions(source)
    if len(names) != 1:
        raise WorkflowScriptError(
            f"{filename}: a workflow script defines exactly one `@workflow async def`; "
            + (
                f"this one defines {len(names)} ({', '.join(names)})"
                if names
                else "this one defines none"
            )
        )
    return names[0], [{"line": s.line, "kind": s.kind, "name": s.name} for s in sites]


class _ScriptRequests:
    """Answers the script worker: declarations and asks, through the run's roster."""

    def __init__(self, roster: ActorRoster) -> None:
        self._roster = roster

    async def __call__(self, handle: WorkerHandle, request: WorkerRequest) -> BaseModel:
        try:
            if isinstance(request, WorkflowDeclareActorRequest):
                return self._declare(handle, request)
            if isinstance(request, WorkflowAskRequest):
                return await self._ask(handle, request)
        except EventBudgetExceededError as exc:
            raise RequestRefusedError("event_budget", str(exc)) from None
        except WorkflowError as exc:
            raise _refusal(exc) from None
        if isinstance(request, EchoRequest):
            return await default_request_handler(handle, request)
        raise RequestRefusedError(
            "not_available",
            f"a workflow script's worker may declare actors and ask them, nothing else "
            f"({request.method} is an agent's call)",
        )

    def _declare(
        self, handle: WorkerHandle, request: WorkflowDeclareActorRequest
    ) -> WorkflowActorRef:
        # Each actor keeps its worker for the whole run and the script holds one
        # more: past the fleet's slots, the next actor's spawn would wait forever.
        slots = self._roster.env.host.settings.max_concurrent_subagents - 1
        limit = min(MAX_ACTORS, slots)
        if len(self._roster.actors) >= limit:
            raise WorkflowError(
                f"a workflow run declares at most {limit} actors (each keeps a worker for the "
                f"run; max_concurrent_subagents is "
                f"{self._roster.env.host.settings.max_concurrent_subagents}, one of them runs "
                "the script); reuse an actor for more asks"
            )
        p = request.params
        _refuse_long("an actor's system=", p.system, MAX_SYSTEM_CHARS)
        # What the actor keeps for the run (its instructions) and the journal records.
        handle.budget.charge(events=1, size=text_size(p.system))
        actor = self._roster.declare(
            p.name,
            system=p.system,
            tools=p.tools,
            model=p.model,
            max_turns=p.max_turns,
            line=p.line,
        )
        return WorkflowActorRef(actor_id=actor.agent_id, label=actor.definition.label)

    async def _ask(self, handle: WorkerHandle, request: WorkflowAskRequest) -> WorkflowAnswer:
        p = request.params
        actor = self._roster.by_id.get(p.actor_id)
        if actor is None:
            raise WorkflowError(f"no actor {p.actor_id!r} was declared in this run")
        label = actor.definition.label
        _refuse_long(f"actor {label}: ask()'s prompt", p.prompt, MAX_PROMPT_CHARS)
        schema = None
        if p.json_schema is not None:
            check_id = p.check_id
            if check_id is None:
                raise WorkflowError(
                    f"actor {label}: a typed ask names the check of its answer (check_id); "
                    "use ask(prompt, schema=Type)"
                )

            async def checker(text: str) -> str | None:
                # Asked of the script's worker: its type, its CPU (see ``_typed``).
                try:
                    checked = await handle.request(
                        WORKFLOW_CHECK_ANSWER, WorkflowAnswerCheck(check_id=check_id, text=text)
                    )
                except WorkerRequestError as exc:
                    raise ActorAskFailedError(
                        label, f"the script could not check the answer: {exc.message}"
                    ) from None
                except WorkerExitedError as exc:
                    raise ActorAskFailedError(
                        label, f"the script's worker ended: {exc.exit.reason}"
                    ) from None
                return checked.problem

            try:
                schema = ScriptAnswerSchema(p.schema_name or "answer", p.json_schema, checker)
            except ValueError as exc:
                raise WorkflowError(f"actor {label}: {exc}") from None
        # The prompt is kept in the actor's conversation and journaled with the ask.
        handle.budget.charge(
            events=1, size=text_size(p.prompt) + (len(schema.json_schema) if schema else 0)
        )
        text = await actor.ask_with(p.prompt, schema)
        return WorkflowAnswer(text=text)


def _refuse_long(what: str, text: str, limit: int) -> None:
    if len(text) > limit:
        raise WorkflowError(
            f"{what} is {len(text)} characters, more than the {limit} a workflow script may "
            "send; put less in it (an actor can Read a file itself)"
        )


async def _discard_events(handle: WorkerHandle) -> None:
    # A script sends no events; a hostile one could, and an unread channel
    # would only stall its own pipe. They are read and dropped.
    while True:
        try:
            await handle.receive_event_batch()
        except WorkerExitedError:
            return


async def run_sandboxed_workflow(
    host: Subvisor,
    source: str,
    *,
    journal: WorkflowJournal,
    parent_model: str,
    cwd: Path,
    filename: str = "<CreateWorkflow>",
    run_id: str | None = None,
    inputs: Mapping[str, Any] | None = None,
    amend: str | None = None,
    model: str | None = None,
    escalations: EscalationDesk | None = None,
    observer: ActorObserver | None = None,
    on_script_worker: Callable[[WorkerHandle], None] | None = None,
) -> Any:
    """Run ``source`` in a script worker (see the module doc); return its JSON value.

    ``parent_model``: the creator's current model, what actors inherit
    unless the script's ``@workflow(model=...)`` names another the user gave
    (S-ACT-5, ``ScriptBounds``); ``model``: the run's model for every actor. Raises
    ``WorkflowScriptError``/``DuplicateActorNameError``/``WorkflowError``
    before the run is journaled, and ``WorkflowFailedError`` once it was.
    """
    inputs = dict(inputs or {})
    name, sites = analyse_source(source, filename)
    # The script is the root's: it may name only a model the user gave (``ScriptBounds``).
    bounds = ScriptBounds.of(
        parent_model, host.settings.model, model, max_turns=host.settings.max_turns
    )
    # The script's own default model, as `@workflow(model=...)` gives it in
    # `subvisor workflow run` too (S-ACT-5): what its actors inherit.
    own = workflow_model(source, filename)
    if own:
        bounds.check_model(f"{filename}: @workflow(model=...)", own)
    parent_model = own or parent_model
    earlier: dict[str, EarlierActor] = {}
    amends: str | None = None
    if amend is not None:
        previous = journal.find_run(amend)
        if previous is None:
            raise WorkflowError(
                f"no workflow run {amend!r} to amend; `subvisor workflow show` lists the runs"
            )
        amends = previous.run_id
        earlier = earlier_actors(journal, amends)
    run_id = run_id or f"wf_{uuid.uuid4().hex[:12]}"
    journal.start_run(
        RunRecord(
            run_id=run_id,
            workflow=name,
            script_path=filename,
            script_hash=hashlib.sha256(source.encode()).hexdigest(),
            parent_model=parent_model,
            run_model=model,
            inputs=dump_value(inputs),
            sites=sites,
            amends=amends,
        )
    )
    spec = WorkflowScriptSpec(
        source=source,
        filename=filename,
        run_id=run_id,
        cwd=str(cwd),
        model=parent_model,
        inputs=dump_value(inputs),
        amends=amends,
    )
    roster: ActorRoster | None = None
    handle: WorkerHandle | None = None
    failure: str | None = None
    stopped: str | None = None
    value: Any = None
    try:
        async with trio.open_nursery() as nursery:
            env = ActorEnvironment(
                host=host,
                journal=journal,
                run_id=run_id,
                cwd=str(cwd),
                nursery=nursery,
                lent_mcp=host.mcp.tool_specs(lent=True),
                escalations=escalations,
                observer=observer,
            )
            roster = ActorRoster(
                env,
                script=filename,
                parent_model=parent_model,
                run_model=model,
                earlier=earlier,
                amends=amends,
                bounds=bounds,
            )
            try:
                handle = await host.fleet.spawn(
                    host.settings.subagent_limits,
                    sandbox=SCRIPT_SANDBOX.model_copy(
                        update={"on_unsupported": host.settings.sandbox.on_unsupported}
                    ),
                    handler=_ScriptRequests(roster),
                )
                if on_script_worker is not None:
                    on_script_worker(handle)
                nursery.start_soon(_discard_events, handle)
                value = (await handle.request(WORKFLOW_RUN, spec)).value
            except WorkerRequestError as exc:
                failure = (
                    exc.message
                    if exc.code in (WORKFLOW_SCRIPT_ERROR, "script_failed")
                    else f"{exc.code}: {exc.message}"
                )
            except WorkerExitedError as exc:
                failure = f"the script's worker ended: {exc.exit.reason}"
            except SubvisorError as exc:
                failure = f"the script's worker could not be started: {exc}"
            except trio.Cancelled:
                stopped = "its workflow run was stopped"
                raise
            finally:
                with trio.CancelScope(shield=True):
                    if handle is not None:
                        await (handle.shutdown(grace_s=2.0) if handle.alive else handle.wait())
                    await roster.close(stopped)
                nursery.cancel_scope.cancel()
    except BaseException:
        if escalations is not None:
            escalations.close_run(run_id)
        journal.finish_run(run_id, "failed", error="stopped")
        raise
    if escalations is not None:
        escalations.close_run(run_id)
    if failure is not None:
        journal.finish_run(run_id, "failed", error=failure)
        raise WorkflowFailedError(run_id, WorkflowError(failure), described=failure)
    journal.finish_run(run_id, "completed", result=value)
    return value
