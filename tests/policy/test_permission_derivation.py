"""A child's rules, mode and delegation, derived from its parent (S-POL-2, S-POL-3, S-POL-4)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.policy._permission_derivation import (
    DEFAULT_SUBAGENT_DEPTH,
    agent_tool_enabled,
    child_permission_mode,
    derive_child_rules,
    inherited_rules,
    launchable_agents,
)
from supervisor.policy._rule_config import rules_from_config
from supervisor.policy._rules import (
    ACTIONS,
    Action,
    PermissionMode,
    PermissionRule,
    apply_mode,
    evaluate,
    last_matching_rule,
)


@dataclass(frozen=True)
class Case:
    parent: object
    child: object
    permission: str
    subject: str
    expected: Action
    parent_mode: PermissionMode = "default"


# opencode's documented behaviour of deriveSubagentSessionPermission, case by case.
DERIVATION_TABLE: dict[str, Case] = {
    "plan parent's edit deny reaches the child": Case(
        {"*": "allow"}, {"edit": "allow"}, "edit", "src/a.py", "deny", parent_mode="plan"
    ),
    "plan parent's bash deny reaches the child": Case(
        {"*": "allow"}, {"bash": "allow"}, "bash", "ls", "deny", parent_mode="plan"
    ),
    "plan parent still lets the child read": Case(
        {"*": "allow"}, {"read": "allow"}, "read", "/p/a.py", "allow", parent_mode="plan"
    ),
    "parent allow is not inherited": Case({"bash": "allow"}, {}, "bash", "ls", "ask"),
    "parent allow-all is not inherited": Case({"*": "allow"}, {}, "webfetch", "https://x", "ask"),
    "parent deny is inherited": Case({"bash": {"rm *": "deny"}}, {}, "bash", "rm -rf x", "deny"),
    "child cannot lift a parent deny": Case(
        {"webfetch": "deny"}, {"webfetch": "allow"}, "webfetch", "https://x", "deny"
    ),
    "child allows what the parent did not deny": Case(
        {"bash": {"rm *": "deny"}}, {"bash": "allow"}, "bash", "ls -la", "allow"
    ),
    "todowrite denied by default": Case({}, {}, "todowrite", "*", "deny"),
    "todowrite rule in the profile re-enables it": Case(
        {}, {"todowrite": "allow"}, "todowrite", "*", "allow"
    ),
    "task denied by default": Case({}, {}, "task", "Explore", "deny"),
    "task denied even under a profile allow-all": Case({}, {"*": "allow"}, "task", "x", "deny"),
    "explicit task rule re-enables delegation": Case(
        {}, {"task": {"*": "deny", "Explore": "allow"}}, "task", "Explore", "allow"
    ),
    "explicit task rule keeps its own denies": Case(
        {}, {"task": {"*": "deny", "Explore": "allow"}}, "task", "general-purpose", "deny"
    ),
    "parent task deny survives the child's task rule": Case(
        {"task": {"general-purpose": "deny"}}, {"task": "allow"}, "task", "general-purpose", "deny"
    ),
    "external_directory allow is inherited": Case(
        {"external_directory": {"/data/*": "allow"}}, {}, "external_directory", "/data/x/*", "allow"
    ),
    "external_directory ask is inherited": Case(
        {"external_directory": {"*": "ask"}},
        {"external_directory": {"/etc/*": "allow"}},
        "external_directory",
        "/etc/*",
        "ask",
    ),
    "parent external_directory rules come after the child's": Case(
        {"external_directory": {"/data/*": "allow"}},
        {"external_directory": {"/data/*": "deny"}},
        "external_directory",
        "/data/*",
        "allow",
    ),
    "a deny-all parent loses its exceptions": Case(
        {"edit": {"*": "deny", "docs/*": "allow"}}, {"edit": "allow"}, "edit", "docs/a.md", "deny"
    ),
}


@pytest.mark.parametrize("case", DERIVATION_TABLE.values(), ids=DERIVATION_TABLE.keys())
def test_derivation_table(case: Case) -> None:
    """S-POL-2: opencode's derivation: denies and external_directory flow down, grants do not."""
    parent = apply_mode(case.parent_mode, rules_from_config(case.parent))
    child = derive_child_rules(parent, rules_from_config(case.child))
    assert evaluate(child, case.permission, case.subject) == case.expected


def test_derived_order() -> None:
    """S-POL-2: profile rules, then inherited parent rules, then the default denies."""
    parent = rules_from_config(
        [
            {"permission": "bash", "pattern": "*", "action": "allow"},
            {"permission": "bash", "pattern": "rm *", "action": "deny"},
            {"permission": "external_directory", "pattern": "/d/*", "action": "allow"},
            {"permission": "edit", "pattern": "*", "action": "ask"},
        ]
    )
    own = rules_from_config({"read": "allow", "todowrite": "ask"})
    assert derive_child_rules(parent, own) == (
        PermissionRule("read", "*", "allow"),
        PermissionRule("todowrite", "*", "ask"),
        PermissionRule("bash", "rm *", "deny"),
        PermissionRule("external_directory", "/d/*", "allow"),
        PermissionRule("task", "*", "deny"),
    )
    assert inherited_rules(parent) == derive_child_rules(parent, own)[2:4]


