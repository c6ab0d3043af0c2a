"""An actor's contract (S-ACT-4): what it is told it is, and which tools it gets.

Tools are a subtraction, not an allow-list: an actor gets every tool of its
runtime minus ``ACTOR_DISALLOWED_TOOLS``, the tools that would hang on a
person who is not there (AskUserQuestion, EnterPlanMode, ExitPlanMode),
start workflows from inside one (CreateWorkflow, AmendWorkflow), read past
its own run (ReadSessionContext), or answer a question meant for the
workflow's creator (ResolveWorkflowQuestion). Its runtime's tools are the
local tools and the MCP tools the supervisor lends; RespondToCoordinator is
a subagent's line to the agent that launched it, and an actor has none: the
script reads its answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.tools import LOCAL_TOOL_NAMES, resolve_tool_name

from ._errors import WorkflowError

__all__ = [
    "ACTOR_DISALLOWED_TOOLS",
    "ACTOR_IDENTITY",
    "actor_system_prompt",
    "actor_tool_names",
]

#: The seven tools an actor never gets (S-ACT-4).
ACTOR_DISALLOWED_TOOLS: tuple[str, ...] = (
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "CreateWorkflow",
    "AmendWorkflow",
    "ReadSessionContext",
    "ResolveWorkflowQuestion",
)

#: The first paragraph of every actor's system prompt.
ACTOR_IDENTITY = (
    "You are a subagent working inside a dynamic workflow run. A script declared you as one "
    "of its actors and gives you work one ask at a time; what you answer goes back to that "
    "script, not to a person. Nobody reads this conversation as it happens and nobody can "
    "answer questions, so make reasonable assumptions yourself and say what you assumed. "
    "Your conversation carries over from one ask to the next. End each ask with exactly the "
    "answer it asks for."
)


def actor_system_prompt(system: str, cwd: str) -> str:
    """The identity paragraph, the script's instructions, and where the actor works."""
    parts = [ACTOR_IDENTITY]
    if system.strip():
        parts.append(system.strip())
    parts.append(f"Working directory: {cwd}")
    return "\n\n".join(parts)


def actor_tool_names(requested: Sequence[str] | None, lent: Sequence[str] = ()) -> tuple[str, ...]:
    """The tools of one actor: ``requested`` (aliases allowed), or all of them.

    ``lent`` are the MCP tool names the supervisor lends. A disallowed or
    unknown name is refused with the list to choose from.
    """
    available = (*LOCAL_TOOL_NAMES, *lent)
    if requested is None:
        return tuple(name for name in available if name not in ACTOR_DISALLOWED_TOOLS)
    chosen: list[str] = []
    for raw in requested:
        name = resolve_tool_name(raw) or raw
        if name in ACTOR_DISALLOWED_TOOLS:
            raise WorkflowError(
                f"an actor cannot have the {name} tool (S-ACT-4: actors get every tool but "
                f"{', '.join(ACTOR_DISALLOWED_TOOLS)}); remove it from tools="
            )
        if name not in available:
            raise WorkflowError(
                f"unknown tool {raw!r} in tools=; actors can have {', '.join(available)}"
            )
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)
