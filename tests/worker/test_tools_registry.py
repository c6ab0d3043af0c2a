"""Tool names, aliases, specs and the run_tool entry point (S-LOCAL-1, S-LOCAL-2, S-POL-1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol._chat import ToolSpec
from worker.tools import (
    LOCAL_TOOL_NAMES,
    LOCAL_TOOLS,
    LocalTool,
    LocalToolSet,
    ReadInput,
    ToolContext,
    ToolInput,
    ToolOutput,
    get_local_tool,
    resolve_tool_name,
    run_tool,
)
from worker.tools._invoke import invoke_tool


def test_local_tool_names_are_claude_codes() -> None:
    """S-LOCAL-1: the canonical names are Claude Code's."""
    assert set(LOCAL_TOOL_NAMES) == {"Read", "Write", "Edit", "Glob", "Grep", "Bash", "LS"}


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("read", "Read"),
        ("write", "Write"),
        ("edit", "Edit"),
        ("glob", "Glob"),
        ("grep", "Grep"),
        ("bash", "Bash"),
        ("list", "LS"),
        ("ls", "LS"),
        ("Grep", "Grep"),
        ("LS", "LS"),
    ],
)
def test_opencode_names_are_aliases(name: str, canonical: str) -> None:
    """S-LOCAL-1: opencode's lower-case names resolve to the same tools."""
    assert resolve_tool_name(name) == canonical
    tool = get_local_tool(name)
    assert tool is not None and tool.name == canonical


@pytest.mark.parametrize(
    "name", ["Agent", "Task", "EnterPlanMode", "ExitPlanMode", "mcp__x__y", ""]
)
def test_other_names_are_not_local_tools(name: str) -> None:
    """S-POL-1: delegation and plan-mode tools are never local tools."""
    assert resolve_tool_name(name) is None
    assert get_local_tool(name) is None


def test_specs_use_the_parameter_names_the_model_sends() -> None:
    """S-LOCAL-1: schemas by alias ("-i", "-n"), JSON-serialisable, without pydantic noise."""
    specs = {tool.name: tool.spec for tool in LOCAL_TOOLS}
    for spec in specs.values():
        assert isinstance(spec, ToolSpec)
        assert spec.description
        assert spec.input_schema["type"] == "object"
        assert spec.input_schema["additionalProperties"] is False
        assert "title" not in json.dumps(spec.input_schema)
    expected = {
        "Read": ({"file_path", "offset", "limit"}, ["file_path"]),
        "Write": ({"file_path", "content"}, ["file_path", "content"]),
        "Edit": (
            {"file_path", "old_string", "new_string", "replace_all"},
            ["file_path", "old_string", "new_string"],
        ),
        "Glob": ({"pattern", "path"}, ["pattern"]),
        "Grep": ({"pattern", "path", "glob", "output_mode", "-i", "-n"}, ["pattern"]),
        "Bash": ({"command", "timeout", "description"}, ["command"]),
        "LS": ({"path", "ignore"}, ["path"]),
    }
    for name, (properties, required) in expected.items():
        schema = specs[name].input_schema
        assert set(schema["properties"]) == properties, name
        assert schema["required"] == required, name
    grep_modes = specs["Grep"].input_schema["properties"]["output_mode"]["enum"]
    assert grep_modes == ["files_with_matches", "content", "count"]


def test_local_tool_set_resolves_aliases_and_keeps_other_names() -> None:
    tools = LocalToolSet(["read", "Grep", "grep", "mcp__db__query", "Agent", "list"])
    assert tools.names == ("Read", "Grep", "LS")
    assert [spec.name for spec in tools.specs] == ["Read", "Grep", "LS"]
    assert tools.other_names == ("mcp__db__query", "Agent")
    assert "ls" in tools and "Read" in tools
    assert "Bash" not in tools and 3 not in tools
    assert len(tools) == 3


async def test_local_tool_set_refuses_tools_outside_it(tmp_path: Path) -> None:
    """S-LOCAL-2: a tool the agent was not given is an error result."""
    (tmp_path / "f.txt").write_text("hi\n")
    tools = LocalToolSet(["Read"])
    ctx = ToolContext(cwd=tmp_path)
    refused = await tools.run("Bash", {"command": "touch pwned"}, ctx)
    assert refused.is_error and "not available" in refused.text
    assert not (tmp_path / "pwned").exists()
    allowed = await tools.run("read", {"file_path": "f.txt"}, ctx)
    assert allowed == ToolOutput("     1\thi")