_permissions = st.sampled_from(
    ["read", "edit", "bash", "task", "todowrite", "external_directory", "mcp__gh__x"]
)
_permission_patterns = st.one_of(_permissions, st.sampled_from(["*", "e?it", "mcp__*"]))
_subjects = st.text("ab/ ", max_size=5)
_rules = st.builds(
    PermissionRule, _permission_patterns, st.text("ab/ *?", max_size=5), st.sampled_from(ACTIONS)
)
_rulesets = st.lists(_rules, max_size=8).map(tuple)


@given(_rulesets, _rulesets, _permissions, _subjects)
def test_parent_denies_survive_derivation(
    parent: tuple[PermissionRule, ...],
    own: tuple[PermissionRule, ...],
    permission: str,
    subject: str,
) -> None:
    """S-POL-2: whatever the child's profile says, what the parent denies the child denies."""
    if evaluate(parent, permission, subject) == "deny":
        assert evaluate(derive_child_rules(parent, own), permission, subject) == "deny"


_literal_rulesets = st.lists(
    st.builds(
        PermissionRule, _permissions, st.text("ab/ *?", max_size=5), st.sampled_from(ACTIONS)
    ),
    max_size=8,
).map(tuple)


@given(_literal_rulesets, _rulesets, _subjects)
def test_parent_external_directory_rules_decide_where_they_match(
    parent: tuple[PermissionRule, ...], own: tuple[PermissionRule, ...], subject: str
) -> None:
    """S-POL-2: where a parent external_directory rule matches, the child answers as the parent."""
    if last_matching_rule(parent, "external_directory", subject) is not None:
        child = derive_child_rules(parent, own)
        expected = evaluate(parent, "external_directory", subject)
        assert evaluate(child, "external_directory", subject) == expected


@given(_rulesets, _rulesets)
def test_derivation_adds_only_parent_denies_and_external_directory(
    parent: tuple[PermissionRule, ...], own: tuple[PermissionRule, ...]
) -> None:
    """S-POL-2: no parent allow or ask reaches the child, except for external_directory."""
    child = derive_child_rules(parent, own)
    assert child[: len(own)] == own
    added = child[len(own) :]
    defaults = {PermissionRule("todowrite", "*", "deny"), PermissionRule("task", "*", "deny")}
    for rule in added:
        assert rule.action == "deny" or rule.permission == "external_directory"
        assert rule in parent or rule in defaults


@given(_rulesets)
def test_nothing_to_inherit_leaves_the_profile_as_is(own: tuple[PermissionRule, ...]) -> None:
    """S-POL-2: a parent without denies adds nothing to a profile with task and todowrite rules."""
    own = (*own, PermissionRule("task", "*", "ask"), PermissionRule("todowrite", "*", "allow"))
    parent = rules_from_config({"*": "allow", "bash": {"*": "ask"}})
    assert derive_child_rules(parent, own) == own


def test_launchable_agents() -> None:
    """S-TOOL-4: agent types whose task permission is deny are not offered."""
    names = ["general-purpose", "Explore", "reviewer", "secret"]
    rules = rules_from_config({"task": {"*": "allow", "secret": "deny", "rev*": "deny"}})
    assert launchable_agents(rules, names) == ["general-purpose", "Explore"]
    assert launchable_agents((), names) == names  # asking still lists them
    assert launchable_agents(derive_child_rules((), ()), names) == []
    reenabled = derive_child_rules((), rules_from_config({"task": {"Explore": "allow"}}))
    assert launchable_agents(reenabled, names) == names  # no catch-all deny in the profile


@pytest.mark.parametrize(
    ("depth_config", "current_depth", "enabled"),
    [
        (0, 0, False),
        (1, 0, True),
        (1, 1, False),
        (2, 1, True),
        (2, 2, False),
        (DEFAULT_SUBAGENT_DEPTH, 0, True),
        (DEFAULT_SUBAGENT_DEPTH, 1, False),
    ],
)
def test_agent_tool_enabled(depth_config: int, current_depth: int, enabled: bool) -> None:
    """S-POL-4: depth 1 lets the main agent delegate and no child; 0 disables delegation."""
    assert agent_tool_enabled(depth_config, current_depth) is enabled


@given(st.integers(0, 6))
def test_depth_config_counts_delegating_levels(depth_config: int) -> None:
    """S-POL-4: exactly the levels 0 .. depth_config - 1 may delegate."""
    levels = [depth for depth in range(8) if agent_tool_enabled(depth_config, depth)]
    assert levels == list(range(depth_config))


@pytest.mark.parametrize(("depth_config", "current_depth"), [(-1, 0), (1, -1), (True, 0), (1.0, 0)])
def test_agent_tool_enabled_rejects_bad_depths(depth_config: object, current_depth: object) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        agent_tool_enabled(depth_config, current_depth)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("parent", "profile", "expected"),
    [
        ("default", None, "default"),
        ("plan", None, "plan"),
        ("default", "acceptEdits", "acceptEdits"),
        ("plan", "acceptEdits", "acceptEdits"),
        ("acceptEdits", "yolo", "bypassPermissions"),
        ("bypassPermissions", "plan", "bypassPermissions"),
        ("bypassPermissions", None, "bypassPermissions"),
    ],
)
def test_child_permission_mode(
    parent: PermissionMode, profile: str | None, expected: PermissionMode
) -> None:
    """S-POL-3: a child inherits its parent's mode; its profile overrides, but not a bypass."""
    assert child_permission_mode(parent, profile) == expected
