"""``McpHub``: the supervisor's MCP connections, borrowed by every agent (S-MCP-1).

The supervisor connects to the configured servers once, at startup, and takes
a snapshot of their tools. Agents see those tools as ``mcp__<server>__<tool>``;
a subagent's calls cross its pipe and run on the parent's session, so a
worker never holds an MCP connection (or its credentials). A server that
fails to start is reported on one line (why, its last stderr line, what to
fix) and left out, so the run goes on without it; a server that dies
mid-call gives the caller an error result, never a hang; one that sends a
message over ``MAX_MCP_MESSAGE_BYTES`` is disconnected, with a one-line error
to the caller, before the supervisor holds much more than that.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from protocol import McpToolResult, ToolCall, ToolSpec
from worker.tools import ToolOutput, truncate_text

from ..kernel import validation_problems
from ._mcp_launch import server_launch
from ._mcp_stdio import MAX_MCP_MESSAGE_BYTES, bounded_stdio_client

__all__ = [
    "MAX_MCP_MESSAGE_BYTES",
    "MAX_MCP_RESULT_BYTES",
    "McpHub",
    "McpHubTool",
    "McpServerConfig",
    "mcp_tool_name",
    "parse_mcp_json",
    "split_mcp_tool_name",
]

log = logging.getLogger("subvisor")

_MCP_NAME = re.compile(r"^mcp__(?P<server>[^_][^\s]*?)__(?P<tool>.+)$")
#: Servers that drive the user's screen are never lent to subagents (S-MCP-1).
COMPUTER_USE_SERVERS = frozenset({"computer-use", "computer_use"})

#: The most of one MCP tool's answer an agent gets (it is cut with a marker
#: beyond): far under a worker frame's limit, and more than a model should read.
MAX_MCP_RESULT_BYTES = 256 * 1024

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]


def mcp_tool_name(server: str, tool: str) -> str:
    """The name agents call an MCP tool by."""
    return f"mcp__{server}__{tool}"


def split_mcp_tool_name(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an ``mcp__server__tool`` name, else None.

    The server is the part up to the first ``__``: the inverse of
    ``mcp_tool_name`` for every server name ``mcp_server_name_problem`` admits.
    """
    match = _MCP_NAME.match(name)
    return (match["server"], match["tool"]) if match else None


