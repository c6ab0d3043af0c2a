"""The Agent tool's contract with the parent model: input, description, results.

What the model may send (S-TOOL-1, S-TOOL-5), what it is told about the tool
and the profiles (S-TOOL-4), and how a child's result is shaped and capped
before it goes back (S-TOOL-3, S-TOOL-6). Running the child is elsewhere.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from protocol import ToolSpec
from worker.tools import truncate_text
from worker.tools._base import input_schema_of

from ..profiles._profile import AgentProfile
from ._notifications import escape_markup

__all__ = [
    "AGENT_TOOL_NAME",
    "DEFAULT_SUBAGENT_TYPE",
    "HIDDEN_ALIASES",
    "MAX_RESULT_BYTES",
    "AgentToolInput",
    "agent_tool_description",
    "agent_tool_input_schema",
    "agent_tool_spec",
    "format_async_launched",
    "format_foreground_result",
    "format_task_error",
    "format_task_result",
    "truncate_result",
]

AGENT_TOOL_NAME = "Agent"
#: Accepted as the tool's name but never offered: prompts and plugins written
#: for Claude Code say "use the Task tool" (S-TOOL-5).
HIDDEN_ALIASES: tuple[str, ...] = ("Task",)
DEFAULT_SUBAGENT_TYPE = "general-purpose"

# S-TOOL-3: launching a child changes nothing by itself, and each of the
# child's own tool calls is checked, so the call is read-only (plan mode lets
# it through) and needs no approval (``ToolPolicy.check``), and may run
# alongside others (``AgentTool.concurrency_safe``); a child runs as long as
# its turn limit and watchdog allow: the tool has no timeout of its own.

#: The most UTF-8 bytes one Agent tool result may hand to the model (S-TOOL-3).
MAX_RESULT_BYTES = 120_000

_TRUNCATION_HINT = (
    "The agent's answer was longer than a tool result may be; continue the agent and ask "
    "for the rest if you need it."
)
_EMPTY_RESULT = "(the agent finished without a final message)"


class AgentToolInput(BaseModel):
    """What the parent model sends when it calls Agent (S-TOOL-1).

    There is no ``model`` parameter: a child's model comes from settings and
    its profile. Parameters sent as ``null`` (and a blank ``subagent_type`` or
    ``task_id``) count as omitted, as models often fill optional ones that way.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str = Field(description="A short (3-5 word) description of the task.")
    prompt: str = Field(
        description="The complete task for the agent. It sees nothing of your conversation, "
        "so include every fact, path and constraint it needs, and what its final message "
        "should contain."
    )
    subagent_type: str = Field(
        default=DEFAULT_SUBAGENT_TYPE,
        description="Which agent type to use (one of those listed in this tool's description).",
    )
    run_in_background: bool = Field(
        default=False,
        description="Run the agent in the background: the call returns at once and you are "
        "notified when the agent completes.",
    )
    task_id: str | None = Field(
        default=None,
        description="The agentId of an earlier agent, to continue it with its previous "
        "context instead of starting a new one.",
    )

    @model_validator(mode="before")
    @classmethod
    def _check_parameter_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        known = cls.model_fields
        unknown = sorted(key for key in data if key not in known)
        if unknown:
            hint = (
                " The model is chosen by settings and the agent's profile, not per call."
                if "model" in unknown
                else ""
            )
            raise ValueError(
                f"unknown parameter{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(key) for key in unknown)}; the {AGENT_TOOL_NAME} tool takes "
                f"{', '.join(known)}.{hint}"
            )
        omitted_if_blank = {"subagent_type", "task_id"}
        return {
            key: value
            for key, value in data.items()
            if value is not None
            and not (key in omitted_if_blank and isinstance(value, str) and not value.strip())
        }

    @field_validator("description", "prompt", mode="after")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("subagent_type", "task_id", mode="after")
    @classmethod
    def _strip(cls, value: str | None) -> str | None:
        return None if value is None else value.strip()


def agent_tool_input_schema() -> dict[str, Any]:
    """The JSON schema of the Agent tool's input, as the model sees it."""
    return input_schema_of(AgentToolInput)


def _tools_label(tools: Sequence[str]) -> str:
    return ", ".join(tools) if tools else "none"


