"""What a child may do, derived from its parent: rules, mode, delegation (S-POL-2, S-POL-4).

Follows opencode's ``deriveSubagentSessionPermission``
(``packages/opencode/src/agent/subagent-permissions.ts``): a parent's limits
flow down, its grants do not. The child's effective ruleset is, in order:

1. the child profile's own rules;
2. the parent's ``external_directory`` rules and every ``deny`` rule, in the
   parent's order;
3. ``todowrite`` deny, then ``task`` deny, each unless the child profile has a
   rule for that permission.

Order matters because the last matching rule wins. opencode evaluates a
child with ``merge(agent.permission, session.permission)``, the inherited
rules being the session's, so they come after the profile's: a child profile
can never lift a parent's deny, and the parent's ``external_directory`` rules
override the child's own where both match.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from ._rules import PermissionMode, PermissionRule, Ruleset, evaluate, parse_permission_mode

__all__ = [
    "DEFAULT_SUBAGENT_DEPTH",
    "agent_tool_enabled",
    "child_permission_mode",
    "derive_child_rules",
    "inherited_rules",
    "launchable_agents",
]

#: ``subagent_depth`` when unset: the main agent may delegate, a child may not.
DEFAULT_SUBAGENT_DEPTH: Final = 1

# Permissions a child is denied unless its own profile has a rule for them.
_DENIED_BY_DEFAULT: Final[tuple[str, ...]] = ("todowrite", "task")


def inherited_rules(parent: Iterable[PermissionRule]) -> Ruleset:
    """The parent rules a child inherits: ``external_directory`` rules and every deny."""
    return tuple(
        rule for rule in parent if rule.permission == "external_directory" or rule.action == "deny"
    )


def derive_child_rules(
    parent: Iterable[PermissionRule], child_profile_rules: Iterable[PermissionRule]
) -> Ruleset:
    """The ruleset a child runs under (S-POL-2); see the module docstring for the order.

    ``parent`` is the ruleset the parent runs under, with its mode's denies
    (:func:`~supervisor.policy._rules.apply_mode`), so a ``plan`` parent's
    denies reach the child. A parent ``allow`` is not inherited. ``todowrite``
    and ``task`` are denied unless ``child_profile_rules`` has a rule whose
    permission is exactly that name, whatever its action (as opencode checks),
    so a profile's ``task`` rules decide which agents the child may launch.
    Inheriting every deny means a parent that denies ``edit`` on ``*`` and
    allows one folder leaves its child no edits at all.
    """
    own = tuple(child_profile_rules)
    defaults = tuple(
        PermissionRule(permission, "*", "deny")
        for permission in _DENIED_BY_DEFAULT
        if not any(rule.permission == permission for rule in own)
    )
    return (*own, *inherited_rules(parent), *defaults)


def launchable_agents(rules: Sequence[PermissionRule], names: Iterable[str]) -> list[str]:
    """The agent types, of ``names`` and in their order, that ``rules`` do not deny as ``task``.

    An agent type whose ``task`` permission is deny is left out of the Agent
    tool's description and cannot be launched (S-TOOL-4), as opencode's task
    tool filters its list.
    """
    return [name for name in names if evaluate(rules, "task", name) != "deny"]


def agent_tool_enabled(depth_config: int, current_depth: int) -> bool:
    """Whether an agent at ``current_depth`` gets the Agent tool under ``subagent_depth`` (S-POL-4).

    The main agent is at depth 0, its children at 1. An agent may delegate
    while its depth is below ``depth_config``: 1 (the default) lets only the
    main agent delegate, 0 disables delegation. The supervisor computes
    ``current_depth`` from its own records of who launched whom, never from
    what a worker reports.
    """
    for name, value in (("subagent_depth", depth_config), ("current depth", current_depth)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return current_depth < depth_config


def child_permission_mode(
    parent_mode: PermissionMode, profile_mode: str | None = None
) -> PermissionMode:
    """The mode a child runs in: its profile's, else its parent's (S-POL-3).

    As in Claude Code, a child inherits the parent's mode and its profile's
    ``permissionMode`` overrides it, except that a parent in
    ``bypassPermissions`` keeps its children there. A ``plan`` parent's
    denies still reach a child whose profile picks another mode, through
    the rules it inherits (:func:`derive_child_rules`).
    """
    if parent_mode == "bypassPermissions" or profile_mode is None:
        return parent_mode
    return parse_permission_mode(profile_mode)
