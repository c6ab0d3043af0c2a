"""The ``agent.run`` and ``agent.steer`` commands: run one agent in this worker, and
steer it while it runs (S-MSG-1).
"""

from __future__ import annotations

from pathlib import Path

from protocol import (
    AGENT_RUN,
    AGENT_STEER,
    PROCESS_GROUP,
    AgentOutcome,
    AgentRunSpec,
    ProcessGroupStarted,
    SteerMessage,
    SteerReceipt,
)

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
from ._commands import Command, CommandContext, CommandError, command_table
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


def _steer(message: SteerMessage, ctx: CommandContext) -> SteerReceipt:
    if _inbox.pending is None:
        return SteerReceipt(delivered=False, reason="no active turn")
    _inbox.pending.append(message.text)
    return SteerReceipt(delivered=True)


async def _run_agent(spec: AgentRunSpec, ctx: CommandContext) -> AgentOutcome:
    events = PipeEventSink(ctx.link)

    def report_process_group(pgid: int) -> None:
        # Bash runs each command in its own process group, out of reach of a
        # kill of this worker's group: the supervisor must learn of it.
        ctx.link.emit_soon(PROCESS_GROUP, ProcessGroupStarted(pgid=pgid))

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
        return await loop.run(spec.prompt)
    except SupervisorError as exc:
        raise CommandError(exc.code, exc.message) from None
    finally:
        _inbox.pending = None


AGENT_COMMANDS = command_table(Command(AGENT_RUN, _run_agent), Command(AGENT_STEER, _steer))
