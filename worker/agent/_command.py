"""The ``agent.run`` command: run one agent in this worker and return its outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from protocol import AgentRunSpec

from .._channel import SupervisorError
from .._commands import CommandContext, CommandError, CommandHandler
from ..tools import LocalToolSet, ToolContext
from ._loop import AgentLoop
from ._toolbox import Toolbox
from ._worker_ports import PipeApprovalPort, PipeEventSink, PipeModelPort

__all__ = ["AGENT_COMMANDS"]


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
            approvals=PipeApprovalPort(ctx.link, spec.preapproved_tools),
        ),
        events=events,
        system=spec.system,
        model_name=spec.model,
        max_turns=spec.max_turns,
        history=spec.history,
    )
    try:
        outcome = await loop.run(spec.prompt)
    except SupervisorError as exc:
        raise CommandError(exc.code, exc.message) from None
    return outcome.model_dump(mode="python")


AGENT_COMMANDS: dict[str, CommandHandler] = {"agent.run": _run_agent}
