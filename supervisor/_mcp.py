"""``McpHub``: the supervisor's MCP connections, borrowed by every agent (S-MCP-1).

The supervisor connects to the configured servers once, at startup, and takes
a snapshot of their tools. Agents see those tools as ``mcp__<server>__<tool>``;
a subagent's calls cross its pipe and run on the parent's session, so a
worker never holds an MCP connection (or its credentials). A server that
fails to start is reported and left out; a server that dies mid-call gives
the caller an error result, never a hang.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from protocol import ToolCall, ToolSpec
from worker.tools import ToolOutput

from ._errors import validation_problems

__all__ = [
    "McpHub",
    "McpHubTool",
    "McpServerConfig",
    "McpToolResult",
    "mcp_tool_name",
    "parse_mcp_json",
    "split_mcp_tool_name",
]

log = logging.getLogger("subvisor")

_MCP_NAME = re.compile(r"^mcp__(?P<server>[^_][^\s]*?)__(?P<tool>.+)$")
#: Servers that drive the user's screen are never lent to subagents (S-MCP-1).
COMPUTER_USE_SERVERS = frozenset({"computer-use", "computer_use"})

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]


def mcp_tool_name(server: str, tool: str) -> str:
    """The name agents call an MCP tool by."""
    return f"mcp__{server}__{tool}"


def split_mcp_tool_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an ``mcp__server__tool`` name, else None."""
    match = _MCP_NAME.match(name)
    return (match["server"], match["tool"]) if match else None


class McpServerConfig(BaseModel):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    #: How long connecting and listing tools may take.
    startup_timeout_s: float = Field(default=30.0, gt=0)
    #: How long one tool call may take.
    call_timeout_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (a stdio server) or url (HTTP)")
        return self


def parse_mcp_json(path: Path, text: str) -> dict[str, McpServerConfig]:
    """Servers of a Claude Code ``.mcp.json`` whose content is ``text``.

    Raises ``ValueError``, on one line naming ``path``, when it is not JSON
    or not shaped ``{"mcpServers": {NAME: {"command": ..., "args": [...]}}}``.
    """
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); fix it or remove it") from None
    if not isinstance(document, dict):
        raise ValueError(
            f'{path}: expected an object such as {{"mcpServers": {{...}}}},'
            f" not {_json_kind(document)}"
        )
    servers = document.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ValueError(
            f'{path}: "mcpServers" must be an object of named servers'
            f' ({{"NAME": {{"command": ...}}}}), not {_json_kind(servers)}'
        )
    configs: dict[str, McpServerConfig] = {}
    for name, raw in servers.items():
        if not isinstance(raw, dict):
            raise ValueError(
                f"{path}: mcpServers.{name} must be an object with command or url,"
                f" not {_json_kind(raw)}"
            )
        fields = {k: v for k, v in raw.items() if k in ("command", "args", "env", "url")}
        try:
            configs[name] = McpServerConfig.model_validate(fields)
        except ValidationError as exc:
            raise ValueError(
                f"{path}: mcpServers.{name}: {validation_problems(exc)}; fix it or remove it"
            ) from None
    return configs


def _json_kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


@dataclass(frozen=True, slots=True)
class McpToolResult:
    """What a tool call produced, as text for the model."""

    text: str
    is_error: bool