def mcp_server_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an MCP server, else None (S-MCP-1).

    Its tools are called ``mcp__<name>__<tool>`` and routed, and lent, by the
    part before the first ``__``: a name holding ``__`` (or starting or ending
    with ``_``, or holding whitespace) would make one server's tool another's
    (``a__b`` + ``c`` and ``a`` + ``b__c`` are both ``mcp__a__b__c``).
    """
    if not name or any(c.isspace() for c in name):
        return "a server name must be non-empty, without whitespace"
    if "__" in name or name.startswith("_") or name.endswith("_"):
        return (
            f"server name {name!r} contains '__' or starts or ends with '_', so its tools'"
            " names (mcp__<server>__<tool>) would be ambiguous; rename it"
        )
    return None


class McpServerConfig(BaseModel):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    #: Where a stdio server runs, relative to the project; by default ``/``, so
    #: that nothing a subagent wrote in the project is found by looking it up
    #: (``_mcp_launch``).
    cwd: str | None = None
    #: How long connecting and listing tools may take.
    startup_timeout_s: float = Field(default=30.0, gt=0)
    #: How long one tool call may take.
    call_timeout_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (a stdio server) or url (HTTP)")
        if self.cwd is not None and self.command is None:
            raise ValueError("cwd is for a stdio server (command), not a url")
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
        if (problem := mcp_server_name_problem(name)) is not None:
            raise ValueError(f"{path}: mcpServers.{name}: {problem}")
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


class _Connection:
    """One server's live session, kept open by its own task."""

    def __init__(self, name: str, config: McpServerConfig, project_dir: Path) -> None:
        self.name = name
        self.config = config
        self.project_dir = project_dir
        self.session: Any = None
        self.tools: list[ToolSpec] = []
        self.error: str | None = None
        self.ready = trio.Event()
        self.closed = trio.Event()
        #: The first line the server printed on stdout that is not JSON-RPC.
        self._stdout_noise: str | None = None
        #: Set when the server sent a message over MAX_MCP_MESSAGE_BYTES: it is cut off.
        self.oversize = trio.Event()

    async def run(self, stop: trio.Event) -> None:
        stderr = _StderrTail() if self.config.command is not None else None
        try:
            async with trio.open_nursery() as nursery:
                if stderr is not None:
                    nursery.start_soon(stderr.drain)
                try:
                    await self._serve(stop, stderr)
                finally:
                    if stderr is not None:
                        # The server was stopped; its last words are still in the pipe.
                        with trio.move_on_after(_STDERR_GRACE_S):
                            await stderr.drained.wait()
                    nursery.cancel_scope.cancel()
        except Exception as exc:
            self.error = self._failure(exc, stderr)
            log.warning("MCP server %r is not connected: %s", self.name, self.error)
        finally:
            if stderr is not None:
                stderr.close()
            self.session = None
            self.ready.set()
            self.closed.set()

    async def _serve(self, stop: trio.Event, stderr: _StderrTail | None) -> None:
        async with AsyncExitStack() as stack:
            try:
                streams = await stack.enter_async_context(self._transport(stderr))
            finally:
                if stderr is not None:
                    # Spawned (or not): only the server may hold the pipe's write end now.
                    stderr.errlog.close()
            # The SDK is imported only when a server is configured: it is
            # heavy, and most runs have none.
            from mcp import ClientSession

            session = await stack.enter_async_context(
                ClientSession(streams[0], streams[1], message_handler=self._on_message)
            )
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
            async with trio.open_nursery() as waiting:
                for event in (stop, self.oversize):
                    waiting.start_soon(_cancel_when_set, event, waiting.cancel_scope)

    async def _on_message(self, message: Any) -> None:
        # The transport hands over a line it could not parse as an exception.
        if isinstance(message, Exception) and self._stdout_noise is None:
            errors = message.errors() if isinstance(message, ValidationError) else []
            line = errors[0].get("input") if errors else None
            self._stdout_noise = line if isinstance(line, str) else str(message)

    def _on_oversize(self) -> None:
        if self.session is not None:  # else the failure to start is reported as such
            self.error = self.oversize_message
            log.warning("%s", self.error)
        self.oversize.set()

    @property
    def oversize_message(self) -> str:
        """The one line a caller gets once the server sent too large a message."""
        return (
            f"MCP server {self.name!r} sent a message over "
            f"{MAX_MCP_MESSAGE_BYTES // (1024 * 1024)} MiB; it was disconnected"
        )

    def _transport(self, stderr: _StderrTail | None) -> Any:
        if self.config.url is not None:
            from ._mcp_http import bounded_http_client

            return bounded_http_client(self.config.url)
        from mcp import StdioServerParameters

        _quiet_sdk_parse_errors()
        launch = server_launch(self.config, self.project_dir)
        parameters = StdioServerParameters(
            command=launch.executable(),
            args=list(launch.args),
            env=self.config.env | {"PATH": launch.path},
            cwd=launch.cwd,
        )
        assert stderr is not None
        return bounded_stdio_client(parameters, stderr.errlog, self._on_oversize)

    def _failure(self, exc: BaseException, stderr: _StderrTail | None) -> str:
        """Why the server is not connected, on one line, and what to do."""
        cause = _leaf(exc)
        if self.oversize.is_set():
            return self.oversize_message
        if isinstance(cause, trio.TooSlowError):
            why = f"no answer within startup_timeout_s ({self.config.startup_timeout_s:g} s)"
        elif isinstance(cause, FileNotFoundError) and cause.filename is None:
            why = str(cause)  # ours: the command is neither on PATH nor a path
        elif isinstance(cause, OSError):
            why = f"cannot start {self.config.command!r}: {cause.strerror or cause}"
        elif str(cause) == "Connection closed":
            why = "it closed the connection before answering (did it exit?)"
        else:
            why = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        details = [_one_line(why)]
        if self._stdout_noise is not None:
            details.append(f"it printed {_one_line(self._stdout_noise)!r} on stdout (not JSON-RPC)")
        last_words = stderr.last_line() if stderr is not None else ""
        if last_words:
            details.append(f"its stderr ends with {last_words!r}")
        what = (
            f"check that `{shlex.join([self.config.command, *self.config.args])}` runs an MCP "
            "stdio server"
            if self.config.command is not None
            else f"check that {self.config.url} serves MCP"
        )
        return (
            f"{'; '.join(details)}. Fix mcp_servers.{self.name} in the config or .mcp.json "
            f"({what}); the run goes on without it"
        )


#: How long a stopped server's stderr may take to reach its end.
_STDERR_GRACE_S = 1.0
#: How much of a server's stderr is kept, for the message when it fails.
_STDERR_TAIL_BYTES = 4096
_ONE_LINE_CHARS = 200


