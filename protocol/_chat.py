"""Provider-neutral chat types: what an agent asks a model and what comes back.

These cross the pipe (a worker's model request is answered by the supervisor's
gateway), so they live in the sans-I/O package and import nothing else.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChatMessage",
    "ModelRequest",
    "ModelResult",
    "ModelStreamDelta",
    "ToolCall",
    "ToolSpec",
    "Usage",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool invocation requested by the model."""

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolSpec(_Frozen):
    """A tool offered to the model: name, description and JSON schema of its input."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ChatMessage(_Frozen):
    """One conversation message.

    ``role="tool"`` carries the result of the tool call ``tool_call_id``;
    ``is_error`` marks a failed tool call. Assistant messages may carry
    ``tool_calls`` alongside (or instead of) text.
    """

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


class Usage(_Frozen):
    """Token usage of one model call (or a sum of several)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class ModelRequest(_Frozen):
    """A model call.

    ``model`` is ``provider:model`` (or ``provider/model``), optionally with a
    ``$effort`` suffix. ``agent_keys`` (candidate scenario keys, best first)
    and ``call_index`` (0-based count of this agent's earlier model calls)
    identify the caller for the deterministic scripted provider; HTTP
    providers ignore them.
    """

    model: str
    system: str = ""
    messages: tuple[ChatMessage, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    effort: str | None = None
    agent_keys: tuple[str, ...] = ("root",)
    call_index: int = 0


class ModelStreamDelta(_Frozen):
    """A piece of streamed assistant text."""

    text: str


class ModelResult(_Frozen):
    """The complete answer of one model call.

    ``fault`` is only ever set by the scripted provider: the worker that made
    the call must then really crash in that way (segfault, exit, oom, hang)
    or turn hostile (flood: valid events without end, S-SEC-8), which is how
    tests and stress runs inject faults into real processes.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str = "end_turn"
    usage: Usage = Usage()
    model: str = ""
    fault: Literal["segfault", "exit", "oom", "hang", "flood"] | None = None
