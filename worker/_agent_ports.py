"""The ports of an agent running inside a worker: everything crosses the pipe."""

from __future__ import annotations

from typing import Any

from protocol import ModelRequest, ModelResult, ToolCall, ToolSpec

from .._channel import SupervisorLink
from ..tools import ToolOutput, resolve_tool_name
from ._faults import commit_fault

__all__ = [
    "ASK_USER_QUESTION_SPEC",
    "AskUserQuestionTool",
    "BorrowedMcpTool",
    "CoordinatorReplyTool",
    "McpLifecycleError",
    "PipeApprovalPort",
    "PipeEventSink",
    "PipeModelPort",
]


class PipeModelPort:
    """Model calls go to the supervisor, which holds the keys and picks the model."""

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def call(self, request: ModelRequest) -> ModelResult:
        """Ask the supervisor's gateway; commit the fault a scripted turn orders."""
        # The supervisor offers the model the tools it gave this agent; the
        # specs need not cross the pipe on every call.
        slim = request.model_copy(update={"tools": ()})
        raw = await self._link.request("model.call", slim.model_dump(mode="python"))
        result = ModelResult.model_validate(raw)
        if result.fault is not None:
            await commit_fault(result.fault, self._link.emit)
        return result


class PipeEventSink:
    """Events become ``event`` frames to the supervisor."""

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def emit(self, name: str, data: dict[str, Any]) -> None:
        """Send one event frame."""
        await self._link.emit(name, data)


class PipeApprovalPort:
    """Each tool call is checked by the supervisor, which holds the rules.

    Tools the supervisor pre-approved (its rules allow every call of them)
    skip the round trip.
    """

    def __init__(self, link: SupervisorLink, preapproved: tuple[str, ...] = ()) -> None:
        self._link = link
        self._preapproved = frozenset(preapproved)

    async def authorize(self, call: ToolCall) -> str | None:
        """Ask the supervisor; ``None`` when the call may run."""
        if (resolve_tool_name(call.name) or call.name) in self._preapproved:
            return None
        answer = await self._link.request(
            "permission.check", {"tool": call.name, "input": call.input}
        )
        if isinstance(answer, dict) and answer.get("allowed") is True:
            return None
        reason = answer.get("reason") if isinstance(answer, dict) else None
        return str(reason or "the supervisor refused this tool call")


class CoordinatorReplyTool:
    """RespondToCoordinator: a child's message to the agent that launched it (S-MSG-2)."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = True
    spec = ToolSpec(
        name="RespondToCoordinator",
        description=(
            "Send a message to the agent that launched you (your coordinator) while you keep "
            "working: progress, a question, or an early finding. Your final answer still goes "
            "in your last message."
        ),
        input_schema={
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to tell it."}},
            "required": ["message"],
            "additionalProperties": False,
        },
    )

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Queue the message in the coordinator's command queue."""
        message = call.input.get("message")
        if not isinstance(message, str) or not message.strip():
            return ToolOutput("Error: RespondToCoordinator needs a non-empty 'message'.", True)
        await self._link.request("coordinator.message", {"text": message})
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
        answer = await self._link.request(
            "mcp.call_tool", {"name": self.spec.name, "arguments": dict(call.input)}
        )
        if not isinstance(answer, dict):
            return ToolOutput("Error: malformed answer from the supervisor.", True)
        return ToolOutput(str(answer.get("text", "")), bool(answer.get("is_error")))

    async def connect(self) -> None:
        """Refused: the connection belongs to the parent."""
        raise McpLifecycleError("a subagent borrows its parent's MCP session; it cannot connect")

    async def disconnect(self) -> None:
        """Refused: the connection belongs to the parent."""
        raise McpLifecycleError("a subagent borrows its parent's MCP session; it cannot disconnect")

    async def close(self) -> None:
        """Nothing to do: the parent closes its own sessions."""


ASK_USER_QUESTION_SPEC = ToolSpec(
    name="AskUserQuestion",
    description=(
        "Ask the user a question and wait for the answer: for a choice only they can make. "
        "Offer options when the answer is one of a few."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)


class AskUserQuestionTool:
    """AskUserQuestion in a worker: the question goes to the root's handler (S-APR-1)."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = False
    spec = ASK_USER_QUESTION_SPEC

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Ask through the supervisor and wait."""
        answer = await self._link.request("user.question", dict(call.input))
        if isinstance(answer, dict) and isinstance(answer.get("answer"), str):
            return ToolOutput(f"The user answered: {answer['answer']}")
        reason = answer.get("reason") if isinstance(answer, dict) else None
        return ToolOutput(f"Error: {reason or 'the question could not be asked'}", True)
