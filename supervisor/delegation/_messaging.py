"""``SendMessage``: the root talks to a subagent it launched (S-MSG-1).

Running: the message steers its current turn. Not started yet: queued and
given to it when it starts. Running but its turn ending (no active turn
after 21 tries, 10 ms apart): queued, and given to it in a new turn once
this one has ended. Finished: it is resumed from the session store in a new
worker for one more turn, in the background, and its end arrives as a
notification.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import ToolCall, ToolSpec
from worker.tools import ToolOutput

from ..state._store import SessionStore
from ..state._tasks import TaskRegistry
from ._agent_tool import AgentTool
from ._subagents import BackgroundSpawner, SubagentRun

__all__ = ["COORDINATOR_INPUT", "SendMessageTool"]

log = logging.getLogger("subvisor")

COORDINATOR_INPUT = (
    "<coordinator-message>\n{text}\n</coordinator-message>\n"
    "Your coordinator (the agent that launched you) sent this after your last answer."
)


class SendMessageTool:
    """The root's SendMessage tool."""

    aliases: Sequence[str] = ()
    concurrency_safe = True

    def __init__(
        self,
        session_id: str,
        agent_tool: AgentTool,
        *,
        runs: Mapping[str, SubagentRun],
        registry: TaskRegistry,
        store: SessionStore,
        spawn: BackgroundSpawner,
    ) -> None:
        """``runs``: the live runs by task id; ``registry`` then ``store``: the records
        of ended ones; ``agent_tool``: the session's, which resumes an ended agent."""
        self._session_id = session_id
        self._agent_tool = agent_tool
        self._runs = runs
        self._registry = registry
        self._store = store
        self._spawn = spawn
        self.spec = ToolSpec(
            name="SendMessage",
            description=(
                "Send a message to a subagent you launched, by its agentId. A running agent "
                "gets it during its current task; one that has finished is resumed with its "
                "earlier context for one more turn in the background, and you are notified "
                "when it is done."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "The agentId."},
                    "message": {"type": "string", "description": "What to tell it."},
                },
                "required": ["to", "message"],
                "additionalProperties": False,
            },
        )

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Deliver, queue, or resume."""
        to: Any = call.input.get("to")
        message: Any = call.input.get("message")
        if not isinstance(to, str) or not isinstance(message, str) or not message.strip():
            return ToolOutput("Error: SendMessage needs 'to' (an agentId) and a 'message'.", True)
        run = self._runs.get(to)
        if run is not None and run.launch.parent_session_id == self._session_id:
            outcome = await run.steer(message)
            if outcome == "delivered":
                return ToolOutput(f"delivered: agent {to} got the message during its turn.")
            if outcome == "queued":
                return ToolOutput(
                    f"queued: agent {to} has not started yet; it gets the message when it does."
                )
            if outcome == "undelivered":
                # S-MSG-1: delivery failed, so it is queued: the run holds it
                # until it ends, then a new turn starts with it.
                self._spawn(self._resume_after, run, message, call.id)
                return ToolOutput(
                    f"queued: agent {to} is ending its turn; it gets the message in a new "
                    "turn, in the background, once this one has ended."
                )
        record = self._registry.get(to) or self._store.find_task(
            to, parent_session_id=self._session_id
        )
        if record is None or record.parent_session_id != self._session_id:
            return ToolOutput(f"Error: no agent {to!r} was launched in this session.", True)
        if record.kind != "local_agent":
            return ToolOutput(f"Error: {to} is a shell command, not an agent.", True)
        resumed = await self._resume(record.task_id, record.description, message, call.id)
        if resumed.is_error:
            return resumed
        return ToolOutput(f"resumed_background: agent {to} had finished.\n{resumed.text}")

    async def _resume(
        self, task_id: str, description: str, message: str, tool_use_id: str | None
    ) -> ToolOutput:
        return await self._agent_tool.invoke(
            {
                "description": description,
                # S-MSG-3 coordinator_input: a new turn, from the coordinator.
                "prompt": COORDINATOR_INPUT.format(text=message),
                "task_id": task_id,
                "run_in_background": True,
            },
            tool_use_id=tool_use_id,
        )

    async def _resume_after(self, run: SubagentRun, message: str, tool_use_id: str) -> None:
        """The queued message of a run whose turn was ending: a new turn once it ended.

        It runs in the ``Subvisor``'s nursery, which must live: a resume that fails
        is logged (its launch error is in the registry), never raised.
        """
        await run.done.wait()
        try:
            resumed = await self._resume(run.task_id, run.launch.description, message, tool_use_id)
        except Exception:
            log.exception("the message queued for %s could not start its new turn", run.task_id)
            return
        if resumed.is_error:
            log.warning("the message queued for %s: %s", run.task_id, resumed.text)
