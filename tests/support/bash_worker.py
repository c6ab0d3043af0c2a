"""A bare kernel ``Supervisor`` whose worker runs one Bash command as a model would ask.

For tests of the kernel's own guarantees (caps over the tree, no survivors),
with no delegation layer in between: the request handler plays the model,
asks for one Bash call, then answers with the tool's result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from protocol import (
    AGENT_RUN,
    AgentRunSpec,
    ModelCallRequest,
    ModelResult,
    ToolCall,
    WorkerRequest,
)
from supervisor import WorkerHandle
from supervisor.kernel._errors import WorkerExitedError

__all__ = ["bash_model", "run_bash"]


def bash_model(command: str, timeout_ms: int = 600_000) -> Any:
    """A request handler that plays a model asking for one Bash ``command``."""

    async def handle(_: WorkerHandle, request: WorkerRequest) -> ModelResult:
        assert isinstance(request, ModelCallRequest), request
        results = [m for m in request.params.messages if m.role == "tool"]
        if not results:
            call = ToolCall(id="t1", name="Bash", input={"command": command, "timeout": timeout_ms})
            return ModelResult(tool_calls=(call,))
        return ModelResult(text=results[0].content)

    return handle


async def run_bash(handle: WorkerHandle, cwd: Path) -> str | None:
    """Run the agent in ``handle``'s worker; its answer, or None if the worker ended first."""
    spec = AgentRunSpec(
        agent_id="a", system="", prompt="go", tools=("Bash",),
        preapproved_tools=("Bash",), cwd=str(cwd),
    )  # fmt: skip
    try:
        outcome = await handle.request(AGENT_RUN, spec)
    except (WorkerExitedError, trio.BrokenResourceError):
        return None
    return outcome.text
