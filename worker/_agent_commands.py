"""The ``agent.run`` and ``agent.steer`` commands: run one agent in this worker, and
steer it while it runs (S-MSG-1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from protocol import AgentRunSpec

from ._agent_ports import (
    AskUserQuestionTool,
    BorrowedMcpTool,
    CoordinatorReplyTool,
    EscalateQuestionTool,
    PipeApprovalPort,
    PipeEventSink,
    PipeModelPort,
)
from ._channel import SupervisorError
from ._commands import CommandContext, CommandError, CommandHandler
from .agent import AgentLoop, Toolbox
from .tools import LocalToolSet, ToolContext

__all__ = ["AGENT_COMMANDS"]


#: How a parent's steering message is put to the child (S-MSG-3, coordinator_steer).
STEER_TEMPLATE = (
    "<coordinator-message>\n{text}\n</coordinator-message>\n"
    "Your coordinator sent this while you were working. Address this before completing "
    "your current task."
)


class _SteeringInbox:
    """Messages for the agent running in this worker; None between runs (no active turn)."""

    def __init__(self) -> None:
        self.pending: list[str] | None = None

    async def take(self) -> list[str]:
        if not self.pending:
            return []
        taken, self.pending = self.pending, []
        return [STEER_TEMPLATE.format(text=text) for text in taken]


_inbox = _SteeringInbox()


async def _steer(params: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
    text = params.get("text")
    if not isinstance(text, str) or not text.strip():
        raise CommandError("bad_params", "agent.steer needs a non-empty 'text'")
    if _inbox.pending is None:
        return {"delivered": False, "reason": "no active turn"}
    _inbox.pending.append(text)
    return {"delivered": True}


async def _run_agent(params: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
    try:
        spec = AgentRunSpec.model_validate(params)
    except ValidationError as exc:
        raise CommandError("bad_params", f"invalid agent.run spec: {exc}") from None
    events = PipeEventSink(ctx.link)

    def report_process_group(pgid: int) -> None:
        # Bash runs each command in its own process group, out of reach of a
        # kill of this worker's group: the supervisor must learn of it.
        ctx.link.emit_soon("process_group", {"pgid": pgid})

    context = ToolContext(
        cwd=Path(spec.cwd),
        max_output_bytes=spec.max_tool_output_bytes,
        on_process_group=report_process_group,
    )
    loop = AgentLoop(
        model=PipeModelPort(ctx.link),
        tools=Toolbox(
            LocalToolSet(spec.tools),
            context,
            [
                CoordinatorReplyTool(ctx.link),
                AskUserQuestionTool(ctx.link),
                EscalateQuestionTool(ctx.link),
                *(BorrowedMcpTool(ctx.link, mcp_spec) for mcp_spec in spec.mcp_tools),
            ],
            approvals=PipeApprovalPort(ctx.link, spec.preapproved_tools),
        ),
        events=events,
        system=spec.system,
        model_name=spec.model,
        max_turns=spec.max_turns,
        history=spec.history,
        between_steps=_inbox.take,
    )
    # Messages queued before the run started are delivered at its first step.
    _inbox.pending = list(spec.pending_messages)
    try:
        outcome = await loop.run(spec.prompt)
    except SupervisorError as exc:
        raise CommandError(exc.code, exc.message) from None
    finally:
        _inbox.pending = None
    return outcome.model_dump(mode="python")


AGENT_COMMANDS: dict[str, CommandHandler] = {"agent.run": _run_agent, "agent.steer": _steer}
