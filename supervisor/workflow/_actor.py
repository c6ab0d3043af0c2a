"""``Actor``: one role of a workflow script, asked in order, with one conversation.

Each actor owns one worker process, started at its first fresh ask and kept
for the rest of the run. The conversation is kept here, in the supervisor:
every ask sends the worker the conversation so far, and the worker's model
calls show what it became (the model's last request plus its answer). So a
conversation can start from a journal: an amended re-run replays the asks
that did not change, without a worker or a model call, and the first fresh
ask hands the worker the replayed conversation.

Asks to one actor are serialized by a lock (S-ACT-1); actors are independent,
so asks to different actors run at the same time. An ask that fails (a
crash, a model error, the turn limit, an answer that does not validate)
leaves the conversation as it was; after a crash the next ask starts a new
worker on it.

An actor of a workflow a root created may escalate a question to it
(EscalateQuestion, ``_escalations``): the ask waits for the answer, and an
unanswered question fails the ask with ``EscalationUnansweredError``, the
worker's running turn cancelled. An ``ActorObserver`` (the workflow's task)
hears when the actor is declared, starts its worker and ends, for ``ps``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, overload

import trio

from protocol import (
    AGENT_RUN,
    AgentRunSpec,
    ChatMessage,
    ModelRequest,
    ModelResult,
    ProcessGroupStarted,
    ToolSpec,
    Usage,
    WorkflowEscalation,
    WorkflowEscalationAnswer,
)
from worker.agent import ESCALATE_QUESTION_SPEC
from worker.tools import LocalToolSet

from ..delegation._agent_requests import AgentRequestPolicy
from ..delegation._subvisor import Subvisor
from ..kernel import (
    RequestRefusedError,
    SubvisorError,
    WorkerExitedError,
    WorkerHandle,
    WorkerRequestError,
)
from ..policy._approvals import ApprovalOrigin, Requester
from ..policy._policy import ToolPolicy
from ..policy._sandbox import choose_sandbox
from ._errors import (
    ActorAnswerInvalidError,
    ActorAskFailedError,
    ActorCrashedError,
    EscalationUnansweredError,
    WorkflowError,
)
from ._escalations import EscalationDesk
from ._journal import AskRecord, WorkflowJournal
from ._model import ActorModel
from ._typed import AnswerSchema, AskSchema

__all__ = ["Actor", "ActorDefinition", "ActorEnvironment", "ActorObserver", "prompt_hash"]

T = TypeVar("T")


def prompt_hash(prompt: str, schema: AskSchema | None) -> str:
    """What an ask is matched by on an amended re-run: its prompt and its answer type."""
    document = json.dumps({"prompt": prompt, "schema": schema.json_schema if schema else None})
    return hashlib.sha256(document.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ActorDefinition:
    """An actor as the script declared it, with its model resolved."""

    key: str
    name: str | None
    line: int
    system: str
    tools: tuple[str, ...]
    model: ActorModel
    max_turns: int

    @property
    def label(self) -> str:
        """How messages name it: ``'critic'`` or ``anonymous actor of line 20``."""
        return repr(self.name) if self.name is not None else f"(anonymous, line {self.line})"

    @property
    def definition_hash(self) -> str:
        """Its instructions and tools: a replay needs them unchanged."""
        document = json.dumps({"system": self.system, "tools": list(self.tools)})
        return hashlib.sha256(document.encode()).hexdigest()

    @property
    def agent_keys(self) -> tuple[str, ...]:
        """Scenario keys for the scripted provider: its name (or ``~N``), then fallbacks."""
        return (self.key, "anonymous" if self.name is None else "actor", "default")


class ActorObserver(Protocol):
    """Who hears of an actor's life (the workflow task that shows it in ``ps``)."""

    def declared(self, actor: Actor) -> None:
        """The actor was declared."""

    def started(self, actor: Actor, handle: WorkerHandle) -> None:
        """The actor's worker started."""

    def ended(
        self, actor: Actor, status: Literal["completed", "failed", "killed"], error: str | None
    ) -> None:
        """The run closed the actor."""


