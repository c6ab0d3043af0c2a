"""Real MCP parts from npm for tests (server-everything, the Inspector CLI), installed on use.

They come from ``tests/mcp_servers/package.json`` at its pinned lockfile
(``.ci/run`` installs them up front). Without node and npm the tests that need
them fail, naming what to install: a machine that lacks them can have them, so
they are no reason to skip.
"""

from __future__ import annotations

from pathlib import Path

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