class _Connection:
    """One server's live session, kept open by its own task."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.session: Any = None
        self.tools: list[ToolSpec] = []
        self.error: str | None = None
        self.ready = trio.Event()
        self.closed = trio.Event()

    async def run(self, stop: trio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                # The SDK is imported only when a server is configured: it is
                # heavy, and most runs have none.
                from mcp import ClientSession

                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                with trio.fail_after(self.config.startup_timeout_s):
                    await session.initialize()
                    listed = await session.list_tools()
                self.tools = [
                    ToolSpec(
                        name=mcp_tool_name(self.name, tool.name),
                        description=tool.description or "",
                        input_schema=dict(tool.input_schema),
                    )
                    for tool in listed.tools
                ]
                self.session = session
                self.ready.set()
                await stop.wait()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            log.warning("MCP server %s is not connected: %s", self.name, self.error)
        finally:
            self.session = None
            self.ready.set()
            self.closed.set()

    def _transport(self) -> Any:
        if self.config.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            return streamable_http_client(self.config.url)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        command = self.config.command or ""
        if shutil.which(command) is None and not Path(command).exists():
            raise FileNotFoundError(f"command {command!r} not found")
        return stdio_client(
            StdioServerParameters(
                command=command, args=list(self.config.args), env=dict(self.config.env) or None
            )
        )


class McpHub:
    """The parent's MCP sessions and their startup snapshot."""

    def __init__(self, servers: Mapping[str, McpServerConfig]) -> None:
        self._connections = {name: _Connection(name, cfg) for name, cfg in servers.items()}
        self._stop = trio.Event()

    async def start(self, nursery: trio.Nursery) -> None:
        """Connect to every server (concurrently) and take the snapshot."""
        for connection in self._connections.values():
            nursery.start_soon(connection.run, self._stop)
        for connection in self._connections.values():
            await connection.ready.wait()

    async def aclose(self) -> None:
        """Close every session."""
        self._stop.set()
        for connection in self._connections.values():
            await connection.closed.wait()

    @property
    def connected(self) -> tuple[str, ...]:
        """Servers in the snapshot (connected at startup)."""
        return tuple(n for n, c in self._connections.items() if c.session is not None)

    @property
    def failures(self) -> dict[str, str]:
        """Servers that could not be connected, and why."""
        return {n: c.error for n, c in self._connections.items() if c.error is not None}

    def tool_specs(
        self, servers: tuple[str, ...] | None = None, *, lent: bool = False
    ) -> tuple[ToolSpec, ...]:
        """Snapshot tools of ``servers`` (default: all connected).

        ``lent``: for a subagent, so computer-use servers are left out (S-MCP-1).
        """
        chosen = self.connected if servers is None else servers
        return tuple(
            spec
            for name in chosen
            if name in self._connections and not (lent and name in COMPUTER_USE_SERVERS)
            for spec in self._connections[name].tools
        )

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        on_progress: ProgressCallback | None = None,
    ) -> McpToolResult:
        """Run ``mcp__server__tool`` on the parent's session; failures are error results."""
        parts = split_mcp_tool_name(name)
        connection = self._connections.get(parts[0]) if parts else None
        if parts is None or connection is None:
            return McpToolResult(f"Error: no MCP tool {name!r}.", True)
        if connection.session is None:
            why = connection.error or "it closed"
            return McpToolResult(f"Error: MCP server {parts[0]!r} is not connected ({why}).", True)
        try:
            with trio.fail_after(connection.config.call_timeout_s):
                result = await connection.session.call_tool(
                    parts[1], dict(arguments), progress_callback=on_progress
                )
        except trio.TooSlowError:
            return McpToolResult(
                f"Error: {name} took longer than {connection.config.call_timeout_s:g} s.", True
            )
        except Exception as exc:
            return McpToolResult(
                f"Error: MCP server {parts[0]!r} failed during {parts[1]}: "
                f"{type(exc).__name__}: {exc}",
                True,
            )
        texts = [
            getattr(block, "text", None) or f"[{block.type} content]" for block in result.content
        ]
        return McpToolResult("\n".join(texts), bool(result.is_error))


class McpHubTool:
    """An MCP tool of the root agent: called straight on the hub's session."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = False

    def __init__(self, hub: McpHub, spec: ToolSpec) -> None:
        self._hub = hub
        self.spec = spec

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Run it; failures are error results."""
        result = await self._hub.call(call.name, call.input)
        return ToolOutput(result.text, result.is_error)