@dataclass(slots=True)
class ActorEnvironment:
    """What the run lends its actors.

    ``escalations``: where their questions for the workflow's creator go
    (None: nobody is there, EscalateQuestion is refused).
    """

    host: Subvisor
    journal: WorkflowJournal
    run_id: str
    cwd: str
    nursery: trio.Nursery
    lent_mcp: tuple[ToolSpec, ...] = ()
    escalations: EscalationDesk | None = None
    observer: ActorObserver | None = None


@dataclass(slots=True)
class _Round:
    """The model calls of one ``agent.run``: what they cost, the last exchange."""

    calls: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    last_request: tuple[ChatMessage, ...] = ()
    last_result: ModelResult | None = None
    #: Cancels the round's ``agent.run``; ``failure`` says why.
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: Cancels its model call in flight, if any, once the round has ended.
    call_scope: trio.CancelScope | None = None
    failure: ActorAskFailedError | None = None


class Actor:
    """A declared actor; ``await actor.ask(prompt)`` or ``ask(prompt, schema=Model)``."""

    def __init__(
        self,
        env: ActorEnvironment,
        definition: ActorDefinition,
        replay: list[AskRecord] | None = None,
        replayed_from: str | None = None,
    ) -> None:
        self._env = env
        self.definition = definition
        #: Rules its tool calls are checked against ("allow always" grows them).
        self.policy = ToolPolicy(
            rules=env.host.settings.rules, mode=env.host.settings.mode, project_dir=env.cwd
        )
        self.agent_id = f"actor_{uuid.uuid4().hex[:16]}"
        self.history: list[ChatMessage] = []
        #: Answered asks of the amended run this actor may replay, by index.
        self._replay = {ask.ask_index: ask for ask in replay or () if ask.status == "answered"}
        self._replayed_from = replayed_from
        self._diverged = not self._replay
        self._asks = 0
        self._lock = trio.Lock()
        self._handle: WorkerHandle | None = None
        self._round: _Round | None = None
        #: Model calls in flight (by the worker's request) and the round of each: one
        #: at a time, but a call of a round that has ended is cancelled and may
        #: still be unwinding when the next round's first call comes.
        self._calling: dict[int, _Round] = {}
        # Model calls of failed asks: not in the conversation, but the scripted
        # provider's turn numbering must move past them.
        self._lost_calls = 0
        lent = {spec.name: spec for spec in env.lent_mcp}
        self._borrowed = frozenset(name for name in definition.tools if name in lent)
        # S-MCP-1, S-PROF-5: a borrowed tool its rules deny whatever the input is not offered.
        self._mcp_tools = tuple(
            lent[name]
            for name in definition.tools
            if name in self._borrowed and not self.policy.always_denies(name)
        )
        local = LocalToolSet(name for name in definition.tools if name not in lent)
        #: Exactly what the model is offered (S-ACT-4), and the creator's line when there is one.
        self.tool_specs: tuple[ToolSpec, ...] = (
            *local.specs,
            *self._mcp_tools,
            *((ESCALATE_QUESTION_SPEC,) if env.escalations is not None else ()),
        )
        #: What its fresh asks spent, and how its last failed ask failed.
        self.spent = Usage()
        self.model_calls = 0
        self.tool_calls = 0
        self.last_error: str | None = None
        self._requester = Requester(
            root_session_id=env.run_id,
            origin=ApprovalOrigin(kind="subagent", agent_id=self.agent_id),
            description=f"workflow actor {definition.label}",
            event_sessions=(),
        )
        if env.observer is not None:
            env.observer.declared(self)

    @property
    def name(self) -> str | None:
        """The actor's name (None for an anonymous actor)."""
        return self.definition.name

    @overload
    async def ask(self, prompt: str) -> str: ...

    @overload
    async def ask(self, prompt: str, schema: type[T]) -> T: ...

    async def ask(self, prompt: str, schema: type[Any] | None = None) -> Any:
        """Ask once and return the answer: text, or with ``schema`` a validated value.

        Raises ``ActorCrashedError`` when the worker ends during the ask,
        ``ActorAnswerInvalidError`` when a typed answer fails validation twice,
        and ``ActorAskFailedError`` for any other ask that got no answer.
        """
        if not isinstance(prompt, str) or not prompt.strip():
            raise WorkflowError(f"actor {self.definition.label}: ask() needs a non-empty prompt")
        answer_schema = AnswerSchema(schema) if schema is not None else None
        return await self.ask_with(prompt, answer_schema)

    async def ask_with(self, prompt: str, answer_schema: AskSchema | None) -> Any:
        """``ask`` with the answer's schema already built (a worker's script sends JSON schemas)."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise WorkflowError(f"actor {self.definition.label}: ask() needs a non-empty prompt")
        async with self._lock:
            index = self._asks
            self._asks += 1
            key = prompt_hash(prompt, answer_schema)
            cached = None if self._diverged else self._replay.get(index)
            if cached is not None and cached.prompt_hash == key:
                return self._replay_ask(cached, answer_schema)
            # From the first ask that differs on, this actor runs for real.
            self._diverged = True
            return await self._ask_fresh(index, prompt, key, answer_schema)

    # -- replay ---------------------------------------------------------------------

    def _replay_ask(self, cached: AskRecord, schema: AskSchema | None) -> Any:
        now = time.time()
        self.history.extend(cached.messages)
        # The earlier answer, journaled again as this run's, costing nothing.
        self._env.journal.record_ask(
            dataclasses.replace(
                cached,
                run_id=self._env.run_id,
                actor_key=self.definition.key,
                status="answered",
                error=None,
                source="cached",
                replayed_from=cached.replayed_from or self._replayed_from,
                usage=Usage(),
                model_calls=0,
                tool_calls=0,
                started_at=now,
                ended_at=now,
            )
        )
        answer = cached.answer or ""
        return schema.replayed(answer) if schema is not None else answer

    # -- fresh asks -----------------------------------------------------------------

    async def _ask_fresh(self, index: int, prompt: str, key: str, schema: AskSchema | None) -> Any:
        started = time.time()
        base = len(self.history)
        conversation = list(self.history)
        spent = _Round()
        answered = False
        answer: str | None = None
        error: str | None = None
        try:
            text = prompt if schema is None else f"{prompt}\n\n{schema.instructions()}"
            answer, conversation = await self._run_round(text, conversation, spent)
            value: Any = answer
            if schema is not None:
                try:
                    value = await schema.check(answer)
                except ValueError as first:
                    # One correction round, with the validation error (S-ACT-1 typed asks).
                    answer, conversation = await self._run_round(
                        schema.correction(str(first)), conversation, spent
                    )
                    try:
                        value = await schema.check(answer)
                    except ValueError as second:
                        raise ActorAnswerInvalidError(
                            self.definition.label, schema.name, str(second), answer
                        ) from None
            answered = True
            return value
        except ActorAskFailedError as exc:
            error = str(exc)
            raise
        finally:
            self.spent = self.spent + spent.usage
            self.model_calls += spent.calls
            self.tool_calls += spent.tool_calls
            self.last_error = None if answered else (error or "the ask was cancelled")
            if answered:
                self.history = conversation
            else:
                self._lost_calls += spent.calls
            self._env.journal.record_ask(
                AskRecord(
                    run_id=self._env.run_id,
                    actor_key=self.definition.key,
                    ask_index=index,
                    prompt_hash=key,
                    prompt=prompt,
                    schema_name=schema.name if schema is not None else None,
                    model=self.definition.model.model,
                    status="answered" if answered else "failed",
                    answer=answer,
                    error=None if answered else (error or "the ask was cancelled"),
                    # A failed ask is never replayed: its prompt, kept above, is
                    # not journaled a second time in its messages.
                    messages=tuple(conversation[base:]) if answered else (),
                    source="fresh",
                    usage=spent.usage,
                    model_calls=spent.calls,
                    tool_calls=spent.tool_calls,
                    started_at=started,
                    ended_at=time.time(),
                )
            )

    async def _run_round(
        self, text: str, conversation: list[ChatMessage], spent: _Round
    ) -> tuple[str, list[ChatMessage]]:
        """One ``agent.run`` on the worker: ``text`` after ``conversation``.

        Returns the answer and the conversation it ends with.
        """
        definition = self.definition
        handle = await self._worker()
        spec = AgentRunSpec(
            agent_id=self.agent_id,
            system=definition.system,
            prompt=text,
            history=tuple(conversation),
            tools=tuple(name for name in definition.tools if name not in self._borrowed),
            mcp_tools=self._mcp_tools,
            preapproved_tools=tuple(t for t in definition.tools if self.policy.always_allows(t)),
            max_turns=definition.max_turns,
            cwd=self._env.cwd,
            model=definition.model.model,
        )
        self._round = round_ = _Round()
        try:
            with round_.scope:
                outcome = await handle.request(AGENT_RUN, spec)
            if round_.failure is not None:
                raise round_.failure
        except WorkerExitedError as exc:
            await self._release_worker()
            raise ActorCrashedError(definition.label, exc.exit.reason) from None
        except WorkerRequestError as exc:
            raise ActorAskFailedError(definition.label, f"{exc.code}: {exc.message}") from None
        finally:
            self._round = None
            if round_.call_scope is not None:
                # The worker cannot cancel its own request; the provider's
                # answer would come to nobody, and hold the next ask's call.
                round_.call_scope.cancel()
            spent.calls += round_.calls
            spent.tool_calls += round_.tool_calls
            spent.usage = spent.usage + round_.usage
        if outcome.status != "completed":
            raise ActorAskFailedError(
                definition.label,
                f"it reached its limit of {definition.max_turns} model turns without a final "
                "answer; give it more with agent(..., max_turns=N) or ask for less at once",
            )
        result = round_.last_result
        sent = round_.last_request
        # The model's last request holds the conversation the worker ran; it
        # must continue this actor's, or the worker is not telling the truth.
        if result is None or list(sent[: len(conversation)]) != conversation:
            raise ActorAskFailedError(
                definition.label, "its worker's conversation does not continue the actor's"
            )
        reply = ChatMessage(role="assistant", content=result.text, tool_calls=result.tool_calls)
        return outcome.text, [*sent, reply]

    @property
    def _mcp_names(self) -> frozenset[str]:
        return frozenset(spec.name for spec in self._mcp_tools)

    # -- the worker -----------------------------------------------------------------

    async def _worker(self) -> WorkerHandle:
        if self._handle is not None and self._handle.alive:
            return self._handle
        host = self._env.host
        try:
            # An actor runs model-driven tools like any subagent: the same
            # sandbox a subagent with its tools would get (S-SBX-1).
            sandbox = choose_sandbox(
                None,
                self.definition.tools,
                host.settings.sandbox,
                project_dir=Path(self._env.cwd),
                home=host.home,
            )
            handle = await host.fleet.spawn(
                host.settings.subagent_limits,
                sandbox=sandbox,
                handler=host.requests.handler(self._request_policy()),
            )
        except SubvisorError as exc:
            raise ActorAskFailedError(
                self.definition.label, f"its worker could not be started: {exc}"
            ) from None
        self._handle = handle
        self._env.nursery.start_soon(self._drain_events, handle)
        if self._env.observer is not None:
            self._env.observer.started(self, handle)
        return handle

    async def _drain_events(self, handle: WorkerHandle) -> None:
        # The conversation comes from the model calls; events only tell which
        # process groups Bash started, to kill with the worker. They must be
        # read anyway: an unread event channel would stall the worker's pipe.
        while True:
            try:
                batch = await handle.receive_event_batch()
            except WorkerExitedError:
                return
            for event in batch:
                if isinstance(event.data, ProcessGroupStarted):
                    handle.process_groups.add(event.data.pgid)

    async def _release_worker(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        with trio.CancelScope(shield=True):
            if handle.alive:
                await handle.shutdown(grace_s=2.0)
            else:
                await handle.wait()
        handle.process_groups.kill()

    async def close(self, stopped: str | None = None) -> None:
        """Stop the worker (if any); the run calls this when it ends (``stopped``: why, if so)."""
        await self._release_worker()
        if self._env.observer is not None:
            if stopped is not None:
                self._env.observer.ended(self, "killed", stopped)
            elif self.last_error is not None:
                self._env.observer.ended(self, "failed", self.last_error)
            else:
                self._env.observer.ended(self, "completed", None)

    async def stop_worker(self, reason: str) -> None:
        """Kill the worker now: its pending ask fails (``ActorCrashedError``), the run goes on."""
        handle = self._handle
        if handle is not None and handle.alive:
            await handle.kill(reason)

    # -- what the worker asks of the supervisor -------------------------------------

    def _request_policy(self) -> AgentRequestPolicy:
        """How its worker is answered: its own tools and loans, no coordinator, no person."""
        return AgentRequestPolicy(
            holder=self,
            requester=self._requester,
            prepare_model_call=self._prepare_model_call,
            record_model_result=self._record_model_result,
            tools=frozenset(self.definition.tools).union(
                (ESCALATE_QUESTION_SPEC.name,) if self._env.escalations is not None else ()
            ),
            mcp_tools=self._mcp_names,
            no_coordinator="an actor has no coordinator; put everything in its answer",
            no_questions=(
                "an actor cannot ask questions: a script, not a person, reads its "
                "answers (S-ACT-4); decide for yourself and say what you assumed"
            ),
            escalate=self._escalate if self._env.escalations is not None else None,
            no_escalation=(
                "this workflow runs from `subvisor workflow run`: no agent created it, so "
                "nobody answers escalations; decide for yourself and say what you assumed"
            ),
        )

    async def _escalate(self, escalation: WorkflowEscalation) -> WorkflowEscalationAnswer:
        round_, desk = self._round, self._env.escalations
        if round_ is None or desk is None:
            raise RequestRefusedError("no_ask", "this actor is not being asked anything")
        try:
            answer = await desk.escalate(self._env.run_id, self.definition.label, escalation)
        except EscalationUnansweredError as exc:
            # The script hears of it: the ask fails, and the turn stops here.
            round_.failure = exc
            round_.scope.cancel()
            raise RequestRefusedError("escalation_unanswered", str(exc)) from None
        return WorkflowEscalationAnswer(answer=answer)

    def _prepare_model_call(self, asked: ModelRequest, scope: trio.CancelScope) -> ModelRequest:
        round_ = self._round
        if round_ is None:
            raise RequestRefusedError("no_ask", "this actor is not being asked anything")
        definition = self.definition
        # S-PROF-7: the supervisor keeps each agent.run's turn limit, whatever
        # the worker does; a call counts as it starts, and one at a time.
        if any(
            calling.call_scope is not None and not calling.call_scope.cancel_called
            for calling in self._calling.values()
        ):
            raise RequestRefusedError(
                "model_call_in_flight", "this actor's previous model call has not ended"
            )
        if round_.calls >= definition.max_turns:
            raise RequestRefusedError(
                "max_turns", f"this ask has made its {definition.max_turns} model turns"
            )
        # The worker is untrusted: model, instructions, tools and scenario
        # position are the supervisor's, whatever the worker put there.
        earlier = sum(1 for m in asked.messages if m.role == "assistant")
        call = asked.model_copy(
            update={
                "model": definition.model.model,
                "system": definition.system,
                "tools": self.tool_specs,
                "agent_keys": definition.agent_keys,
                "call_index": earlier + self._lost_calls,
            }
        )
        round_.calls += 1
        round_.call_scope = scope
        self._calling[id(asked)] = round_
        return call

    def _record_model_result(self, asked: ModelRequest, result: ModelResult | None) -> None:
        round_ = self._calling.pop(id(asked), None)
        if round_ is None or result is None:
            return  # a failed or cut-off call: counted as it started, its cost unknown
        if round_ is not self._round:
            # Its ask ended while the model answered: the actor still paid for it.
            self.spent = self.spent + result.usage
            return
        round_.tool_calls += len(result.tool_calls)
        round_.usage = round_.usage + result.usage
        round_.last_request = asked.messages
        round_.last_result = result
