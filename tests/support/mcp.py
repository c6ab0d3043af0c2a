"""Real MCP parts from npm for tests (server-everything, the Inspector CLI), installed on use.

They come from ``tests/mcp_servers/package.json`` at its pinned lockfile
(``.ci/run`` installs them up front). Without node and npm the tests that need
them fail, naming what to install: a machine that lacks them can have them, so
they are no reason to skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio

from protocol import ResourceLimits
from supervisor import SubvisorSettings
from supervisor.delegation._mcp import McpServerConfig
from tests.support.delegation import home_for
from tests.support.npm import npm_installed

MCP_DIR = Path(__file__).resolve().parent.parent / "mcp_servers"
EVERYTHING = MCP_DIR / "node_modules" / ".bin" / "mcp-server-everything"
#: The MCP Inspector (``--cli``): a client nobody here wrote.
INSPECTOR = MCP_DIR / "node_modules" / ".bin" / "mcp-inspector"


def everything_server() -> Path:
    """The server's executable; installed from the pinned lockfile the first time."""
    return _installed(EVERYTHING)


def inspector_cli() -> Path:
    """The Inspector's executable; installed from the pinned lockfile the first time."""
    return _installed(INSPECTOR)


def _installed(executable: Path) -> Path:
    return npm_installed(executable, MCP_DIR, timeout=300)


#: A raw JSON-RPC stdio server (``tests/mcp_servers/flood.py``): answers of any size.
FLOOD = MCP_DIR / "flood.py"


def flood_server(*extra_tools: str) -> McpServerConfig:
    """The flood server, also listing ``extra_tools`` (names that test tool naming)."""
    return McpServerConfig(command=sys.executable, args=(str(FLOOD), *extra_tools))


def mcp_settings(tmp_path: Path, servers: dict[str, McpServerConfig]) -> SubvisorSettings:
    """Settings of a ``Subvisor`` with ``servers`` and a home under ``tmp_path``."""
    return SubvisorSettings(
        home=home_for(tmp_path),
        mcp_servers=servers,
        subagent_limits=ResourceLimits(idle_timeout_s=60),
    )


async def wait_until_listening(port: int, server: subprocess.Popen[bytes] | None = None) -> None:
    """Return once 127.0.0.1:``port`` accepts; fail if ``server`` exits first."""
    while True:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            assert server is None or server.poll() is None, "the test's HTTP server exited"
            await trio.sleep(0.1)
        else:
            await stream.aclose()
            return
