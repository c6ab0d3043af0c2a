"""Borrowed MCP tools' names (S-MCP-1): server names that would make two tools' names one.

Against ``tests/mcp_servers/flood.py``, a small real stdio server.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from supervisor import Subvisor
from supervisor.delegation._mcp import (
    mcp_tool_name,
    parse_mcp_json,
    split_mcp_tool_name,
)
from tests.support.mcp import flood_server, mcp_settings


def test_mcp_json_refuses_server_names_that_make_tool_names_ambiguous(tmp_path: Path) -> None:
    """S-MCP-1: ``a__b`` + ``c`` and ``a`` + ``b__c`` would both be ``mcp__a__b__c``."""
    path = tmp_path / ".mcp.json"
    for bad in ("a__b", "_a", "a_"):
        document = json.dumps({"mcpServers": {bad: {"command": "x"}}})
        with pytest.raises(ValueError, match="ambiguous") as raised:
            parse_mcp_json(path, document)
        message = str(raised.value)
        assert message.startswith(f"{path}: mcpServers.{bad}: ") and "\n" not in message
    fine = json.dumps({"mcpServers": {"a_b": {"command": "x"}, "computer-use": {"command": "y"}}})
    assert list(parse_mcp_json(path, fine)) == ["a_b", "computer-use"]


def test_a_tool_name_splits_back_into_its_server_and_tool() -> None:
    for server in ("a", "a_b", "a-b", "computer-use", "computer_use"):
        for tool in ("c", "b__c", "_x", "x_", "__"):
            assert split_mcp_tool_name(mcp_tool_name(server, tool)) == (server, tool)


async def test_colliding_names_are_neither_lent_nor_misrouted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """S-MCP-1: a server named ``a__b`` (from settings, not a config file) is left out with
    a one-line reason, so lending ``a__b`` lends nothing and ``mcp__a__b__c`` reaches
    server ``a``'s tool ``b__c``; a tool listed twice is kept once, with a warning."""
    servers = {"a": flood_server("b__c", "echo"), "a__b": flood_server("c")}
    with caplog.at_level(logging.WARNING, logger="subvisor"):
        async with Subvisor(mcp_settings(tmp_path, servers)) as host:
            connected = host.mcp.connected
            failures = host.mcp.failures
            lent = [spec.name for spec in host.mcp.tool_specs(lent=True)]
            lent_a__b = host.mcp.tool_specs(("a__b",), lent=True)
            routed = await host.mcp.call("mcp__a__b__c", {})
    assert connected == ("a",)
    assert "'a__b'" in failures["a__b"] and "\n" not in failures["a__b"]
    assert sorted(lent) == ["mcp__a__b__c", "mcp__a__blob", "mcp__a__echo", "mcp__a__where"]
    assert lent_a__b == ()
    assert routed.text == "b__c" and not routed.is_error
    assert "mcp__a__echo left out" in caplog.text
