"""``ToolPolicy``: may this agent make this tool call? (S-POL-2, S-POL-3)

Every agent (the root in-process, each subagent through a ``permission.check``
request over its pipe) asks before each tool call. The rules live here, in
the trusted process: a worker holds no policy of its own to tamper with. (A
worker that skips the question gains nothing a sandbox would allow: the
kernel sandbox, not this check, is the boundary against a hostile worker.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from protocol import MAX_READ_PATTERN_CHARS, MAX_READ_RULES, PermissionVerdict, ReadRule

from ._bash_lexer import CommandTooComplexError
from ._rules import (
    STRICTNESS,
    Action,
    PermissionMode,
    PermissionRule,
    Ruleset,
    decide,
    evaluate,
    last_matching_rule,
)
from ._tool_permissions import (
    disabled_tools,
    permission_checks,
    permission_name,
    read_deny_checks,
)

__all__ = ["PolicyDecision", "PolicyHolder", "ToolPolicy"]

NO_APPROVER = (
    "nobody can approve in this session; to allow it, add under [permission] in "
    'subvisor.toml: {permission} = {{ "{subject}" = "allow" }}'
)


#: Permissions whose calls are never put to anyone (S-TOOL-3): launching a
#: subagent (``task``: Agent/Task) changes nothing by itself, and each of the
#: child's own calls is checked. A rule may still deny one (S-TOOL-4); what a
#: rule would ask about, or no rule covers, runs.
_NEVER_ASKED: Final[frozenset[str]] = frozenset({"task"})
#: Permissions of the tools that read files they find, not files they name (S-POL-2).
_SEARCHES: Final[frozenset[str]] = frozenset({"glob", "grep"})


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The outcome of a check: the action and, unless allowed, why."""

    action: Action
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """The rules and mode one agent's tool calls are checked against.

    ``ceiling``: rules no answer may be looser than, for an agent whose own
    rules come from a file a repository can write (a project profile, S-SEC-3):
    each call gets the stricter of what ``rules`` and ``ceiling`` say.
    """

    rules: Ruleset
    mode: PermissionMode
    project_dir: str
    ceiling: Ruleset | None = None

    def check(self, tool_name: str, tool_input: Mapping[str, Any]) -> PolicyDecision:
        """Decide one tool call; explain a deny or an ask by the rule that decided it.

        A Bash command too complex to check in full is denied, saying why:
        checking part of it could let a denied command through (S-SEC-9). An
        Agent call is never asked about: what no rule denies, runs (S-TOOL-3).
        """
        try:
            checks = permission_checks(tool_name, tool_input, self.project_dir)
        except CommandTooComplexError as error:
            return PolicyDecision(
                "deny",
                f"{tool_name} command too complex to check against the rules: {error}; "
                "split it into smaller commands",
            )
        denied = self._read_denied(tool_name, tool_input)
        if denied is not None:
            return denied
        if permission_name(tool_name) in _SEARCHES and self._read_rules_unsendable():
            return PolicyDecision(
                "deny",
                f"{tool_name} cannot skip the files the read rules deny: a ruleset names read "
                f"in more than {MAX_READ_RULES} rules or in a pattern over "
                f"{MAX_READ_PATTERN_CHARS} characters; merge those read rules",
            )
        never_asked = bool(checks) and all(check.permission in _NEVER_ASKED for check in checks)
        action: Action = "allow"
        deciding = self.rules
        for rules in (self.rules, self.ceiling):
            if rules is None:
                continue
            answer = decide(_asks_allowed(rules) if never_asked else rules, checks, mode=self.mode)
            if STRICTNESS[answer] > STRICTNESS[action]:
                action, deciding = answer, rules
        if action == "allow":
            return PolicyDecision("allow")
        for check in checks:
            rule = last_matching_rule(deciding, check.permission, check.subject)
            what = f"{check.permission} {check.subject!r}"
            if rule is not None and rule.action == action:
                return PolicyDecision(
                    action,
                    f"{what} is {'denied' if action == 'deny' else 'set to ask'} by the rule "
                    f"{rule.permission} {rule.pattern!r} -> {rule.action}",
                )
            if action == "deny" and self.mode != "default":
                return PolicyDecision(action, f"{what} is not allowed in {self.mode} mode")
        return PolicyDecision(action, f"{tool_name} needs approval (no rule allows it)")

    def _read_denied(self, tool_name: str, tool_input: Mapping[str, Any]) -> PolicyDecision | None:
        """A deny by a ``read`` rule on a Grep/Glob's path or a path's resolved target."""
        for check in read_deny_checks(tool_name, tool_input, self.project_dir):
            for rules in (self.rules, self.ceiling):
                rule = None if rules is None else last_matching_rule(rules, "read", check.subject)
                if rule is not None and rule.action == "deny":
                    return PolicyDecision(
                        "deny",
                        f"{tool_name} reads {check.subject!r}, which is denied by the rule "
                        f"{rule.permission} {rule.pattern!r} -> deny",
                    )
        return None

    def _read_rulesets(self) -> list[list[PermissionRule]]:
        return [
            [rule for rule in rules if rule.names("read")]
            for rules in (self.rules, self.ceiling)
            if rules is not None
        ]

    def _read_rules_unsendable(self) -> bool:
        return any(
            len(rules) > MAX_READ_RULES
            or any(len(rule.pattern) > MAX_READ_PATTERN_CHARS for rule in rules)
            for rules in self._read_rulesets()
        )

    def search_read_rules(self, tool_name: str) -> tuple[tuple[ReadRule, ...], ...]:
        """The ``read`` rules an allowed Grep or Glob must skip files by (S-POL-2); else ``()``.

        Each ruleset (``rules``, then ``ceiling``) that denies some read, its read rules in
        order, for :meth:`protocol.PermissionVerdict.hides`: a search of a folder holding
        ``.env`` under ``read: {"*/.env": "deny"}`` does not return its lines, as Claude
        Code's Read denies cover Grep and Glob. :meth:`check` denies a search whose rules are
        past the verdict's bounds. Like :func:`read_deny_checks`, a policy over an honest
        worker's tools: only the sandbox holds a worker that lies.
        """
        if permission_name(tool_name) not in _SEARCHES:
            return ()
        return tuple(
            tuple(
                ReadRule(pattern=rule.pattern, deny=rule.action == "deny", literal=rule.literal)
                for rule in rules
            )
            for rules in self._read_rulesets()
            if any(rule.action == "deny" for rule in rules)
        )

    def verdict(self, tool_name: str, decision: PolicyDecision) -> PermissionVerdict:
        """What a worker is told of ``decision`` on ``tool_name``: an allowed search carries
        the read rules it must skip files by (:meth:`search_read_rules`).

        Ask it of the policy as it stands after the decision: "allow always" may have
        grown the rules while the user was asked.
        """
        if decision.action != "allow":
            return PermissionVerdict(allowed=False, reason=decision.reason)
        return PermissionVerdict(allowed=True, read_rules=self.search_read_rules(tool_name))

    def always_allows(self, tool_name: str) -> bool:
        """True when every call of ``tool_name`` is allowed, whatever its input.

        Then a worker need not ask before each call. That holds when every
        rule that could apply (to the tool's permission, to
        ``external_directory`` for a path outside the project, and to
        ``edit`` for a file a Bash command writes) allows, and one of them
        allows every subject. Modes other than ``default`` and
        ``bypassPermissions`` change answers per call, so they never qualify.
        """
        if self.ceiling is not None and not _always_allows(
            replace(self, rules=self.ceiling, ceiling=None), tool_name
        ):
            return False
        return _always_allows(self, tool_name)

    def always_denies(self, tool_name: str) -> bool:
        """True when a deny rule refuses every call of ``tool_name``, whatever its input.

        Then the tool is not offered to the model (S-MCP-1, S-PROF-5): every call would be
        refused, so listing it would only waste turns and tell it the name. That
        holds when the last rule naming its permission, in ``rules`` or in
        ``ceiling``, denies every subject (``disabled_tools``, as opencode's
        ``Permission.disabled``); an ask, or a deny of some inputs only, does not.
        """
        return any(
            rules is not None and bool(disabled_tools((tool_name,), rules))
            for rules in (self.rules, self.ceiling)
        )

    def remembering(self, tool_name: str, tool_input: Mapping[str, Any]) -> ToolPolicy:
        """This policy plus rules allowing what this call needs ("allow always").

        Each rule is literal: it allows that very subject again, nothing its ``*`` or ``?``
        would match as a wildcard (``rm -rf build/*`` does not allow ``rm -rf build/../x``).
        """
        extra = tuple(
            PermissionRule(check.permission, check.subject, "allow", literal=True)
            for check in permission_checks(tool_name, tool_input, self.project_dir)
        )
        ceiling = None if self.ceiling is None else self.ceiling + extra
        return replace(self, rules=self.rules + extra, ceiling=ceiling)

    def authorize_headless(self, tool_name: str, tool_input: Mapping[str, Any]) -> PolicyDecision:
        """``check`` for a session with nobody to ask: an ask is refused, saying how to allow it."""
        decision = self.check(tool_name, tool_input)
        if decision.action != "ask":
            return decision
        checks = permission_checks(tool_name, tool_input, self.project_dir)
        asking = [
            check
            for check in checks
            for rules in (self.rules, self.ceiling)
            if rules is not None
            and evaluate(rules, check.permission, check.subject, mode=self.mode) == "ask"
        ]
        hint = NO_APPROVER.format(
            permission=asking[0].permission if asking else tool_name,
            subject=asking[0].subject if asking else "*",
        )
        return PolicyDecision("deny", f"{decision.reason}; {hint}")