async def test_unknown_tool_is_an_error_result(tmp_path: Path) -> None:
    out = await run_tool("Frobnicate", {}, ToolContext(cwd=tmp_path))
    assert out.is_error and "unknown tool" in out.text and "Read" in out.text


async def test_validation_errors_name_the_bad_fields(tmp_path: Path) -> None:
    """S-LOCAL-2: invalid input is a readable error naming each bad parameter."""
    ctx = ToolContext(cwd=tmp_path)
    out = await run_tool("Grep", {"-i": "perhaps", "output_mode": "lines", "extra": 1}, ctx)
    assert out.is_error
    lines = out.text.splitlines()
    assert lines[0] == "Invalid input for Grep:"
    fields = {line.split(":")[0].removeprefix("- ") for line in lines[1:]}
    assert fields == {"pattern", "-i", "output_mode", "extra"}
    not_a_dict = await run_tool("Read", ["a.txt"], ctx)  # type: ignore[arg-type]
    assert not_a_dict.is_error and "Invalid input for Read" in not_a_dict.text


async def test_null_means_omitted(tmp_path: Path) -> None:
    """Models often send null for optional parameters; defaults apply."""
    (tmp_path / "f.txt").write_text("a\nb\n")
    out = await run_tool(
        "Read", {"file_path": "f.txt", "offset": None, "limit": None}, ToolContext(cwd=tmp_path)
    )
    assert out == ToolOutput("     1\ta\n     2\tb")


class _BoomInput(ToolInput):
    path: str


async def _boom(params: _BoomInput, ctx: ToolContext) -> ToolOutput:
    raise ZeroDivisionError("tool bug")


async def _chatty(params: _BoomInput, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("é" * 50_000)


async def test_unexpected_exceptions_become_error_results(tmp_path: Path) -> None:
    """S-LOCAL-2: even a bug in a tool is a result, never a crash of the worker."""
    tool: LocalTool[_BoomInput] = LocalTool("Boom", "d", _BoomInput, _boom, "hint")
    out = await invoke_tool(tool, {"path": "x"}, ToolContext(cwd=tmp_path))
    assert out.is_error
    assert "ZeroDivisionError: tool bug" in out.text


async def test_every_result_is_capped(tmp_path: Path) -> None:
    """S-LOCAL-2: output over the cap is cut with a marker naming the hint."""
    tool: LocalTool[_BoomInput] = LocalTool("Chatty", "d", _BoomInput, _chatty, "Ask for less.")
    out = await invoke_tool(tool, {"path": "x"}, ToolContext(cwd=tmp_path, max_output_bytes=5_000))
    assert len(out.text.encode()) <= 5_000
    assert out.text.endswith("Ask for less.]")


async def test_cancellation_is_not_swallowed(tmp_path: Path) -> None:
    async def slow(params: _BoomInput, ctx: ToolContext) -> ToolOutput:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    tool: LocalTool[_BoomInput] = LocalTool("Slow", "d", _BoomInput, slow, "")
    with trio.move_on_after(0.01) as scope:
        await invoke_tool(tool, {"path": "x"}, ToolContext(cwd=tmp_path))
    assert scope.cancelled_caught


def test_context_rejects_relative_cwd_and_tiny_caps(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="absolute"):
        ToolContext(cwd=Path("relative"))
    with pytest.raises(ValueError, match="max_output_bytes"):
        ToolContext(cwd=tmp_path, max_output_bytes=10)


def test_input_models_accept_aliases_and_field_names() -> None:
    assert ReadInput(file_path="x").limit == 2_000
    grep_model = get_local_tool("Grep")
    assert grep_model is not None
    by_alias = grep_model.input_model.model_validate({"pattern": "p", "-i": True})
    by_name = grep_model.input_model.model_validate({"pattern": "p", "case_insensitive": True})
    assert by_alias == by_name


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)


@settings(max_examples=60, deadline=None)
@given(
    raw=st.dictionaries(
        st.sampled_from(["file_path", "offset", "limit", "path", "x"]), _json_values, max_size=4
    )
)
def test_read_never_raises_whatever_the_input(raw: dict[str, Any]) -> None:
    """S-LOCAL-2: arbitrary model input gives a result, never an exception."""
    out = trio.run(run_tool, "Read", raw, ToolContext(cwd=Path(__file__).parent))
    assert isinstance(out, ToolOutput)
    assert len(out.text.encode()) <= 30_000