class _StderrTail:
    """A stdio server's stderr: kept to its last few KB for the error message, shown nowhere.

    A server's own log lines would otherwise land in the middle of the
    terminal's live view, and a failing one's last words would be lost.
    """

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self._stream = trio.lowlevel.FdStream(read_fd)
        #: The write end, for the server; closed here once it is spawned.
        self.errlog = open(write_fd, "w", closefd=True)  # noqa: SIM115
        self._tail = bytearray()
        self.drained = trio.Event()

    async def drain(self) -> None:
        try:
            while chunk := await self._stream.receive_some(_STDERR_TAIL_BYTES):
                self._tail += chunk
                del self._tail[:-_STDERR_TAIL_BYTES]
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            pass
        finally:
            self.drained.set()

    def last_line(self) -> str:
        lines = self._tail.decode("utf-8", errors="replace").splitlines()
        last = next((line for line in reversed(lines) if line.strip()), "")
        return _one_line(last)

    def close(self) -> None:
        self.errlog.close()
        self._stream.close()


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside ``exc``'s groups that is not a cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_leaf(inner) for inner in exc.exceptions]
        return next((e for e in leaves if not isinstance(e, trio.Cancelled)), leaves[0])
    return exc


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ONE_LINE_CHARS else text[: _ONE_LINE_CHARS - 3] + "..."


class _ReportedByTheHub(logging.Filter):
    """Drops the SDK's traceback for a stdout line that is not JSON-RPC: the hub reports it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to parse JSONRPC message")


_SDK_FILTER = _ReportedByTheHub()


def _quiet_sdk_parse_errors() -> None:
    logging.getLogger("mcp.client.stdio").addFilter(_SDK_FILTER)  # idempotent


class McpHub:
    """The parent's MCP sessions and their startup snapshot."""

    def __init__(
        self, servers: Mapping[str, McpServerConfig], project_dir: Path | None = None
    ) -> None:
        """``project_dir``: what relative paths in servers' command lines are
        relative to (default: the current directory)."""
        project_dir = Path.cwd() if project_dir is None else project_dir
        self._connections = {
            name: _Connection(name, cfg, project_dir) for name, cfg in servers.items()
        }
        for name, connection in self._connections.items():
            # Config files are checked as they are read; this covers other callers.
            if (problem := mcp_server_name_problem(name)) is not None:
                connection.error = f"{problem}; the run goes on without it"
                connection.ready.set()
                connection.closed.set()
        self._stop = trio.Event()

    async def start(self, nursery: trio.Nursery) -> None:
        """Connect to every server (concurrently) and take the snapshot.

        A tool whose ``mcp__<server>__<tool>`` name another tool already has
        is left out, with a warning: a call by that name could reach only one
        of them, and lending is by name (S-MCP-1).
        """
        for connection in self._connections.values():
            if not connection.closed.is_set():
                nursery.start_soon(connection.run, self._stop)
        for connection in self._connections.values():
            await connection.ready.wait()
        seen: set[str] = set()
        for connection in self._connections.values():
            kept = []
            for spec in connection.tools:
                if spec.name in seen:
                    log.warning(
                        "MCP server %r: tool %s left out: another tool has that name",
                        connection.name,
                        spec.name,
                    )
                    continue
                seen.add(spec.name)
                kept.append(spec)
            connection.tools = kept

    async def aclose(self) -> None:
        """Close every session."""
        self._stop.set()
        for connection in self._connections.values():
            await connection.closed.wait()

    @property
    def connected(self) -> tuple[str, ...]:
        """Servers in the snapshot (connected at startup)."""
        return tuple(
            n
            for n, c in self._connections.items()
            if c.session is not None and not c.oversize.is_set()
        )

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
            return McpToolResult(text=f"Error: no MCP tool {name!r}.", is_error=True)
        if connection.oversize.is_set():
            return McpToolResult(text=f"Error: {connection.oversize_message}.", is_error=True)
        if connection.session is None:
            why = connection.error or "it closed"
            return McpToolResult(
                text=f"Error: MCP server {parts[0]!r} is not connected ({why}).", is_error=True
            )
        try:
            with trio.fail_after(connection.config.call_timeout_s):
                result = await connection.session.call_tool(
                    parts[1], dict(arguments), progress_callback=on_progress
                )
        except trio.TooSlowError:
            return McpToolResult(
                text=f"Error: {name} took longer than {connection.config.call_timeout_s:g} s.",
                is_error=True,
            )
        except Exception as exc:
            if connection.oversize.is_set():
                return McpToolResult(text=f"Error: {connection.oversize_message}.", is_error=True)
            return McpToolResult(
                text=f"Error: MCP server {parts[0]!r} failed during {parts[1]}: "
                f"{type(exc).__name__}: {exc}",
                is_error=True,
            )
        texts = [
            getattr(block, "text", None) or f"[{block.type} content]" for block in result.content
        ]
        # The answer crosses a child's pipe in one frame and joins its
        # transcript: a server's (or a tool's) unbounded answer is cut here.
        text = truncate_text(
            "\n".join(texts), MAX_MCP_RESULT_BYTES, "ask the tool for less at a time"
        )
        return McpToolResult(text=text, is_error=bool(result.is_error))


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
