"""What the supervisor asks a worker to run as an agent, and what comes back.

``AgentRunSpec`` is the params of the ``agent.run`` request; ``AgentOutcome``
its result. The worker is told which tools it has and how many turns it may
take; the model it talks to is chosen (and enforced) by the supervisor.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ._chat import ChatMessage, ToolSpec, Usage

__all__ = ["PARTIAL_MARKER", "AgentOutcome", "AgentRunSpec"]

#: Appended to the text of a run that hit its turn limit (S-PROF-7).
PARTIAL_MARKER = (
    "[subvisor: stopped after reaching maxTurns={max_turns}; the task may be incomplete]"
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AgentRunSpec(_Frozen):
    """One agent run: its instructions, conversation so far, tools and limits."""

    agent_id: str
    system: str
    prompt: str
    history: tuple[ChatMessage, ...] = ()
    #: Steering messages that arrived before the run started (S-MSG-1 ``queued``).
    pending_messages: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    #: MCP tools borrowed from the supervisor's sessions (S-MCP-1).
    mcp_tools: tuple[ToolSpec, ...] = ()
    #: Tools whose every call the supervisor's rules allow: no need to ask first.
    preapproved_tools: tuple[str, ...] = ()
    max_turns: int = Field(default=4, ge=1)
    cwd: str
    model: str = ""
    max_tool_output_bytes: int = Field(default=30_000, ge=1024)


class AgentOutcome(_Frozen):
    """How an agent run ended.

    ``partial`` means it stopped at ``max_turns`` with what it had
    (S-PROF-7); ``text`` then ends with ``PARTIAL_MARKER``.
    """

    text: str
    status: Literal["completed", "partial"]
    turns: int
    tool_calls: int
    usage: Usage = Usage()
