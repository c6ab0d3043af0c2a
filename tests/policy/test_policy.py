"""ToolPolicy: the supervisor's answer to "may this agent make this call?" (S-POL-2, S-POL-3)."""

from __future__ import annotations

import pytest

from supervisor.policy._policy import ToolPolicy
from supervisor.policy._rule_config import rules_from_config


def _policy(config: object, mode: str = "default") -> ToolPolicy:
    return ToolPolicy(rules=rules_from_config(config), mode=mode, project_dir="/project")  # type: ignore[arg-type]


def test_a_deny_names_the_rule_that_decided() -> None:
    decision = _policy({"*": "allow", "bash": {"rm *": "deny"}}).check(
        "Bash", {"command": "ls && rm -rf x"}
    )
    assert decision.action == "deny"
    assert decision.reason == "bash 'rm -rf x' is denied by the rule bash 'rm *' -> deny"


def test_with_nobody_to_ask_an_ask_is_refused_with_the_rule_to_allow_it() -> None:
    decision = _policy({"*": "allow", "edit": "ask"}).authorize_headless(
        "Write", {"file_path": "/project/a.txt", "content": ""}
    )
    assert decision.action == "deny"
    assert 'edit = { "a.txt" = "allow" }' in decision.reason


@pytest.mark.parametrize(
    ("config", "mode", "tool", "expected"),
    [
        ({"*": "allow"}, "default", "Read", True),
        ({"*": "allow"}, "plan", "Read", False),  # modes decide per call
        ({"*": "allow", "bash": {"rm *": "deny"}}, "default", "Bash", False),
        ({"*": "allow", "bash": {"rm *": "deny"}}, "default", "Read", True),
        ({"read": "allow"}, "default", "Read", False),  # external_directory would ask
        ({"read": "allow", "external_directory": "allow"}, "default", "Read", True),
        ({"*": "allow", "external_directory": {"/tmp/*": "deny"}}, "default", "Grep", False),
        ({"*": "ask"}, "default", "LS", False),
    ],
)
def test_preapproval_only_when_no_call_could_be_refused(
    config: object, mode: str, tool: str, expected: bool
) -> None:
    """A tool skips the per-call question only if every call of it would be allowed."""
    assert _policy(config, mode).always_allows(tool) is expected


def test_bash_is_not_preapproved_where_an_edit_could_be_refused() -> None:
    """S-SEC-9: a Bash redirection is an edit, so an edit rule keeps Bash asking per call."""
    assert not _policy({"*": "allow", "edit": "deny"}).always_allows("Bash")
    assert not _policy({"*": "allow", "edit": {"secret/*": "deny"}}).always_allows("Bash")
    assert _policy({"*": "allow", "edit": "deny"}).always_allows("Read")


def test_the_headless_hint_names_the_check_that_asked() -> None:
    """With nobody to ask, the hint names the rule to add for the check that asked."""
    decision = _policy({"*": "allow", "bash": "ask"}).authorize_headless(
        "Bash", {"command": "make > build.log"}
    )
    assert decision.action == "deny"
    assert 'bash = { "make > build.log" = "allow" }' in decision.reason


def test_a_command_too_complex_to_check_is_denied() -> None:
    """S-SEC-9: checking part of a line could miss a deny, so a line past the lexer's limits
    is refused, saying why and what to do."""
    decision = _policy({"*": "allow", "bash": {"rm *": "deny"}}).check(
        "Bash", {"command": "$(" * 100 + "rm x" + ")" * 100}
    )
    assert decision.action == "deny"
    assert "too complex" in decision.reason
    assert "split it into smaller commands" in decision.reason


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"])
@pytest.mark.parametrize(
    ("config", "agent_type", "expected"),
    [
        ({"*": "ask"}, "Explore", "allow"),
        ({}, "general-purpose", "allow"),  # no rule: asks for any other tool
        ({"*": "allow", "task": {"*": "ask"}}, "Explore", "allow"),
        ({"*": "ask", "task": {"Explore": "deny"}}, "Explore", "deny"),
        ({"*": "ask", "task": {"Explore": "deny"}}, "general-purpose", "allow"),
    ],
)
def test_an_agent_call_is_never_asked_about_only_denied_s_tool_3(
    config: object, agent_type: str, mode: str, expected: str
) -> None:
    """S-TOOL-3: an Agent (or Task) call needs no approval in any mode, even with nobody
    to approve; S-TOOL-4: a task deny still refuses it."""
    policy = _policy(config, mode)
    for tool in ("Agent", "Task"):
        decision = policy.authorize_headless(tool, {"subagent_type": agent_type})
        assert decision.action == expected, decision.reason


def test_rules_that_let_an_agent_call_run_still_ask_about_other_tools() -> None:
    """The control of the test above: ``* -> ask`` asks about a Read, not about an Agent."""
    policy = _policy({"*": "ask"})
    assert policy.check("Read", {"file_path": "/project/a"}).action == "ask"
    assert policy.check("Agent", {"subagent_type": "Explore"}).action == "allow"


@pytest.mark.parametrize(
    ("tool", "approved", "later"),
    [
        ("Bash", {"command": "rm -rf build/*"}, {"command": "rm -rf build/../victim"}),
        ("Bash", {"command": "rm -rf build/?"}, {"command": "rm -rf build/x"}),
        ("Write", {"file_path": "*", "content": "x"}, {"file_path": "victim", "content": "x"}),
        ("Edit", {"file_path": "src/*"}, {"file_path": "src/main.py"}),
    ],
)
def test_allow_always_allows_that_call_again_and_nothing_its_wildcards_would_match(
    tool: str, approved: dict[str, str], later: dict[str, str]
) -> None:
    """S-POL-2: "allow always" on a call whose subject holds ``*`` or ``?`` allows that very
    call again; a rule it remembers is literal, so the other call still asks."""
    policy = _policy({"*": "allow", "bash": {"*": "allow", "rm *": "ask"}, "edit": "ask"})
    assert policy.check(tool, approved).action == "ask"
    remembered = policy.remembering(tool, approved)
    assert remembered.check(tool, approved).action == "allow"
    assert remembered.check(tool, later).action == "ask"
    # A literal "*" rule is no rule for every subject: the tool still asks before each call.
    assert not remembered.always_allows(tool)
