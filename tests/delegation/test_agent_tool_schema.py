"""The Agent tool's contract: input, description and result shapes (S-TOOL-1, 3-6)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from supervisor.delegation._agent_tool_schema import (
    AGENT_TOOL_NAME,
    HIDDEN_ALIASES,
    MAX_RESULT_BYTES,
    AgentToolInput,
    agent_tool_description,
    agent_tool_input_schema,
    agent_tool_spec,
    format_async_launched,
    format_foreground_result,
    format_task_error,
    format_task_result,
    truncate_result,
)
from supervisor.profiles._builtin_profiles import EXPLORE, GENERAL_PURPOSE
from supervisor.profiles._profile import AgentProfile

PARENT_TOOLS = ("Read", "Write", "Edit", "Glob", "Grep", "Bash", "LS", "Agent", "Task")

_MARKER = re.compile(r"\[output truncated: (\d+) bytes \(\d+ lines\) omitted\.")
# Wide characters make UTF-8 boundaries matter; "[" never occurs, so a marker
# in the output can only be ours.
_texts = st.text(alphabet=st.sampled_from("ab\n é€😀"), max_size=2_000)


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


# --- input (S-TOOL-1) ---


def test_minimal_input_gets_the_defaults() -> None:
    """S-TOOL-1: only description and prompt are required."""
    params = AgentToolInput.model_validate({"description": "Find config", "prompt": "Find it."})
    assert params.subagent_type == "general-purpose"
    assert params.run_in_background is False
    assert params.task_id is None


def test_full_input() -> None:
    params = AgentToolInput.model_validate(
        {
            "description": "Continue the review",
            "prompt": "Now fix what you found.",
            "subagent_type": "Explore",
            "run_in_background": True,
            "task_id": "agent_123",
        }
    )
    assert (params.subagent_type, params.run_in_background, params.task_id) == (
        "Explore",
        True,
        "agent_123",
    )


def test_description_length_is_advice_not_a_rule() -> None:
    """S-TOOL-1: 3-5 words is asked for, but models ignore it; do not fail the call."""
    long = "one two three four five six seven eight"
    assert AgentToolInput(description="Search", prompt="p").description == "Search"
    assert AgentToolInput(description=long, prompt="p").description == long


@pytest.mark.parametrize(
    "raw",
    [
        {"description": "", "prompt": "do it"},
        {"description": "Do it", "prompt": "   \n"},
        {"prompt": "do it"},
        {"description": "Do it"},
        {"description": "Do it", "prompt": "p", "run_in_background": "sometimes"},
    ],
)
def test_bad_input_is_rejected(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AgentToolInput.model_validate(raw)


def test_unknown_parameters_are_rejected_with_the_accepted_ones() -> None:
    """S-TOOL-1: there is no model parameter; the error says what the tool takes."""
    with pytest.raises(ValidationError) as caught:
        AgentToolInput.model_validate({"description": "d", "prompt": "p", "model": "opus"})
    message = str(caught.value)
    assert "unknown parameter 'model'" in message
    assert "description, prompt, subagent_type, run_in_background, task_id" in message
    assert "settings" in message


def test_null_and_blank_optionals_count_as_omitted() -> None:
    params = AgentToolInput.model_validate(
        {
            "description": "d",
            "prompt": "p",
            "subagent_type": "  ",
            "run_in_background": None,
            "task_id": "",
        }
    )
    assert (params.subagent_type, params.run_in_background, params.task_id) == (
        "general-purpose",
        False,
        None,
    )


def test_schema_is_what_the_model_may_send() -> None:
    """S-TOOL-1: five parameters, two required, no model, nothing else accepted."""
    schema = agent_tool_input_schema()
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {
        "description",
        "prompt",
        "subagent_type",
        "run_in_background",
        "task_id",
    }
    assert set(schema["required"]) == {"description", "prompt"}
    assert schema["additionalProperties"] is False
    assert schema["properties"]["subagent_type"]["default"] == "general-purpose"
    assert all(prop.get("description") for prop in schema["properties"].values())


# --- the tool's names (S-TOOL-5) ---
# Its S-TOOL-3 traits are behaviour, tested on real workers (tests/delegation/test_delegation.py:
# parallel calls overlap; it never asks for approval) and in tests/policy/test_policy.py.


def test_task_alias_is_hidden() -> None:
    """S-TOOL-5: ``Task`` is accepted but the model is offered only ``Agent``."""
    assert AGENT_TOOL_NAME == "Agent"
    assert HIDDEN_ALIASES == ("Task",)
    spec = agent_tool_spec([GENERAL_PURPOSE], PARENT_TOOLS)
    assert spec.name == "Agent"
    assert spec.input_schema == agent_tool_input_schema()


# --- the description (S-TOOL-4) ---


def test_description_lists_each_profile_with_its_tools() -> None:
    """S-TOOL-4: each profile as ``- NAME: DESCRIPTION (Tools: ...)``."""
    reviewer = AgentProfile(
        name="reviewer", description="Reviews diffs.", prompt="Review.", tools=("Read", "Grep")
    )
    text = agent_tool_description([GENERAL_PURPOSE, EXPLORE, reviewer], PARENT_TOOLS)
    assert (
        f"- general-purpose: {GENERAL_PURPOSE.description} "
        "(Tools: Read, Write, Edit, Glob, Grep, Bash, LS)"
    ) in text
    assert f"- Explore: {EXPLORE.description} (Tools: Read, Glob, Grep, Bash, LS)" in text
    assert "- reviewer: Reviews diffs. (Tools: Read, Grep)" in text


def test_description_lists_only_the_profiles_given() -> None:
    """S-TOOL-4: profiles denied by ``task`` permission are filtered by the caller."""
    text = agent_tool_description([EXPLORE], PARENT_TOOLS)
    assert "- Explore:" in text
    assert "- general-purpose:" not in text


def test_description_with_no_profiles_says_none_may_be_launched() -> None:
    text = agent_tool_description([], PARENT_TOOLS)
    assert "no agent type may be launched" in text
    assert "\n- " not in text.split("When not to use it")[0]


def test_profile_without_tools_is_marked() -> None:
    skill_only = AgentProfile(
        name="s", description="d", prompt="p", skills=("x",), disallowed_tools=("Skill",)
    )
    assert "- s: d (Tools: none)" in agent_tool_description([skill_only], PARENT_TOOLS)


@pytest.mark.parametrize(
    "phrase",
    [
        "starts fresh",
        "self-contained",
        "single message with several tool calls",
        "run concurrently",
        "write code or only research",
        "not to the user",
        "relay",
        "run_in_background",
        "notified when the agent completes",
        "task_id",
        "3-5 words",
    ],
)
def test_description_gives_the_usage_rules(phrase: str) -> None:
    """S-TOOL-4: fresh context, concurrency, code-or-research, relaying, background, resume."""
    assert phrase in agent_tool_description([GENERAL_PURPOSE], PARENT_TOOLS)


def test_description_lists_no_delegation_tools_for_children() -> None:
    """S-POL-1: the tools shown for each profile never include Agent or Task."""
    text = agent_tool_description([GENERAL_PURPOSE, EXPLORE], PARENT_TOOLS)
    groups = re.findall(r"\(Tools: ([^)]*)\)", text)
    assert len(groups) == 2
    for group in groups:
        assert {"Agent", "Task"}.isdisjoint(group.split(", "))


# --- truncation (S-TOOL-3) ---


@given(text=_texts, max_bytes=st.integers(min_value=0, max_value=3_000))
def test_truncated_result_never_exceeds_the_cap(text: str, max_bytes: int) -> None:
    """S-TOOL-3: at most max_bytes of valid UTF-8."""
    result = truncate_result(text, max_bytes)
    assert _utf8_size(result) <= max_bytes
    result.encode("utf-8").decode("utf-8")


@given(text=_texts, max_bytes=st.integers(min_value=300, max_value=3_000))
def test_marker_present_iff_cut(text: str, max_bytes: int) -> None:
    """S-TOOL-3: a marker states how much was cut, and appears only when something was."""
    result = truncate_result(text, max_bytes)
    match = _MARKER.search(result)
    if _utf8_size(text) <= max_bytes:
        assert result == text
        assert match is None
    else:
        assert match is not None
        head = result[: match.start()].removesuffix("\n")
        assert text.startswith(head)
        assert int(match.group(1)) == _utf8_size(text) - _utf8_size(head)


def test_default_cap_is_120000_bytes() -> None:
    """S-TOOL-3: at most 120000 bytes reach the model by default."""
    assert truncate_result("x" * 120_000) == "x" * 120_000
    cut = truncate_result("x" * 120_001)
    assert _utf8_size(cut) <= 120_000
    assert _MARKER.search(cut)


# --- foreground result (S-TOOL-6) ---

_TRAILER = re.compile(
    r"\n\nagentId: (\S+) \(use SendMessage with this id to continue this agent\)\n"
    r"<usage>total_tokens: (\d+)\ntool_uses: (\d+)\nduration_ms: (\d+)</usage>\Z"
)


def test_foreground_result_is_text_then_agent_id_and_usage() -> None:
    """S-TOOL-6: final text, the agentId line with the SendMessage hint, ``<usage>``."""
    result = format_foreground_result(
        "Found 3 bugs.", agent_id="agent_42", total_tokens=1234, tool_uses=7, duration_ms=8900
    )
    assert result == (
        "Found 3 bugs.\n\n"
        "agentId: agent_42 (use SendMessage with this id to continue this agent)\n"
        "<usage>total_tokens: 1234\ntool_uses: 7\nduration_ms: 8900</usage>"
    )


def test_partial_result_says_so_in_the_part_never_cut() -> None:
    """S-PROF-7: a run that hit its turn limit is reported as partial."""
    result = format_foreground_result(
        "x" * (2 * MAX_RESULT_BYTES),
        agent_id="a",
        total_tokens=1,
        tool_uses=1,
        duration_ms=1,
        status="partial",
    )
    assert _utf8_size(result) <= MAX_RESULT_BYTES
    marker = _MARKER.search(result)
    assert marker is not None
    status_line = result.index("\n\nstatus: partial (the agent reached its turn limit")
    assert marker.end() < status_line < result.index("\nagentId: a (use SendMessage")
    assert result.endswith("<usage>total_tokens: 1\ntool_uses: 1\nduration_ms: 1</usage>")
    assert "status: partial" not in format_foreground_result(
        "done", agent_id="a", total_tokens=1, tool_uses=1, duration_ms=1
    )


def test_empty_final_text_is_explained() -> None:
    result = format_foreground_result("", agent_id="a", total_tokens=0, tool_uses=0, duration_ms=0)
    assert result.startswith("(the agent finished without a final message)")


@given(text=_texts, repeat=st.integers(min_value=1, max_value=200))
def test_foreground_result_fits_and_keeps_its_trailer(text: str, repeat: int) -> None:
    """S-TOOL-3, S-TOOL-6: the text is cut, never the trailer; the whole fits the cap."""
    body = text * repeat
    result = format_foreground_result(
        body, agent_id="agent_x", total_tokens=10**9, tool_uses=99, duration_ms=5
    )
    assert _utf8_size(result) <= MAX_RESULT_BYTES
    match = _TRAILER.search(result)
    assert match is not None
    assert match.groups() == ("agent_x", str(10**9), "99", "5")
    kept = result[: match.start()]
    if body.strip() and _utf8_size(body) + _utf8_size(match.group(0)) <= MAX_RESULT_BYTES:
        assert kept == body
    elif body.strip():
        assert _MARKER.search(kept)


# --- opencode form (S-TOOL-6) ---


def test_task_result_form() -> None:
    assert format_task_result("All good.", task_id="ses_1", state="completed") == (
        '<task id="ses_1" state="completed"><task_result>All good.</task_result></task>'
    )


def test_task_error_form() -> None:
    assert format_task_error("model refused", task_id="ses_1") == (
        '<task id="ses_1" state="failed"><task_error>model refused</task_error></task>'
    )


def test_task_id_is_escaped_in_the_attribute() -> None:
    result = format_task_result("ok", task_id='a"<b>', state="completed")
    assert result.startswith('<task id="a&quot;&lt;b&gt;" state="completed">')


@pytest.mark.parametrize("state", ["completed", "partial"])
def test_task_result_fits_the_cap_and_stays_well_formed(state: Any) -> None:
    result = format_task_result("é" * MAX_RESULT_BYTES, task_id="t", state=state)
    assert _utf8_size(result) <= MAX_RESULT_BYTES
    assert result.startswith(f'<task id="t" state="{state}"><task_result>')
    assert result.endswith("</task_result></task>")
    assert _MARKER.search(result)
    error = format_task_error("e" * (MAX_RESULT_BYTES * 2), task_id="t")
    assert _utf8_size(error) <= MAX_RESULT_BYTES
    assert error.endswith("</task_error></task>")


# --- background launch (S-RUN-4) ---


def test_async_launched_tells_the_model_what_it_needs() -> None:
    text = format_async_launched(
        agent_id="agent_7", description="Audit the parser", output_file="/tmp/a/output.txt"
    )
    assert text.startswith("async_launched")
    assert "Audit the parser" in text
    assert "agentId: agent_7" in text
    assert "output_file: /tmp/a/output.txt" in text
    assert "notification when it completes" in text
    assert "do not poll" in text
