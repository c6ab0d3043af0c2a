"""Permission rules as opencode evaluates them, plus Claude Code's modes (S-POL-2, S-POL-3).

A rule says what happens (``allow``, ``ask``, ``deny``) when a *permission*
(``bash``, ``edit``, ``task``, an MCP tool name...) is used on a *subject*
(the command, the path, the subagent type). Both the rule's permission and
its pattern are wildcards (:func:`wildcard_match`). Rules are evaluated in
order and the last one that matches wins; when none matches the answer is
``ask`` (opencode's ``Permission.evaluate``).

A tool call needs one or more checks (:func:`permission_checks`): the tool's
own permission, and ``external_directory`` when it touches a path outside the
project, as opencode asks both. :func:`decide` combines them: any deny denies,
else any ask asks, else allow. A Bash command needs a ``bash`` check for each
command it runs, in every spelling :mod:`~supervisor.policy._bash_lexer` sees
(``sudo /bin/rm x`` is also ``rm x``), and an ``edit`` check for each file it
writes; the most restrictive answer wins, so no wrapper or spelling turns a
deny into an allow, and a rule allows a wrapped command only if it allows
the wrapper too.

Modes (Claude Code's ``permissionMode``) act at evaluation time
(:func:`evaluate`); :func:`apply_mode` writes the part of ``plan`` that must
reach children as deny rules, since a child inherits every deny (S-POL-2).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal, TypeAlias, get_args

from worker.tools import resolve_tool_name

from ..kernel import SubvisorError
from ._bash_lexer import bash_commands, run_commands, unquote, word_value

__all__ = [
    "ACTIONS",
    "PERMISSION_MODES",
    "PLAN_MODE_PERMISSIONS",
    "Action",
    "PermissionCheck",
    "PermissionConfigError",
    "PermissionMode",
    "PermissionRule",
    "Ruleset",
    "apply_mode",
    "bash_commands",
    "decide",
    "disabled_tools",
    "evaluate",
    "expand_home",
    "last_matching_rule",
    "merge",
    "parse_permission_mode",
    "permission_checks",
    "permission_for_tool",
    "permission_name",
    "rules_from_config",
    "tools_map_to_rules",
    "wildcard_match",
]

Action = Literal["allow", "ask", "deny"]
ACTIONS: Final[tuple[Action, ...]] = get_args(Action)

PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]
PERMISSION_MODES: Final[tuple[PermissionMode, ...]] = get_args(PermissionMode)

#: What opencode answers when no rule matches.
_DEFAULT_ACTION: Final[Action] = "ask"


class PermissionConfigError(SubvisorError, ValueError):
    """A permission rule, config or mode is malformed; the message names the bad key and value."""


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One rule: ``action`` applies when ``permission`` and ``pattern`` both match."""

    permission: str
    pattern: str
    action: Action

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


#: Rules in evaluation order (opencode's ``Ruleset``).
Ruleset: TypeAlias = tuple[PermissionRule, ...]


# --- wildcards -----------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _wildcard_regex(pattern: str) -> re.Pattern[str]:
    pattern = pattern.replace("\\", "/")
    # opencode: a trailing " *" also matches nothing at all, so "git *" covers "git".
    optional_tail = pattern.endswith(" *")
    if optional_tail:
        pattern = pattern[:-2]
    body = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern
    )
    if optional_tail:
        body += "(?: .*)?"
    return re.compile(body, re.DOTALL)


