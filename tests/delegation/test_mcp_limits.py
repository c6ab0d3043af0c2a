"""Borrowed MCP's limits (S-MCP-1): how large a message a server may send.

Against ``tests/mcp_servers/flood.py``, a small real stdio server.
"""

from __future__ import annotations

import sys
from pathlib import Path

from supervisor import Subvisor
from supervisor.delegation._mcp import (
    MAX_MCP_MESSAGE_BYTES,
    McpServerConfig,
)
from tests.support.mcp import flood_server, mcp_settings, wait_until_listening

MIB = 1024 * 1024


def _reset_peak_rss() -> bool:
    """Restart this process's peak RSS (VmHWM) from its current RSS; False where Linux can't."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


async def test_a_message_over_the_cap_disconnects_that_server_and_nothing_else(
    tmp_path: Path,
) -> None:
    """S-MCP-1: a borrowed tool's answer four times MAX_MCP_MESSAGE_BYTES is not read
    whole: the call gets one line saying the server was disconnected, the supervisor's
    memory grows by less than the cap's few multiples, the server's later calls get the
    same line, and another server's calls still work."""
    servers = {"flood": flood_server(), "other": flood_server()}
    async with Subvisor(mcp_settings(tmp_path, servers)) as host:
        assert host.mcp.connected == ("flood", "other")
        small = await host.mcp.call("mcp__flood__blob", {"size": 1000})
        measured = _reset_peak_rss()
        before = _status_bytes("VmRSS")
        flooded = await host.mcp.call("mcp__flood__blob", {"size": 4 * MAX_MCP_MESSAGE_BYTES})
        peak = _status_bytes("VmHWM")
        again = await host.mcp.call("mcp__flood__echo", {"text": "again"})
        other = await host.mcp.call("mcp__other__echo", {"text": "still here"})
        connected = host.mcp.connected
    line = (
        f"Error: MCP server 'flood' sent a message over {MAX_MCP_MESSAGE_BYTES // MIB} MiB;"
        " it was disconnected."
    )
    assert small.text == "x" * 1000 and not small.is_error
    assert flooded.is_error and flooded.text == line
    if measured:
        assert peak - before < 2.5 * MAX_MCP_MESSAGE_BYTES, f"grew {(peak - before) / MIB:.0f} MiB"
    assert again.is_error and again.text == line
    assert other.text == "still here" and not other.is_error
    assert connected == ("other",)


async def test_an_http_servers_json_answer_over_the_cap_is_an_error_not_read_whole(
    tmp_path: Path,
) -> None:
    """S-MCP-1 over streamable HTTP: a JSON answer over MAX_MCP_MESSAGE_BYTES fails that
    call on one line, memory grows by less than the cap's few multiples, and the next
    call on the same connection works."""
    import socket
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = Path(__file__).parents[1] / "mcp_servers" / "large_output.py"
    server = subprocess.Popen(  # noqa: ASYNC220 (starting the test's server, once)
        [sys.executable, str(script), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_until_listening(port, server)
        config = McpServerConfig(url=f"http://127.0.0.1:{port}/mcp")
        async with Subvisor(mcp_settings(tmp_path, {"web": config})) as host:
            measured = _reset_peak_rss()
            before = _status_bytes("VmRSS")
            # The SDK's server sends the text twice: a message of about 3 caps.
            big = await host.mcp.call("mcp__web__blob", {"size": 3 * MAX_MCP_MESSAGE_BYTES // 2})
            peak = _status_bytes("VmHWM")
            small = await host.mcp.call("mcp__web__blob", {"size": 250})
    finally:
        server.kill()
        server.wait()
    assert big.is_error and "\n" not in big.text
    assert f"sent an answer over {MAX_MCP_MESSAGE_BYTES // MIB} MiB" in big.text
    if measured:
        assert peak - before < 2.5 * MAX_MCP_MESSAGE_BYTES, f"grew {(peak - before) / MIB:.0f} MiB"
    assert small.text == ("x" * 99 + "\n") * 2 + "x" * 50 and not small.is_error
