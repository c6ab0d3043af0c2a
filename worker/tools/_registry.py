"""Local tools by name: Claude Code's names, opencode's aliases, per-agent tool sets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from protocol import ToolSpec

from ._base import LocalTool, ToolContext, ToolOutput
from ._bash import BASH_TOOL
from ._edit import EDIT_TOOL
from ._glob import GLOB_TOOL
from ._grep import GREP_TOOL
from ._invoke import invoke_tool
from ._ls import LS_TOOL
from ._read import READ_TOOL
from ._write import WRITE_TOOL

__all__ = [
    "LOCAL_TOOLS",
    "LOCAL_TOOL_ALIASES",
    "LOCAL_TOOL_NAMES",
    "LocalToolSet",
    "get_local_tool",
    "resolve_tool_name",
    "run_tool",
]

LOCAL_TOOLS: tuple[LocalTool[Any], ...] = (
    READ_TOOL,
    WRITE_TOOL,
    EDIT_TOOL,
    GLOB_TOOL,
    GREP_TOOL,
    BASH_TOOL,
    LS_TOOL,
)
LOCAL_TOOL_NAMES: tuple[str, ...] = tuple(tool.name for tool in LOCAL_TOOLS)
LOCAL_TOOL_ALIASES: Mapping[str, str] = {
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "bash": "Bash",
    "list": "LS",
    "ls": "LS",
}
_TOOLS_BY_NAME: Mapping[str, LocalTool[Any]] = {tool.name: tool for tool in LOCAL_TOOLS}
# Built once at import, which in a worker happens in the zygote before any
# fork: generating JSON schemas costs milliseconds, too much per model call.
_SPECS: Mapping[str, ToolSpec] = {tool.name: tool.spec for tool in LOCAL_TOOLS}


def resolve_tool_name(name: str) -> str | None:
    """The canonical name of a local tool (``grep`` -> ``Grep``), or None if it is not one."""
    if name in _TOOLS_BY_NAME:
        return name
    return LOCAL_TOOL_ALIASES.get(name)


def get_local_tool(name: str) -> LocalTool[Any] | None:
    """The local tool called ``name`` (canonical or alias), or None."""
    canonical = resolve_tool_name(name)
    return None if canonical is None else _TOOLS_BY_NAME[canonical]


async def run_tool(name: str, raw_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    """Run the local tool ``name`` on the model's raw input; never raises but for cancellation."""
    tool = get_local_tool(name)
    if tool is None:
        return ToolOutput(
            f"Error: unknown tool {name!r}. Local tools: {', '.join(LOCAL_TOOL_NAMES)}.",
            is_error=True,
        )
    return await invoke_tool(tool, raw_input, ctx)


class LocalToolSet:
    """The local tools one agent may use, built from its allowed tool names.

    Names may be canonical or aliases; duplicates collapse. Names that are
    not local tools (MCP tools, ``Agent``, ``Skill``...) are kept in
    ``other_names`` for whoever provides those.
    """

    def __init__(self, allowed_names: Iterable[str]) -> None:
        tools: dict[str, LocalTool[Any]] = {}
        other: list[str] = []
        for name in allowed_names:
            tool = get_local_tool(name)
            if tool is None:
                if name not in other:
                    other.append(name)
            else:
                tools.setdefault(tool.name, tool)
        self._tools = tools
        self.other_names: tuple[str, ...] = tuple(other)

    @property
    def names(self) -> tuple[str, ...]:
        """Canonical names, in the order first allowed."""
        return tuple(self._tools)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What to offer the model."""
        return tuple(_SPECS[name] for name in self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and resolve_tool_name(name) in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"LocalToolSet({list(self._tools)!r})"

    async def run(self, name: str, raw_input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Like :func:`run_tool`, but a tool outside this set is an error result."""
        canonical = resolve_tool_name(name)
        if canonical is None or canonical not in self._tools:
            available = ", ".join(self._tools) or "none"
            return ToolOutput(
                f"Error: tool {name!r} is not available to this agent. Available local "
                f"tools: {available}.",
                is_error=True,
            )
        return await invoke_tool(self._tools[canonical], raw_input, ctx)