def agent_tool_description(profiles: Sequence[AgentProfile], parent_tools: Sequence[str]) -> str:
    """The Agent tool's description: the profiles with their tools, and how to use it (S-TOOL-4).

    ``profiles`` are those the parent may launch (already without those its
    ``task`` permission denies); ``parent_tools`` are the parent's tools,
    from which each profile's are derived.
    """
    if profiles:
        listing = "\n".join(
            f"- {profile.name}: {profile.description.strip()} "
            f"(Tools: {_tools_label(profile.resolve_tools(parent_tools))})"
            for profile in profiles
        )
    else:
        listing = "(none: no agent type may be launched from this session)"
    return f"""\
Launch a subagent to carry out a complex, multi-step task on its own. Each subagent runs in \
its own process with its own context and tools, and hands back a single final report.

Agent types (subagent_type) and the tools each one has:
{listing}

When not to use it:
- To read a file whose path you know, use Read (or Glob to find it) yourself.
- To find a specific definition such as "class Foo", use Grep yourself.
- For a task confined to two or three files, do it yourself.

Usage notes:
- A new Agent call starts fresh: the agent sees none of your conversation. Write a \
self-contained prompt with every fact, file path and constraint it needs, and say what its \
final message should contain.
- Launch independent agents in a single message with several tool calls, so that they run \
concurrently.
- Tell the agent whether it should write code or only research; it cannot know what the user \
intends.
- The result comes back to you, not to the user: relay what matters in your own reply.
- With run_in_background: true the call returns immediately and you are notified when the \
agent completes; do not poll or sleep while waiting.
- To continue an earlier agent with its context, pass its agentId as task_id.
- description is a short summary of the task in 3-5 words."""


def agent_tool_spec(profiles: Sequence[AgentProfile], parent_tools: Sequence[str]) -> ToolSpec:
    """The Agent tool as offered to the model (its hidden aliases are not offered)."""
    return ToolSpec(
        name=AGENT_TOOL_NAME,
        description=agent_tool_description(profiles, parent_tools),
        input_schema=agent_tool_input_schema(),
    )


def truncate_result(text: str, max_bytes: int = MAX_RESULT_BYTES) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, with a marker saying how much was cut."""
    return truncate_text(text, max_bytes, _TRUNCATION_HINT)


def _fit(text: str, frame: str) -> str:
    """``text`` cut so that it and ``frame`` (which is kept whole) fit in the result cap."""
    room = MAX_RESULT_BYTES - len(frame.encode("utf-8", errors="replace"))
    return truncate_result(text, max(room, 0))


def format_foreground_result(
    text: str,
    *,
    agent_id: str,
    total_tokens: int,
    tool_uses: int,
    duration_ms: int,
    status: Literal["completed", "partial"] = "completed",
) -> str:
    """A finished foreground child's result for the parent model (S-TOOL-6).

    The child's final text, escaped as a background child's notification is
    (:func:`escape_markup`: it can forge no ``<task-notification>``, no
    ``<subagent-message>``, no ``<usage>``), then its agentId with how to
    continue it, and a ``<usage>`` block. Only the text is ever truncated, so
    the whole stays within :data:`MAX_RESULT_BYTES` and the trailer is always there.
    """
    lines = []
    if status == "partial":
        lines.append(
            "status: partial (the agent reached its turn limit before finishing; the text above "
            "is what it had, and the task may be incomplete)"
        )
    lines.append(f"agentId: {agent_id} (use SendMessage with this id to continue this agent)")
    lines.append(
        f"<usage>total_tokens: {total_tokens}\ntool_uses: {tool_uses}\n"
        f"duration_ms: {duration_ms}</usage>"
    )
    trailer = "\n\n" + "\n".join(lines)
    return _fit(escape_markup(text) if text.strip() else _EMPTY_RESULT, trailer) + trailer


def _task_element(task_id: str, state: str, tag: str, body: str) -> str:
    # The body is the child's: escaped, it cannot close </task_result></task> early.
    head = f'<task id="{html.escape(task_id, quote=True)}" state="{state}"><{tag}>'
    tail = f"</{tag}></task>"
    return head + _fit(escape_markup(body), head + tail) + tail


def format_task_result(
    text: str, *, task_id: str, state: Literal["completed", "partial"] = "completed"
) -> str:
    """A child's result in opencode's form: ``<task ...><task_result>...</task_result></task>``."""
    return _task_element(task_id, state, "task_result", text if text.strip() else _EMPTY_RESULT)


def format_task_error(error: str, *, task_id: str) -> str:
    """A failed child in opencode's form: ``<task ... state="failed"><task_error>...``."""
    return _task_element(
        task_id, "failed", "task_error", error if error.strip() else "(no error message)"
    )


def format_async_launched(*, agent_id: str, description: str, output_file: str) -> str:
    """What the parent model gets when a child starts in the background (S-RUN-4)."""
    return (
        f'async_launched: the agent "{description}" is now running in the background.\n'
        f"agentId: {agent_id}\n"
        f"output_file: {output_file}\n"
        "You will get a notification when it completes; do not poll, sleep or check on its "
        "progress. Meanwhile, work on something that does not overlap with it (leave the files "
        "it may change alone), or end your turn after telling the user what you launched. To "
        "give it more instructions, use SendMessage with its agentId."
    )
