"""The ports of an agent running in a worker: each one a method of the protocol's table.

The agent runtime (``worker.agent``) knows nothing of pipes; these adapters
give it a model, approvals, events and host tools that all cross to the
supervisor. Input the model wrote is validated here against the method's
params model first: a bad input is the model's mistake, answered as a tool
error it can fix, never a malformed request (which would be a protocol
violation and end this worker).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from protocol import (
    COORDINATOR_MESSAGE,
    MCP_CALL_TOOL,
    MODEL_CALL,
    PERMISSION_CHECK,
    USER_QUESTION,
    WORKFLOW_ESCALATE,
    CoordinatorMessage,
    EventSpec,
    McpToolCall,
    ModelRequest,
    ModelResult,
    PermissionCheck,
    PermissionVerdict,
    ToolCall,
    ToolSpec,
    UserQuestion,
    WorkflowEscalation,
)

from ._channel import SupervisorError, SupervisorLink
from .agent import (
    ASK_USER_QUESTION_SPEC,
    ESCALATE_QUESTION_SPEC,
    RESPOND_TO_COORDINATOR_SPEC,
    commit_fault,
)
from .tools import ToolOutput, resolve_tool_name

__all__ = [
    "AskUserQuestionTool",
    "BorrowedMcpTool",
    "CoordinatorReplyTool",
    "EscalateQuestionTool",
    "McpLifecycleError",
    "PipeApprovalPort",
    "PipeEventSink",
    "PipeModelPort",
]


D = TypeVar("D", bound=BaseModel)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "input"
    return f"{where}: {error['msg']}"


class PipeModelPort:
    """Model calls go to the supervisor, which holds the keys and picks the model."""

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def call(self, request: ModelRequest) -> ModelResult:
        """Ask the supervisor's gateway; commit the fault a scripted turn orders."""
        # The supervisor offers the model the tools it gave this agent; the
        # specs need not cross the pipe on every call.
        result = await self._link.call(MODEL_CALL, request.model_copy(update={"tools": ()}))
        if result.fault is not None:
            await commit_fault(result.fault, self._link)
        return result


class PipeEventSink:
    """Events become ``event`` frames to the supervisor."""

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def emit(self, event: EventSpec[D], data: D) -> None:
        """Send one event frame."""
        await self._link.emit(event, data)


class PipeApprovalPort:
    """Each tool call is checked by the supervisor, which holds the rules.

    Tools the supervisor pre-approved (its rules allow every call of them)
    skip the round trip.
    """

    def __init__(self, link: SupervisorLink, preapproved: tuple[str, ...] = ()) -> None:
        self._link = link
        self._preapproved = frozenset(preapproved)

    async def authorize(self, call: ToolCall) -> PermissionVerdict:
        """Ask the supervisor; a preapproved tool runs unasked (no search is, under a read deny)."""
        if (resolve_tool_name(call.name) or call.name) in self._preapproved:
            return PermissionVerdict(allowed=True)
        try:
            check = PermissionCheck(tool=call.name, input=call.input)
        except ValidationError as exc:
            return PermissionVerdict(
                allowed=False, reason=f"this tool call cannot be checked ({_first_error(exc)})"
            )
        verdict = await self._link.call(PERMISSION_CHECK, check)
        if verdict.allowed or verdict.reason:
            return verdict
        return verdict.model_copy(update={"reason": "the supervisor refused this tool call"})


class CoordinatorReplyTool:
    """RespondToCoordinator: a child's message to the agent that launched it (S-MSG-2)."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = True
    spec = RESPOND_TO_COORDINATOR_SPEC

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Queue the message in the coordinator's command queue."""
        message = call.input.get("message")
        if not isinstance(message, str) or not message.strip():
            return ToolOutput("Error: RespondToCoordinator needs a non-empty 'message'.", True)
        await self._link.call(COORDINATOR_MESSAGE, CoordinatorMessage(text=message))
        return ToolOutput("Sent to your coordinator.")


class McpLifecycleError(RuntimeError):
    """A worker tried to manage an MCP connection it only borrows."""


class BorrowedMcpTool:
    """An MCP tool of the supervisor's session; calls cross the pipe (S-MCP-1).

    The worker holds no connection: ``connect``/``disconnect`` raise, and
    ``close`` does nothing, since the parent owns the session.
    """

    aliases: tuple[str, ...] = ()
    concurrency_safe = False

    def __init__(self, link: SupervisorLink, spec: ToolSpec) -> None:
        self._link = link
        self.spec = spec

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Run the tool on the parent's session."""
        try:
            params = McpToolCall(name=self.spec.name, arguments=call.input)
        except ValidationError as exc:
            return ToolOutput(f"Error: invalid arguments ({_first_error(exc)}).", True)
        result = await self._link.call(MCP_CALL_TOOL, params)
        return ToolOutput(result.text, result.is_error)

    async def connect(self) -> None:
        """Refused: the connection belongs to the parent."""
        raise McpLifecycleError("a subagent borrows its parent's MCP session; it cannot connect")

    async def disconnect(self) -> None:
        """Refused: the connection belongs to the parent."""
        raise McpLifecycleError("a subagent borrows its parent's MCP session; it cannot disconnect")

    async def close(self) -> None:
        """Nothing to do: the parent closes its own sessions."""


class AskUserQuestionTool:
    """AskUserQuestion in a worker: the question goes to the root's handler (S-APR-1)."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = False
    spec = ASK_USER_QUESTION_SPEC

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Ask through the supervisor and wait."""
        try:
            question = UserQuestion.model_validate(call.input)
        except ValidationError as exc:
            return ToolOutput(
                f"Error: AskUserQuestion needs a non-empty 'question' and string 'options' "
                f"({_first_error(exc)}).",
                True,
            )
        answer = await self._link.call(USER_QUESTION, question)
        if answer.answer is not None:
            return ToolOutput(f"The user answered: {answer.answer}")
        return ToolOutput(f"Error: {answer.reason or 'the question could not be asked'}", True)


class EscalateQuestionTool:
    """EscalateQuestion: a workflow actor's question for the workflow's creator.

    Only an actor's supervisor answers it; for any other agent the request
    is refused, and the refusal is the tool's error.
    """

    aliases: tuple[str, ...] = ()
    concurrency_safe = False
    spec = ESCALATE_QUESTION_SPEC

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Escalate and wait for the creator's answer."""
        try:
            question = WorkflowEscalation.model_validate(call.input)
        except ValidationError as exc:
            return ToolOutput(
                f"Error: EscalateQuestion needs a non-empty 'question' ({_first_error(exc)}).",
                True,
            )
        try:
            answer = await self._link.call(WORKFLOW_ESCALATE, question)
        except SupervisorError as exc:
            return ToolOutput(f"Error: {exc.message}", True)
        return ToolOutput(f"The workflow's creator answered: {answer.answer}")
