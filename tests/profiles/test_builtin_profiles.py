"""Profiles: the ``AgentProfile`` model, tool resolution and the built-ins.

S-PROF-1 (built-ins), S-PROF-2 (fields), S-PROF-4 (project profiles and
permissionMode), S-PROF-5 (tool inheritance), S-POL-1 (tools no child gets).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from supervisor.profiles._builtin_profiles import BUILTIN_PROFILES, EXPLORE, GENERAL_PURPOSE
from supervisor.profiles._profile import NEVER_INHERITED_TOOLS, AgentProfile
from worker.tools import LOCAL_TOOL_NAMES, resolve_tool_name

PARENT_TOOLS = (
    "Read",
    "Write",
    "Edit",
    "Glob",
    "Grep",
    "Bash",
    "LS",
    "Agent",
    "Task",
    "EnterPlanMode",
    "ExitPlanMode",
    "WebFetch",
    "mcp__github__search",
)
# PARENT_TOOLS less Agent, Task, EnterPlanMode and ExitPlanMode (S-POL-1).
_CHILD_VISIBLE = (
    "Read",
    "Write",
    "Edit",
    "Glob",
    "Grep",
    "Bash",
    "LS",
    "WebFetch",
    "mcp__github__search",
)


def _canonical(name: str) -> str:
    return resolve_tool_name(name) or name


def _profile(**fields: Any) -> AgentProfile:
    return AgentProfile.model_validate(
        {"name": "tester", "description": "Runs tests", "prompt": "Run the tests.", **fields}
    )


# --- the model (S-PROF-2) ---


def test_frontmatter_names_validate_as_written() -> None:
    """S-PROF-2: a profile file's frontmatter keys are accepted as they are."""
    profile = AgentProfile.model_validate(
        {
            "name": "reviewer",
            "description": "Review the current diff",
            "prompt": "You are a careful code reviewer.",
            "tools": "Read, Grep, Glob, Bash",
            "disallowedTools": ["Bash"],
            "model": "anthropic/claude-sonnet-4$high",
            "skills": "code-review",
            "color": "purple",
            "permissionMode": "acceptEdits",
            "maxTurns": 12,
            "background": True,
            "memory": "user",
            "mcpServers": ["github"],
            "source": "/home/u/.subvisor/agents/reviewer.md",
            "scope": "user",
        }
    )
    assert profile.tools == ("Read", "Grep", "Glob", "Bash")
    assert profile.disallowed_tools == ("Bash",)
    assert profile.skills == ("code-review",)
    assert profile.permission_mode == "acceptEdits"
    assert profile.max_turns == 12
    assert profile.background is True
    assert profile.mcp_servers == ("github",)
    assert profile.scope == "user"


def test_python_names_validate_too() -> None:
    profile = AgentProfile(
        name="x", description="d", prompt="p", disallowed_tools=("Bash",), max_turns=3
    )
    assert profile.disallowed_tools == ("Bash",)
    assert profile.max_turns == 3


