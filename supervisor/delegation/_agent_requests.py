"""``AgentRequestServer``: the supervisor's side of every agent worker's requests.

A subagent run and a workflow actor both drive an agent in a worker, and
their workers ask the same things of the supervisor (``protocol``'s method
table): a model call, a permission check, a borrowed MCP call, a question,
a message for the coordinator. One server answers them all; what differs
between a subagent and an actor is stated in the ``AgentRequestPolicy`` each
gives its worker's handler, not in a dispatcher of its own.

Invariants:

- The worker is untrusted: the model, instructions, tools, scenario keys
  and call index of a model call are the policy's, whatever the worker sent;
  its effort is the model string's, its temperature the provider's default,
  and it asks for at most ``MODEL_MAX_TOKENS`` tokens.
- Every model call the policy lets start is accounted once it ends, also one
  that failed or was cut off by the worker's exit (S-PROF-7, S-SEC-8).
- A request that makes the supervisor record or queue something costs the
  worker one event of its budget (S-SEC-8), and a coordinator message the
  size it adds to the parent's transcript; once the budget is spent every
  such request is refused with why. An agent's coordinator messages past
  ``MAX_MESSAGES_PER_AGENT`` are refused too.
- A borrowed MCP tool runs only when the agent's rules allow that call
  (S-SEC-1, S-MCP-1): an honest worker's ``permission.check`` that allowed
  it (asked the user, perhaps) is consumed by the one call with the same
  name and input; a call without one is decided here as a check would be.
- A worker only ever reaches what its policy lends it: MCP tools by name,
  tools by name when the policy lists them, the desk with its own identity,
  a workflow's creator only when it is that workflow's actor (``escalate``).
  A workflow script's own calls (declare an actor, ask it) are never
  answered here: only the script host answers them, for its script worker.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio
from pydantic import BaseModel

from protocol import (
    CoordinatorMessageRequest,
    CoordinatorReceipt,
    EchoRequest,
    McpToolCallRequest,
    McpToolResult,
    ModelCallRequest,
    ModelRequest,
    ModelResult,
    PermissionCheckRequest,
    PermissionVerdict,
    QuestionAnswer,
    UserQuestionRequest,
    WorkerRequest,
    WorkflowAskRequest,
    WorkflowDeclareActorRequest,
    WorkflowEscalateRequest,
    WorkflowEscalation,
    WorkflowEscalationAnswer,
)
from worker.tools import resolve_tool_name

from ..kernel import (
    EventBudgetExceededError,
    RequestHandler,
    RequestRefusedError,
    WorkerHandle,
    default_request_handler,
    text_size,
)
from ..policy._approval_desk import ApprovalDesk
from ..policy._approvals import Requester
from ..policy._policy import PolicyHolder
from ..providers import ModelError, ModelGateway
from ..state._store import SessionStore
from ._mcp import McpHub
from ._notifications import message_cost

__all__ = ["MAX_MCP_GRANTS", "MODEL_MAX_TOKENS", "AgentRequestPolicy", "AgentRequestServer"]

#: The most tokens a worker's model call may ask for: what an honest worker
#: asks (it never sets ``max_tokens``); there is no setting to raise it.
MODEL_MAX_TOKENS: int = ModelRequest.model_fields["max_tokens"].default

#: Requests that make the supervisor record or queue something (S-SEC-8).
_RECORDING = (
    PermissionCheckRequest,
    CoordinatorMessageRequest,
    McpToolCallRequest,
    UserQuestionRequest,
    WorkflowEscalateRequest,
)


#: The most allowed checks of MCP calls one agent's worker holds unspent; past
#: it the oldest is dropped (its call, if it comes, is decided afresh).
MAX_MCP_GRANTS: int = 16


class McpGrants:
    """Allowed permission checks of borrowed MCP calls, each spent by one call.

    Keyed by the tool's name and its input's canonical JSON, so a grant
    covers exactly the call that was checked, once.
    """

    def __init__(self) -> None:
        self._held: collections.deque[tuple[str, str]] = collections.deque(maxlen=MAX_MCP_GRANTS)

    @staticmethod
    def _key(tool: str, tool_input: object) -> tuple[str, str] | None:
        try:
            text = json.dumps(tool_input, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return None  # never granted: such a call is decided when it comes
        return tool, hashlib.sha256(text.encode()).hexdigest()

    def grant(self, tool: str, tool_input: object) -> None:
        """Record that this call was allowed."""
        key = self._key(tool, tool_input)
        if key is not None:
            self._held.append(key)

    def consume(self, tool: str, tool_input: object) -> bool:
        """Spend a grant of this call; False when none is held."""
        key = self._key(tool, tool_input)
        if key is None:
            return False
        try:
            self._held.remove(key)
        except ValueError:
            return False
        return True


@dataclass(slots=True)
class AgentRequestPolicy:
    """How one agent's worker is answered: whose rules, which tools, which model.

    ``prepare_model_call`` turns the worker's model request into the call
    the gateway makes and counts it as started (it may refuse with
    ``RequestRefusedError``: past the agent's turns, or while another of
    its calls is in flight); it gets the call's cancel scope, which its owner
    cancels once the turn the call was made for has ended (the worker cannot
    cancel a request of its own). ``record_model_result`` is then called once,
    however the call ends, with its answer (None: it failed or was cut off,
    and what it cost is unknown). ``tools`` lists the tools a
    permission check may name (None: the rules alone decide). ``coordinator``
    queues a message for the agent's parent; ``no_coordinator`` says why
    there is none. ``no_questions``, when set, is the answer to every
    question: nobody who could answer reads this agent's questions.
    ``on_model_text`` receives the answer's text as it streams (never sent
    to the worker), ``on_model_wait`` whether a call waits for a model slot.
    ``escalate`` puts a workflow actor's question to the workflow's creator
    and returns the answer (None: this agent is no workflow's actor).
    ``mcp_grants`` holds its worker's allowed checks of MCP calls not yet made.
    """

    holder: PolicyHolder
    requester: Requester
    prepare_model_call: Callable[[ModelRequest, trio.CancelScope], ModelRequest]
    record_model_result: Callable[[ModelRequest, ModelResult | None], None]
    tools: frozenset[str] | None = None
    mcp_tools: frozenset[str] = frozenset()
    #: Where progress of its MCP calls is recorded (None: nowhere).
    mcp_progress_session: str | None = None
    coordinator: Callable[[str], None] | None = None
    no_coordinator: str = "this agent has no coordinator; put everything in its answer"
    no_questions: str | None = None
    on_model_text: Callable[[str], None] | None = None
    on_model_wait: Callable[[bool], None] | None = None
    escalate: Callable[[WorkflowEscalation], Awaitable[WorkflowEscalationAnswer]] | None = None
    no_escalation: str = (
        "EscalateQuestion is for actors of a workflow a root agent created; nobody here "
        "answers it: decide for yourself and say what you assumed"
    )
    mcp_grants: McpGrants = dataclasses.field(default_factory=McpGrants)


class AgentRequestServer:
    """Answers agent workers' requests with the gateway, the desk, the MCP hub and the store."""

    def __init__(
        self,
        *,
        gateway: ModelGateway,
        desk: ApprovalDesk,
        mcp: McpHub,
        store: SessionStore,
    ) -> None:
        self._gateway = gateway
        self._desk = desk
        self._mcp = mcp
        self._store = store

    def handler(self, policy: AgentRequestPolicy) -> RequestHandler:
        """The request handler of one agent's worker (``Supervisor.spawn(handler=)``)."""

        async def serve(handle: WorkerHandle, request: WorkerRequest) -> BaseModel:
            return await self.serve(policy, handle, request)

        return serve

    async def serve(
        self, policy: AgentRequestPolicy, handle: WorkerHandle, request: WorkerRequest
    ) -> BaseModel:
        """Answer one request of ``handle``'s worker under ``policy``."""
        try:
            if isinstance(request, _RECORDING):
                handle.budget.charge(events=1)
            if isinstance(request, ModelCallRequest):
                return await self._call_model(policy, request.params)
            if isinstance(request, PermissionCheckRequest):
                return await self._check_permission(policy, handle, request)
            if isinstance(request, McpToolCallRequest):
                return await self._call_mcp(policy, handle, request)
            if isinstance(request, UserQuestionRequest):
                if policy.no_questions is not None:
                    return QuestionAnswer(reason=policy.no_questions)
                requester = dataclasses.replace(policy.requester, budget=handle.budget)
                return await self._desk.ask(request.params, requester)
            if isinstance(request, CoordinatorMessageRequest):
                if policy.coordinator is None:
                    raise RequestRefusedError("not_available", policy.no_coordinator)
                # The text waits in memory, then joins the parent's transcript: the
                # budget is charged what it adds there, framing included (S-SEC-8).
                # Past its message cap the parent's queue refuses it, saying why.
                text = request.params.text
                handle.budget.charge(size=text_size(text) - len(text) + message_cost(text))
                policy.coordinator(text)
                return CoordinatorReceipt()
            if isinstance(request, WorkflowEscalateRequest):
                if policy.escalate is None:
                    raise RequestRefusedError("not_available", policy.no_escalation)
                asked = request.params
                handle.budget.charge(
                    size=text_size(asked.question) + sum(map(text_size, asked.options))
                )
                return await policy.escalate(request.params)
            if isinstance(request, WorkflowDeclareActorRequest | WorkflowAskRequest):
                raise RequestRefusedError(
                    "not_available",
                    f"{request.method} is a workflow script's call; an agent cannot make it",
                )
            assert isinstance(request, EchoRequest), request
            return await default_request_handler(handle, request)
        except EventBudgetExceededError as exc:
            # The worker's handle stops it; until then it is told why.
            raise RequestRefusedError("event_budget", str(exc)) from None

    async def _call_model(self, policy: AgentRequestPolicy, asked: ModelRequest) -> ModelResult:
        scope = trio.CancelScope()
        prepared = policy.prepare_model_call(asked, scope)
        # Sampling is the user's choice, never the worker's: the effort of the
        # launch's model string ("$effort"), the provider's temperature, and
        # no more tokens than an honest worker asks for.
        call = prepared.model_copy(
            update={
                "effort": None,
                "temperature": None,
                "max_tokens": max(1, min(prepared.max_tokens, MODEL_MAX_TOKENS)),
            }
        )
        result: ModelResult | None = None
        try:
            with scope:
                result = await self._gateway.call(
                    call, policy.on_model_text, on_wait=policy.on_model_wait
                )
        except ModelError as exc:
            raise RequestRefusedError("model_error", str(exc)) from None
        finally:
            # Also when the worker's exit cancels the call: the provider got it.
            policy.record_model_result(asked, result)
        if result is None:
            raise RequestRefusedError(
                "model_call_cancelled", "the turn this model call was made for has ended"
            )
        return result

    async def _check_permission(
        self, policy: AgentRequestPolicy, handle: WorkerHandle, request: PermissionCheckRequest
    ) -> PermissionVerdict:
        tool, tool_input = request.params.tool, request.params.input
        if policy.tools is not None and (resolve_tool_name(tool) or tool) not in policy.tools:
            return PermissionVerdict(
                allowed=False, reason=f"{tool} is not one of this agent's tools"
            )
        verdict = await self._decide(policy, handle, tool, tool_input)
        if verdict.allowed and tool in policy.mcp_tools:
            policy.mcp_grants.grant(tool, tool_input)
        return verdict

    async def _decide(
        self,
        policy: AgentRequestPolicy,
        handle: WorkerHandle,
        tool: str,
        tool_input: Mapping[str, Any],
    ) -> PermissionVerdict:
        requester = dataclasses.replace(policy.requester, budget=handle.budget)
        decision = await self._desk.authorize(policy.holder, tool, tool_input, requester)
        return policy.holder.policy.verdict(tool, decision)

    async def _call_mcp(
        self, policy: AgentRequestPolicy, handle: WorkerHandle, request: McpToolCallRequest
    ) -> McpToolResult:
        name = request.params.name
        if name not in policy.mcp_tools:
            raise RequestRefusedError("not_lent", f"{name} was not lent to this agent")
        arguments = request.params.arguments
        if not policy.mcp_grants.consume(name, arguments):
            # No check allowed this very call (a preapproved tool skips it, a
            # hostile worker may too): the rules decide it now, asking if they say so.
            verdict = await self._decide(policy, handle, name, arguments)
            if not verdict.allowed:
                raise RequestRefusedError(
                    "permission_denied", verdict.reason or f"{name} is not allowed"
                )
        session, budget = policy.mcp_progress_session, handle.budget
        if session is None:
            return await self._mcp.call(name, request.params.arguments)

        async def progress(done: float, total: float | None, message: str | None) -> None:
            # Progress of the parent's MCP session becomes the child's events.
            with contextlib.suppress(EventBudgetExceededError):  # its worker is being stopped
                self._store.append_event(
                    session,
                    "mcp.progress",
                    {"tool": name, "progress": done, "total": total},
                    budget=budget,
                )

        return await self._mcp.call(name, request.params.arguments, on_progress=progress)