def _asks_allowed(rules: Ruleset) -> Ruleset:
    """``rules`` with every ask an allow, and an allow for what no rule covers."""
    leading = tuple(PermissionRule(name, "*", "allow") for name in sorted(_NEVER_ASKED))
    return leading + tuple(
        replace(rule, action="allow") if rule.action == "ask" else rule for rule in rules
    )


class PolicyHolder(Protocol):
    """An agent whose policy can grow ("allow always" adds rules for it)."""

    policy: ToolPolicy


# Asked for each tool at every launch; policies are immutable and few.
@functools.lru_cache(maxsize=1024)
def _always_allows(policy: ToolPolicy, tool_name: str) -> bool:
    if policy.mode not in ("default", "bypassPermissions"):
        return False
    permission = permission_name(tool_name)
    # A Bash command's redirections and tee are edits (S-SEC-9).
    wanted = (permission, "external_directory", *(("edit",) if permission == "bash" else ()))
    relevant = [rule for rule in policy.rules if any(rule.names(name) for name in wanted)]
    covers_everything = {
        name
        for name in wanted
        for rule in relevant
        if rule.covers_every_subject and rule.names(name)
    }
    if permission in ("glob", "grep", "read") and any(
        rule.action == "deny" and rule.names("read") for rule in policy.rules
    ):
        return False  # a read deny may cover its path or a link's target: ask each call
    return all(rule.action == "allow" for rule in relevant) and covers_everything == set(wanted)