def test_defaults_mean_inherit() -> None:
    """S-PROF-2: unset fields inherit (tools, model) or are off."""
    profile = _profile()
    assert profile.tools is None
    assert profile.model is None
    assert profile.disallowed_tools == ()
    assert profile.skills == ()
    assert profile.max_turns is None
    assert profile.background is False
    assert (profile.source, profile.scope) == ("built-in", "built-in")


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "  "},
        {"description": ""},
        {"maxTurns": 0},
        {"scope": "global"},
        {"temperature": 0.2},
        {"tools": 42},
    ],
)
def test_invalid_profiles_are_rejected(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _profile(**fields)


def test_profiles_are_immutable() -> None:
    profile = _profile()
    with pytest.raises(ValidationError):
        profile.prompt = "something else"


def test_project_profile_may_not_set_permission_mode() -> None:
    """S-PROF-4: a repository must not raise its own permissions."""
    with pytest.raises(ValidationError, match="project-level profile may not set permissionMode"):
        _profile(scope="project", source="/repo/.subvisor/agents/x.md", permissionMode="bypass")
    assert _profile(scope="user", permissionMode="bypass").permission_mode == "bypass"
    assert _profile(scope="project").permission_mode is None


# --- tool resolution (S-PROF-5, S-POL-1) ---


@pytest.mark.parametrize("tools", [None, (), ("*",), "*", ""])
def test_omitted_star_or_empty_tools_inherit_every_parent_tool(tools: Any) -> None:
    """S-PROF-5: inherit all the parent's tools, minus Agent, Task and plan mode."""
    assert _profile(tools=tools).resolve_tools(PARENT_TOOLS) == _CHILD_VISIBLE


@pytest.mark.parametrize(
    ("tools", "lists"),
    [(None, False), ((), False), (("*",), False), (("*", "Read"), False), (("Read",), True)],
)
def test_lists_tools_tells_a_list_from_inheritance(tools: Any, lists: bool) -> None:
    assert _profile(tools=tools).lists_tools is lists


def test_listed_tools_are_those_the_parent_has() -> None:
    """S-PROF-5: a listed tool the parent lacks is not granted."""
    profile = _profile(tools=("Read", "Grep", "NotebookEdit", "mcp__github__search"))
    assert profile.resolve_tools(PARENT_TOOLS) == ("Read", "Grep", "mcp__github__search")


def test_opencode_names_are_canonicalised() -> None:
    """S-LOCAL-1: ``read`` and ``Read`` are the same tool, in lists and in disallowed."""
    profile = _profile(tools="read, grep, list, Read", disallowedTools="GREP, grep")
    assert profile.resolve_tools(PARENT_TOOLS) == ("Read", "LS")
    assert _profile(tools=("Read",)).resolve_tools(["read", "bash"]) == ("Read",)


def test_disallowed_tools_are_removed_when_inheriting() -> None:
    profile = _profile(disallowedTools=["bash", "WebFetch"])
    assert profile.resolve_tools(PARENT_TOOLS) == tuple(
        name for name in _CHILD_VISIBLE if name not in {"Bash", "WebFetch"}
    )


def test_the_tools_no_child_gets() -> None:
    """S-POL-1: one level of delegation, and no plan mode in a child."""
    assert {"Agent", "Task", "EnterPlanMode", "ExitPlanMode"} == NEVER_INHERITED_TOOLS


@pytest.mark.parametrize("tools", [None, ("*",), ("Agent", "Task", "EnterPlanMode", "Read")])
def test_children_never_get_delegation_or_plan_mode_tools(tools: Any) -> None:
    """S-POL-1: not even when the profile lists them."""
    resolved = _profile(tools=tools).resolve_tools(PARENT_TOOLS)
    assert NEVER_INHERITED_TOOLS.isdisjoint(resolved)


@given(
    parent=st.lists(
        st.sampled_from(
            [*LOCAL_TOOL_NAMES, "read", "bash", *NEVER_INHERITED_TOOLS, "Skill", "WebFetch"]
        ),
        max_size=12,
    ),
    tools=st.none() | st.lists(st.sampled_from([*PARENT_TOOLS, "*", "grep", "Skill"])),
    disallowed=st.lists(st.sampled_from([*PARENT_TOOLS, "edit"]), max_size=4),
    skills=st.lists(st.sampled_from(["review", "deploy"]), max_size=2),
)
def test_resolved_tools_never_include_forbidden_or_disallowed(
    parent: list[str], tools: list[str] | None, disallowed: list[str], skills: list[str]
) -> None:
    """S-PROF-5, S-POL-1: whatever the profile says, these never get through."""
    profile = _profile(tools=tools, disallowedTools=disallowed, skills=skills)
    resolved = profile.resolve_tools(parent)
    assert NEVER_INHERITED_TOOLS.isdisjoint(resolved)
    assert set(resolved).isdisjoint(_canonical(name) for name in disallowed)
    assert resolved == tuple(dict.fromkeys(_canonical(name) for name in resolved))
    allowed = {_canonical(name) for name in parent} | ({"Skill"} if skills else set())
    assert set(resolved) <= allowed


def test_skills_without_tools_get_only_the_skill_tool() -> None:
    """S-PROF-5: ``skills`` and no ``tools``: only Skill."""
    assert _profile(skills=["code-review"]).resolve_tools(PARENT_TOOLS) == ("Skill",)


def test_skills_with_star_inherit_and_add_skill() -> None:
    """S-PROF-5: ``tools: *`` keeps inheritance when ``skills`` are set."""
    resolved = _profile(tools="*", skills=["code-review"]).resolve_tools(PARENT_TOOLS)
    assert resolved == (*_CHILD_VISIBLE, "Skill")


def test_skills_with_listed_tools_add_skill() -> None:
    resolved = _profile(tools="Read, Grep", skills="code-review").resolve_tools(PARENT_TOOLS)
    assert resolved == ("Read", "Grep", "Skill")


def test_disallowing_skill_wins_over_skills() -> None:
    profile = _profile(skills=["code-review"], disallowedTools=["Skill"])
    assert profile.resolve_tools(PARENT_TOOLS) == ()


# --- the built-ins (S-PROF-1) ---


def test_each_builtin_answers_to_its_key_and_inherits_the_model() -> None:
    """S-PROF-1: the catalog lists a built-in under its key, so the key must be the
    profile's own name; a built-in names no model, so its child runs on the parent's
    (S-MODEL-1). (That an empty project offers exactly these two: test_profile_catalog.)"""
    assert [(key, p.name) for key, p in BUILTIN_PROFILES.items()] == [
        ("general-purpose", "general-purpose"),
        ("Explore", "Explore"),
    ]
    for profile in BUILTIN_PROFILES.values():
        assert (profile.scope, profile.source, profile.model) == ("built-in", "built-in", None)


def test_general_purpose_gets_every_tool() -> None:
    """S-PROF-1: full tools (minus what no child gets)."""
    assert GENERAL_PURPOSE.resolve_tools(PARENT_TOOLS) == _CHILD_VISIBLE


def test_general_purpose_prompt_asks_for_completion_without_gold_plating() -> None:
    """S-PROF-1: complete the task fully, do not gold-plate, end with a concise report."""
    prompt = GENERAL_PURPOSE.prompt.lower()
    assert "complete the task fully" in prompt
    assert "do not gold-plate" in prompt
    assert "concise report" in prompt


def test_explore_cannot_write_but_keeps_bash() -> None:
    """S-PROF-1: write tools removed, Bash kept."""
    resolved = EXPLORE.resolve_tools(PARENT_TOOLS)
    assert "Write" not in resolved
    assert "Edit" not in resolved
    assert {"Read", "Glob", "Grep", "Bash", "LS"} <= set(resolved)


def test_explore_prompt_states_read_only_and_how_to_report() -> None:
    """S-PROF-1: read-only is stated in the prompt, with the search-then-read method."""
    prompt = EXPLORE.prompt
    assert "READ-ONLY" in prompt
    assert "must not" in prompt
    assert "Search broadly first" in prompt
    assert "read precisely" in prompt
    assert "line numbers" in prompt


def test_builtin_descriptions_say_when_to_use_them() -> None:
    assert "read-only" in EXPLORE.description
    assert "thorough" in EXPLORE.description
    assert "multi-step" in GENERAL_PURPOSE.description
