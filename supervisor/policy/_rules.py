"""Permission rules as opencode evaluates them, plus Claude Code's modes (S-POL-2, S-POL-3).

A rule says what happens (``allow``, ``ask``, ``deny``) when a *permission*
(``bash``, ``edit``, ``task``, an MCP tool name...) is used on a *subject*
(the command, the path, the subagent type). Both the rule's permission and
its pattern are wildcards (:func:`wildcard_match`, which ``protocol`` holds: a worker
matches the ``read`` rules a verdict carries with it). Rules are evaluated in
order and the last one that matches wins; when none matches the answer is
``ask`` (opencode's ``Permission.evaluate``). A tool call may need several
checks (``_tool_permissions``); :func:`decide` combines them: any deny
denies, else any ask asks, else allow.

Modes (Claude Code's ``permissionMode``) act at evaluation time
(:func:`evaluate`); :func:`apply_mode` writes the part of ``plan`` that must
reach children as deny rules, since a child inherits every deny (S-POL-2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, get_args

from protocol import wildcard_match

from ..kernel import SubvisorError

__all__ = [
    "ACTIONS",
    "PERMISSION_MODES",
    "PLAN_MODE_PERMISSIONS",
    "STRICTNESS",
    "Action",
    "PermissionCheck",
    "PermissionConfigError",
    "PermissionMode",
    "PermissionRule",
    "Ruleset",
    "apply_mode",
    "decide",
    "evaluate",
    "last_matching_rule",
    "merge",
    "parse_permission_mode",
    "wildcard_match",
]

Action = Literal["allow", "ask", "deny"]
#: How strict an action is: a stricter answer has the higher number.
STRICTNESS: Final[Mapping[Action, int]] = {"allow": 0, "ask": 1, "deny": 2}
ACTIONS: Final[tuple[Action, ...]] = get_args(Action)

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]
PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = get_args(PermissionMode)

#: What opencode answers when no rule matches.
_DEFAULT_ACTION: Final[Action] = "ask"


class PermissionConfigError(SubvisorError, ValueError):
    """A permission rule, config or mode is malformed; the message names the bad key and value."""


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One rule: ``action`` applies when ``permission`` and ``pattern`` both match.

    A ``literal`` rule matches only the very permission and subject it names:
    "allow always" remembers what was approved so, since a subject may hold
    ``*`` or ``?`` (``rm -rf build/*``, a file named ``*``) that a wildcard
    would widen to anything.
    """

    permission: str
    pattern: str
    action: Action
    literal: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.permission, str) or not isinstance(self.pattern, str):
            raise PermissionConfigError(
                f"permission rule {self.permission!r} {self.pattern!r}: "
                "permission and pattern must be strings"
            )
        if self.action not in ACTIONS:
            raise PermissionConfigError(
                f"permission {self.permission!r} pattern {self.pattern!r}: action must be "
                f"one of {', '.join(ACTIONS)}, got {self.action!r}"
            )

    def matches(self, permission: str, subject: str) -> bool:
        """Whether this rule applies to ``permission`` on ``subject``."""
        if self.literal:
            return self.permission == permission and self.pattern == subject
        return wildcard_match(self.permission, permission) and wildcard_match(self.pattern, subject)

    def names(self, permission: str) -> bool:
        """Whether this rule is about ``permission`` (for some subject)."""
        if self.literal:
            return self.permission == permission
        return wildcard_match(self.permission, permission)

    @property
    def covers_every_subject(self) -> bool:
        """Whether its pattern matches every subject (``*``)."""
        return self.pattern == "*" and not self.literal


#: Rules in evaluation order (opencode's ``Ruleset``).
Ruleset: TypeAlias = tuple[PermissionRule, ...]


# --- evaluation ----------------------------------------------------------------------------


def merge(*rulesets: Iterable[PermissionRule]) -> Ruleset:
    """The rulesets one after another, so later ones take precedence (``Permission.merge``)."""
    return tuple(rule for ruleset in rulesets for rule in ruleset)


def last_matching_rule(
    rules: Sequence[PermissionRule], permission: str, subject: str
) -> PermissionRule | None:
    """The last rule matching ``permission`` and ``subject``, or None when none does."""
    for rule in reversed(rules):
        if rule.matches(permission, subject):
            return rule
    return None


#: What ``plan`` lets through: tools that read, plus bookkeeping and delegation
#: (a child's own calls are checked against the plan denies it inherits).
PLAN_MODE_PERMISSIONS: Final[frozenset[str]] = frozenset(
    {
        "read",
        "glob",
        "grep",
        "list",
        "lsp",
        "webfetch",
        "websearch",
        "codesearch",
        "todoread",
        "todowrite",
        "task",
        "skill",
        "external_directory",
    }
)
# The plan denies written as rules so that children inherit them (apply_mode).
_PLAN_DENY_RULES: Final[Ruleset] = (
    PermissionRule("edit", "*", "deny"),
    PermissionRule("bash", "*", "deny"),
    PermissionRule("mcp__*", "*", "deny"),
)