def wildcard_match(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches the whole of ``text``, as opencode's ``Wildcard.match``.

    ``*`` matches any run of characters, ``/`` and newlines included (it is
    not a path glob: ``src/*`` matches ``src/a/b.py``); ``?`` matches exactly
    one character; everything else is literal, with no escape syntax. Both
    sides have ``\\`` turned into ``/`` first. A pattern ending in ``" *"``
    also matches without that tail: ``git *`` matches ``git``, ``git status``,
    but not ``gitk``. Case-sensitive (opencode ignores case only on Windows).
    """
    return _wildcard_regex(pattern).fullmatch(text.replace("\\", "/")) is not None


# --- evaluation ----------------------------------------------------------------------------


def merge(*rulesets: Iterable[PermissionRule]) -> Ruleset:
    """The rulesets one after another, so later ones take precedence (``Permission.merge``)."""
    return tuple(rule for ruleset in rulesets for rule in ruleset)


def last_matching_rule(
    rules: Sequence[PermissionRule], permission: str, subject: str
) -> PermissionRule | None:
    """The last rule matching ``permission`` and ``subject``, or None when none does."""
    for rule in reversed(rules):
        if wildcard_match(rule.permission, permission) and wildcard_match(rule.pattern, subject):
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


def disabled_tools(tool_names: Iterable[str], rules: Sequence[PermissionRule]) -> frozenset[str]:
    """The tools to hide from the model entirely, as opencode's ``Permission.disabled``.

    A tool is hidden when the last rule naming its permission (whatever the
    pattern) is a deny for every subject (pattern ``*``): then no call can
    succeed, so offering the tool would only waste a turn.
    """
    hidden: set[str] = set()
    for name in tool_names:
        permission = permission_name(name)
        for rule in reversed(rules):
            if wildcard_match(rule.permission, permission):
                if rule.pattern == "*" and rule.action == "deny":
                    hidden.add(name)
                break
    return frozenset(hidden)


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


# --- permission names and config -----------------------------------------------------------

_PERMISSION_BY_TOOL: Final[Mapping[str, str]] = {
    "Read": "read",
    "Write": "edit",
    "Edit": "edit",
    "Glob": "glob",
    "Grep": "grep",
    "Bash": "bash",
    "LS": "list",
}
# Other names in either product's spelling, keyed lower-case.
_PERMISSION_BY_NAME: Final[Mapping[str, str]] = {
    "multiedit": "edit",
    "patch": "edit",
    "apply_patch": "edit",
    "notebookedit": "edit",
    "agent": "task",
    "task": "task",
    "webfetch": "webfetch",
    "websearch": "websearch",
    "codesearch": "codesearch",
    "todowrite": "todowrite",
    "todoread": "todoread",
    "skill": "skill",
    "lsp": "lsp",
    "external_directory": "external_directory",
    "doom_loop": "doom_loop",
}


def permission_name(name: str) -> str:
    """The permission a tool or rule key names: ``Write`` -> ``edit``, ``Agent`` -> ``task``.

    Claude Code's tool names and opencode's lower-case names both work
    (S-LOCAL-1); every file-changing tool is ``edit``. Other names (MCP
    tools, wildcards such as ``*`` or ``mcp__github__*``) are kept as they are.
    """
    local = resolve_tool_name(name)
    if local is not None:
        return _PERMISSION_BY_TOOL.get(local, name)
    return _PERMISSION_BY_NAME.get(name.lower(), name)


def expand_home(pattern: str, home: str | None = None) -> str:
    """``pattern`` with a leading ``~`` or ``$HOME`` replaced by the home directory (opencode)."""
    if not (pattern == "~" or pattern.startswith(("~/", "$HOME"))):
        return pattern
    home_dir = os.path.expanduser("~") if home is None else home
    if pattern.startswith("$HOME"):
        return home_dir + pattern[len("$HOME") :]
    return home_dir + pattern[1:]


def _action(value: object, where: str) -> Action:
    for action in ACTIONS:
        if value == action:
            return action
    raise PermissionConfigError(
        f"{where}: action must be one of {', '.join(ACTIONS)}, got {value!r}"
    )


def _key(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PermissionConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _rule_from_item(item: object, index: int, home: str | None) -> PermissionRule:
    if isinstance(item, PermissionRule):
        return item
    where = f"permission rule #{index}"
    if not isinstance(item, Mapping):
        raise PermissionConfigError(
            f"{where}: expected a mapping with permission, pattern and action, got {item!r}"
        )
    unknown = set(item) - {"permission", "pattern", "action"}
    if unknown:
        raise PermissionConfigError(f"{where}: unknown keys {sorted(map(str, unknown))}")
    for required in ("permission", "action"):
        if required not in item:
            raise PermissionConfigError(f"{where}: missing {required!r} in {dict(item)!r}")
    permission = permission_name(_key(item["permission"], f"{where} permission"))
    pattern = expand_home(_key(item.get("pattern", "*"), f"{where} pattern"), home)
    return PermissionRule(permission, pattern, _action(item["action"], f"{where} action"))


def rules_from_config(config: object, *, home: str | None = None) -> Ruleset:
    """The rules an opencode ``permission`` config describes, in its order.

    Accepted shapes:

    - ``"allow"``: one action for everything (``*`` on ``*``);
    - ``{"edit": "deny", "*": "ask"}``: an action per permission, pattern ``*``;
    - ``{"bash": {"*": "ask", "git *": "allow"}}``: actions per pattern;
    - ``[{"permission": "bash", "pattern": "git *", "action": "allow"}, ...]``
      (``pattern`` defaults to ``*``).

    Keys go through :func:`permission_name` (``Write`` and ``write`` are
    ``edit``); patterns starting with ``~`` or ``$HOME`` are expanded with
    ``home`` (default: the user's). Anything else raises
    :class:`PermissionConfigError` naming the key and the bad value.
    """
    if config is None:
        return ()
    if isinstance(config, str):
        return (PermissionRule("*", "*", _action(config, "permission")),)
    if isinstance(config, Mapping):
        rules: list[PermissionRule] = []
        for raw_key, value in config.items():
            key = _key(raw_key, f"permission key {raw_key!r}")
            permission = permission_name(key)
            if isinstance(value, str):
                rules.append(PermissionRule(permission, "*", _action(value, f"permission {key!r}")))
            elif isinstance(value, Mapping):
                for raw_pattern, action in value.items():
                    where = f"permission {key!r} pattern {raw_pattern!r}"
                    pattern = expand_home(_key(raw_pattern, where), home)
                    rules.append(PermissionRule(permission, pattern, _action(action, where)))
            else:
                raise PermissionConfigError(
                    f"permission {key!r}: expected an action (allow, ask, deny) or a mapping "
                    f"of pattern to action, got {value!r}"
                )
        return tuple(rules)
    if isinstance(config, Sequence) and not isinstance(config, bytes | bytearray):
        return tuple(_rule_from_item(item, index, home) for index, item in enumerate(config))
    raise PermissionConfigError(
        f"permission: expected an action, a mapping or a list of rules, got {config!r}"
    )


def tools_map_to_rules(tools: object) -> Ruleset:
    """Rules for an opencode agent's legacy ``tools: {write: false, bash: true}`` map.

    As opencode converts it: ``false`` is deny and ``true`` allow, for every
    subject; ``write``, ``edit``, ``patch`` and ``multiedit`` all mean
    ``edit``. A ``permission`` config of the same agent should be merged
    after these rules so that it wins, as in opencode.
    """
    if not isinstance(tools, Mapping):
        raise PermissionConfigError(
            f"tools: expected a mapping of tool name to bool, got {tools!r}"
        )
    rules: list[PermissionRule] = []
    for raw_name, enabled in tools.items():
        name = _key(raw_name, f"tools key {raw_name!r}")
        if not isinstance(enabled, bool):
            raise PermissionConfigError(f"tools {name!r}: expected true or false, got {enabled!r}")
        rules.append(PermissionRule(permission_name(name), "*", "allow" if enabled else "deny"))
    return tuple(rules)


# --- tool calls to checks ------------------------------------------------------------------


def _resolve(raw: str, project_dir: str | None) -> str:
    path = os.path.expanduser(raw) if raw.startswith("~") else raw
    if raw.startswith("$HOME"):
        path = expand_home(raw)
    if project_dir is not None and not posixpath.isabs(path):
        path = posixpath.join(project_dir, path)
    return posixpath.normpath(path) if posixpath.isabs(path) else path


def _inside(path: str, project_dir: str) -> bool:
    root = posixpath.normpath(project_dir)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _external_check(
    path: str, project_dir: str | None, *, directory: bool
) -> PermissionCheck | None:
    # opencode asks on "<dir>/*": the directory itself, or the file's parent.
    if project_dir is None or not posixpath.isabs(path) or _inside(path, project_dir):
        return None
    folder = path if directory else posixpath.dirname(path)
    return PermissionCheck("external_directory", posixpath.join(folder, "*"))


def _text(tool_input: Mapping[str, object], *keys: str) -> str | None:
    for key in keys:
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _path_tool(
    permission: str, raw: str | None, project_dir: str | None, *, directory: bool
) -> tuple[PermissionCheck | None, PermissionCheck]:
    resolved = _resolve(raw or ".", project_dir)
    subject = resolved
    if permission == "edit" and project_dir is not None and posixpath.isabs(resolved):
        # opencode matches edit rules against the path relative to the project.
        subject = posixpath.relpath(resolved, posixpath.normpath(project_dir))
    check = PermissionCheck(permission, subject)
    return _external_check(resolved, project_dir, directory=directory), check


def _tool_checks(
    tool_name: str, tool_input: Mapping[str, object], project_dir: str | None
) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
    """The external_directory checks and the tool's own checks of one call."""
    if project_dir is not None and not posixpath.isabs(project_dir):
        raise ValueError(f"project_dir must be an absolute path, got {project_dir!r}")
    permission = permission_name(tool_name)
    if permission in ("read", "edit"):
        raw = _text(tool_input, "file_path", "filePath", "notebook_path", "path")
        external, own = _path_tool(permission, raw, project_dir, directory=False)
        return [external] if external else [], [own]
    if permission == "list":
        external, own = _path_tool("list", _text(tool_input, "path"), project_dir, directory=True)
        return [external] if external else [], [own]
    if permission in ("glob", "grep"):
        base = _resolve(_text(tool_input, "path") or ".", project_dir)
        external = _external_check(base, project_dir, directory=True)
        own = PermissionCheck(permission, _text(tool_input, "pattern") or "*")
        return [external] if external else [], [own]
    if permission == "bash":
        return _bash_checks(_text(tool_input, "command") or "", project_dir)
    subject_keys: Mapping[str, tuple[str, ...]] = {
        "task": ("subagent_type",),
        "webfetch": ("url",),
        "websearch": ("query",),
        "codesearch": ("query",),
        "skill": ("skill", "name", "command"),
    }
    keys = subject_keys.get(permission, ())
    default = "general-purpose" if permission == "task" else "*"  # S-TOOL-1 default type
    return [], [PermissionCheck(permission, _text(tool_input, *keys) or default)]


def permission_for_tool(
    tool_name: str, tool_input: Mapping[str, object], project_dir: str | None = None
) -> tuple[str, str]:
    """The permission a tool call is checked under and its subject.

    ``Read``: ``read`` on the absolute path. ``Write``/``Edit`` (and
    ``MultiEdit``, ``NotebookEdit``, ``patch``): ``edit`` on the path relative
    to ``project_dir``. ``Glob``/``Grep``: the search pattern. ``LS``:
    ``list`` on the absolute directory. ``Bash``: ``bash`` on the command.
    ``Agent``/``Task``: ``task`` on the ``subagent_type``. ``WebFetch``: the
    URL. MCP tools (``mcp__server__tool``) and anything else: the tool's own
    name on ``*``. Relative paths start at ``project_dir``. A path outside
    the project also needs ``external_directory``, which
    :func:`permission_checks` adds, and a Bash command is really checked per
    simple command (:func:`bash_commands`).
    """
    if permission_name(tool_name) == "bash":
        return "bash", (_text(tool_input, "command") or "").strip()
    _external, own = _tool_checks(tool_name, tool_input, project_dir)
    return own[0].permission, own[0].subject


def permission_checks(
    tool_name: str, tool_input: Mapping[str, object], project_dir: str | None = None
) -> tuple[PermissionCheck, ...]:
    """Every check a tool call needs, as opencode asks them: external directories first.

    A path outside ``project_dir`` adds ``external_directory`` on its folder
    followed by ``/*`` (the folder itself for ``LS``, ``Glob`` and ``Grep``,
    the parent for a file). ``Bash`` gets one ``bash`` check per command it
    runs (:func:`bash_commands`), ``external_directory`` for path arguments
    of ``cd``, ``rm``, ``cp``, ``mv``, ``mkdir``, ``touch``, ``chmod``,
    ``chown`` and ``cat`` and for files redirected from (``< f``) that leave
    the project, and, for each file it writes (``>``, ``>>``, ``&>``, ``2>``,
    ``>|``, ``<>``, ``tee FILE``), an ``edit`` check on the path as a
    ``Write`` of it gets, with its ``external_directory``. Device sinks
    (``/dev/null``, ``/dev/stderr``, ``/dev/fd/N``...) are not files.
    Without ``project_dir`` no external checks are made.
    """
    external, own = _tool_checks(tool_name, tool_input, project_dir)
    return tuple(dict.fromkeys([*external, *own]))


# --- bash commands -------------------------------------------------------------------------

_PATH_COMMANDS: Final[frozenset[str]] = frozenset(
    {"cd", "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "cat"}
)
# Files a redirection opens without reading or editing anything.
_DEVICE_SINKS: Final[frozenset[str]] = frozenset(
    {"/dev/null", "/dev/zero", "/dev/full", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty"}
)
_FD_PATH: Final = re.compile(r"/(?:dev/fd|proc/self/fd)/[0-9]+")


def _opened_file_checks(
    target: str, project_dir: str | None, *, writes: bool
) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
    """The external_directory and edit checks of a file a command opens (S-SEC-9).

    A target an expansion decides (``> "$OUT"``) is checked as written, as
    both an edit and an external directory: no rule can tell where it goes.
    """
    if target.startswith(("<(", ">(")):
        return [], []  # a pipe to a command that is checked on its own
    value = word_value(target, {"HOME": expand_home("~")})
    if value is None:
        external = [PermissionCheck("external_directory", target)] if project_dir else []
        return external, [PermissionCheck("edit", target)] if writes else []
    resolved = _resolve(value, project_dir)
    if resolved in _DEVICE_SINKS or _FD_PATH.fullmatch(resolved):
        return [], []
    outside, edit = _path_tool("edit", value, project_dir, directory=False)
    return [outside] if outside else [], [edit] if writes else []


def _bash_checks(
    command: str, project_dir: str | None
) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
    external: list[PermissionCheck] = []
    edits: list[PermissionCheck] = []
    commands = run_commands(command)
    for simple in commands:
        program = simple.program
        if program in _PATH_COMMANDS:
            for arg in simple.words[1:]:
                value = unquote(arg)
                if value.startswith("-") or (program == "chmod" and value.startswith("+")):
                    continue
                path = _resolve(value, project_dir)
                check = _external_check(path, project_dir, directory=program in ("cd", "mkdir"))
                if check is not None:
                    external.append(check)
        for target in simple.read_files():
            external += _opened_file_checks(target, project_dir, writes=False)[0]
        for target in simple.written_files():
            outside, edit = _opened_file_checks(target, project_dir, writes=True)
            external += outside
            edits += edit
    own = [PermissionCheck("bash", subject) for subject in bash_commands(command, commands)]
    return external, own + edits
