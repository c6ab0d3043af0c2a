"""``subvisor mcp`` as a client starts it: a real process, over stdio or streamable HTTP."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from mcp import StdioServerParameters

from tests.support.cli import cli_env

__all__ = ["http_server", "mcp_args", "stdio_server_params"]


def mcp_args(model: str, cwd: Path, *flags: str) -> list[str]:
    """``subvisor mcp`` arguments for ``model`` on the project ``cwd``."""
    return ["-m", "supervisor.cli", "mcp", "--model", model, "--cwd", str(cwd), *flags]


def stdio_server_params(home: Path, model: str, cwd: Path, *flags: str) -> StdioServerParameters:
    """How an MCP client starts ``subvisor mcp`` on stdio (as Claude Code's config says)."""
    return StdioServerParameters(
        command=sys.executable, args=mcp_args(model, cwd, *flags), env=cli_env(home)
    )


@asynccontextmanager
async def http_server(
    home: Path, model: str, cwd: Path, *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """``subvisor mcp --http 127.0.0.1:0`` running; yields its URL, then SIGTERMs it."""
    process = await trio.lowlevel.open_process(
        [sys.executable, *mcp_args(model, cwd, "--http", "127.0.0.1:0", *flags)],
        env={**cli_env(home), **(env or {})},
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    said = b""
    try:
        with trio.fail_after(60):
            while (found := re.search(rb"serving (http://\S+/mcp)", said)) is None:
                chunk = await process.stderr.receive_some()
                assert chunk, f"subvisor mcp ended before serving: {said.decode()}"
                said += chunk
        yield found[1].decode()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            with trio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.stderr.aclose()