def _apply_mode_to_action(mode: PermissionMode, permission: str, action: Action) -> Action:
    if mode == "plan":
        return action if permission in PLAN_MODE_PERMISSIONS else "deny"
    if mode == "acceptEdits":
        # Only edits: a path outside the project still asks through external_directory.
        return "allow" if permission == "edit" and action == "ask" else action
    if mode == "bypassPermissions":
        # Claude Code: deny rules still block in bypass; opencode --auto likewise.
        return "deny" if action == "deny" else "allow"
    if mode == "dontAsk":
        return "deny" if action == "ask" else action
    return action


def evaluate(
    rules: Sequence[PermissionRule],
    permission: str,
    subject: str,
    *,
    mode: PermissionMode = "default",
) -> Action:
    """What happens when ``permission`` is used on ``subject`` under ``rules`` and ``mode``.

    The last matching rule decides, ``ask`` when none matches. Then the mode:

    - ``default``: as the rules say.
    - ``acceptEdits``: an ``edit`` that would ask is allowed. Edits outside
      the project still ask, through their ``external_directory`` check.
    - ``plan``: read-only tools only: every permission outside
      :data:`PLAN_MODE_PERMISSIONS` is denied, whatever the rules allow
      (Claude Code blocks edits in plan mode even under an allow rule). Bash
      is denied too: Claude Code lets plan mode run read-only commands, but a
      command string cannot be proven read-only, so subvisor does not try.
    - ``bypassPermissions``: everything is allowed except what a rule denies
      (Claude Code keeps deny rules in bypass; opencode's ``--auto`` too).
    - ``dontAsk``: whatever would ask is denied.
    """
    rule = last_matching_rule(rules, permission, subject)
    action = _DEFAULT_ACTION if rule is None else rule.action
    return _apply_mode_to_action(mode, permission, action)


def apply_mode(mode: PermissionMode, rules: Iterable[PermissionRule]) -> Ruleset:
    """``rules`` with the denies ``mode`` must pass on to children appended (S-POL-2).

    Only ``plan`` has such denies: ``edit``, ``bash`` and MCP tools
    (``mcp__*``). Evaluating the result under the same mode gives the same
    answers as before; a child that inherits them cannot edit or run
    commands even if its own mode or profile would let it. The other modes
    are properties of one session and return ``rules`` unchanged.
    """
    base = tuple(rules)
    return merge(base, _PLAN_DENY_RULES) if mode == "plan" else base


@dataclass(frozen=True, slots=True)
class PermissionCheck:
    """One permission a tool call needs, on one subject."""

    permission: str
    subject: str


def decide(
    rules: Sequence[PermissionRule],
    checks: Iterable[PermissionCheck],
    *,
    mode: PermissionMode = "default",
) -> Action:
    """The answer for a tool call needing ``checks``: any deny denies, else any ask asks.

    A call that needs no check is allowed.
    """
    actions = {evaluate(rules, check.permission, check.subject, mode=mode) for check in checks}
    if "deny" in actions:
        return "deny"
    return "ask" if "ask" in actions else "allow"


# --- modes ---------------------------------------------------------------------------------


def _mode_key(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


_MODE_ALIASES: Final[Mapping[str, PermissionMode]] = {
    "default": "default",
    "manual": "default",  # Claude Code's label for default
    "acceptedits": "acceptEdits",
    "plan": "plan",
    "bypasspermissions": "bypassPermissions",
    "bypass": "bypassPermissions",
    "yolo": "bypassPermissions",  # ZCode's name
    "dontask": "dontAsk",
}


def parse_permission_mode(value: object) -> PermissionMode:
    """The mode ``value`` names (None: ``default``), ignoring case, ``-`` and ``_``.

    Aliases: ``manual`` is ``default``; ``bypass`` and ``yolo`` are
    ``bypassPermissions``. Claude Code's ``auto`` needs a safety classifier
    subvisor does not have, so it is rejected like any unknown name.
    """
    if value is None:
        return "default"
    if not isinstance(value, str):
        raise PermissionConfigError(f"permissionMode: expected a string, got {value!r}")
    mode = _MODE_ALIASES.get(_mode_key(value))
    if mode is None:
        raise PermissionConfigError(
            f"permissionMode: unknown mode {value!r}; use one of "
            f"{', '.join(PERMISSION_MODES)} (aliases: manual, bypass, yolo)"
        )
    return mode
