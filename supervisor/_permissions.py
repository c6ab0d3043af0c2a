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
else any ask asks, else allow.

Modes (Claude Code's ``permissionMode``) act at evaluation time
(:func:`evaluate`); :func:`apply_mode` writes the part of ``plan`` that must
reach children as deny rules, since a child inherits every deny (S-POL-2).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final, Literal, TypeAlias, get_args

from worker.tools import resolve_tool_name

from ._errors import SubvisorError

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
    the parent for a file). ``Bash`` gets one ``bash`` check per simple
    command, and ``external_directory`` for path arguments of ``cd``, ``rm``,
    ``cp``, ``mv``, ``mkdir``, ``touch``, ``chmod``, ``chown`` and ``cat``
    that leave the project. Without ``project_dir`` no external checks are made.
    """
    external, own = _tool_checks(tool_name, tool_input, project_dir)
    return tuple(dict.fromkeys([*external, *own]))


# --- bash commands -------------------------------------------------------------------------

_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
# Shell words that open or close a compound command, not command names.
_KEYWORDS: Final[frozenset[str]] = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"}
)
# opencode's documented wrappers: both the wrapper and the command it runs are checked.
_WRAPPER_VALUE_FLAGS: Final[Mapping[str, frozenset[str]]] = {
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "watch": frozenset({"-n", "--interval", "-d", "--differences", "-q", "--equexit"}),
    "sudo": frozenset(
        {
            "-u",
            "--user",
            "-g",
            "--group",
            "-h",
            "--host",
            "-p",
            "--prompt",
            "-C",
            "-D",
            "--chdir",
            "-r",
            "--role",
            "-t",
            "--type",
            "-U",
            "--other-user",
            "-T",
        }
    ),
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "xargs": frozenset(
        {
            "-I",
            "-n",
            "-P",
            "-L",
            "-d",
            "-E",
            "-s",
            "-a",
            "--max-args",
            "--max-procs",
            "--max-lines",
            "--delimiter",
            "--eof",
            "--arg-file",
            "--replace",
        }
    ),
}
_FIND_EXEC: Final[frozenset[str]] = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_EXEC_END: Final[frozenset[str]] = frozenset({";", "\\;", "';'", '";"', "+"})
_PATH_COMMANDS: Final[frozenset[str]] = frozenset(
    {"cd", "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "cat"}
)
_MAX_UNWRAP: Final = 8


@dataclass
class _Frame:
    """One level of command text: the top, or the inside of ``$(...)``, backticks, ``(...)``."""

    closer: str
    quote: str = ""
    word: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    drop_next_word: bool = False
    heredoc_next_word: bool = False
    heredoc_strip_tabs: bool = False


class _BashSplitter:
    """Splits a command line into simple commands, each a list of words as written.

    Separators are ``;``, ``&``, ``|``, newlines and the parentheses of
    subshells; ``$(...)``, backticks and ``<(...)`` are commands of their own,
    also inside double quotes. Redirections and their targets, here-document
    bodies and comments are dropped, as opencode's parser leaves them out of
    a command's text.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.stack = [_Frame(closer="")]
        self.commands: list[list[str]] = []
        self.heredocs: list[tuple[str, bool]] = []

    def run(self) -> list[list[str]]:
        while self.pos < len(self.text):
            self._step()
        while self.stack:
            self._close_frame()
        return self.commands

    def _peek(self, offset: int = 1) -> str:
        index = self.pos + offset
        return self.text[index] if index < len(self.text) else ""

    def _end_word(self, frame: _Frame) -> None:
        if not frame.word:
            return
        word = "".join(frame.word)
        frame.word = []
        if frame.heredoc_next_word:
            frame.heredoc_next_word = False
            self.heredocs.append((word.replace("'", "").replace('"', ""), frame.heredoc_strip_tabs))
        elif frame.drop_next_word:
            frame.drop_next_word = False
        else:
            frame.words.append(word)

    def _end_command(self, frame: _Frame) -> None:
        self._end_word(frame)
        if frame.words:
            self.commands.append(frame.words)
        frame.words = []

    def _close_frame(self) -> None:
        self._end_command(self.stack.pop())

    def _skip_heredocs(self) -> None:
        for delimiter, strip_tabs in self.heredocs:
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                end = len(self.text) if end < 0 else end
                line = self.text[self.pos : end]
                self.pos = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.heredocs = []

    def _redirect(self, frame: _Frame) -> None:
        # A word made only of digits before the operator is its file descriptor.
        if frame.word and "".join(frame.word).isdigit():
            frame.word = []
        self._end_word(frame)
        start = self.pos
        while self._peek(0) in ("<", ">", "&", "|") and self.pos - start < 3:
            self.pos += 1
        operator = self.text[start : self.pos]
        if operator.startswith("<<") and not operator.startswith("<<<"):
            strip_tabs = self._peek(0) == "-"
            if strip_tabs:
                self.pos += 1
            frame.heredoc_next_word, frame.heredoc_strip_tabs = True, strip_tabs
            return
        if operator.endswith("&") and (self._peek(0).isdigit() or self._peek(0) == "-"):
            while self._peek(0).isdigit() or self._peek(0) == "-":  # 2>&1, >&-
                self.pos += 1
            return
        frame.drop_next_word = True

    def _copy_balanced(self, frame: _Frame, opener: str, closer: str) -> None:
        """Copies text up to the matching ``closer`` into the current word (``$((1+2))``)."""
        depth = 0
        while self.pos < len(self.text):
            char = self.text[self.pos]
            frame.word.append(char)
            self.pos += 1
            if char == opener:
                depth += 1
            elif char == closer:
                depth -= 1
                if depth == 0:
                    return

    def _step(self) -> None:
        frame = self.stack[-1]
        char = self.text[self.pos]
        if frame.quote == "'":
            frame.word.append(char)
            frame.quote = "" if char == "'" else "'"
            self.pos += 1
            return
        if char == "\\":
            if self._peek() == "\n":  # line continuation
                self.pos += 2
                return
            frame.word.append(self.text[self.pos : self.pos + 2])
            self.pos += 2
            return
        if self.text.startswith("$((", self.pos):
            frame.word.append("$")
            self.pos += 1
            self._copy_balanced(frame, "(", ")")
            return
        if char == "$" and self._peek() == "(":
            self.stack.append(_Frame(closer=")"))
            self.pos += 2
            return
        if char == "`":
            if frame.closer == "`":
                self._close_frame()
            else:
                self.stack.append(_Frame(closer="`"))
            self.pos += 1
            return
        if frame.quote == '"':
            frame.word.append(char)
            if char == '"':
                frame.quote = ""
            self.pos += 1
            return
        self._step_unquoted(frame, char)

    def _step_unquoted(self, frame: _Frame, char: str) -> None:
        if char in ("'", '"'):
            frame.quote = char
            frame.word.append(char)
        elif char in ("<", ">") and self._peek() == "(":
            self._end_word(frame)  # process substitution: a command of its own
            self.stack.append(_Frame(closer=")"))
            self.pos += 2
            return
        elif char in ("<", ">") or (char == "&" and self._peek() == ">"):
            self._redirect(frame)
            return
        elif char == "(":
            if frame.word and frame.word[-1].endswith("="):  # array: a=(1 2)
                self._copy_balanced(frame, "(", ")")
                return
            self._end_command(frame)
            self.stack.append(_Frame(closer=")"))
        elif char == ")":
            if frame.closer == ")":
                self._close_frame()
            else:
                self._end_command(frame)  # e.g. a case pattern "a)"
        elif char == "#" and not frame.word:
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end
            return
        elif char in (" ", "\t"):
            self._end_word(frame)
        elif char in (";", "&", "|", "\n"):
            self._end_command(frame)
            if char == "\n" and self.heredocs:
                self.pos += 1
                self._skip_heredocs()
                return
        else:
            frame.word.append(char)
        self.pos += 1


def _strip_prefix(words: list[str]) -> list[str]:
    """``words`` without leading keywords (``then``, ``do``, ``{``) and variable assignments."""
    start = 0
    while start < len(words) and (words[start] in _KEYWORDS or _ASSIGNMENT.match(words[start])):
        start += 1
    return words[start:]


def _unquote(word: str) -> str:
    if len(word) >= 2 and word[0] == word[-1] and word[0] in ("'", '"'):
        return word[1:-1]
    return word


def _inner_command(words: list[str]) -> list[str] | None:
    """The command a wrapper (``sudo``, ``timeout 5``, ``find -exec``...) runs, if any."""
    name = words[0]
    if name == "find":
        for index, word in enumerate(words):
            if word in _FIND_EXEC:
                rest = words[index + 1 :]
                ends = [i for i, w in enumerate(rest) if w in _FIND_EXEC_END]
                inner = rest[: ends[0]] if ends else rest
                return inner or None
        return None
    value_flags = _WRAPPER_VALUE_FLAGS.get(name)
    if value_flags is None:
        return None
    index = 1
    while index < len(words):
        word = words[index]
        if word == "--":
            index += 1
            break
        if word.startswith("-") and len(word) > 1:
            index += 2 if word in value_flags else 1
        elif name == "env" and _ASSIGNMENT.match(word):
            index += 1
        else:
            break
    if name == "timeout":
        index += 1  # the duration
    return words[index:] or None


def _commands_with_wrapped(words: list[str], depth: int = 0) -> list[list[str]]:
    found = [words]
    inner = _inner_command(words)
    if inner is None or depth >= _MAX_UNWRAP:
        return found
    if len(inner) == 1 and _unquote(inner[0]) != inner[0]:
        # watch "make test": the quoted word is itself a command line.
        for nested in _BashSplitter(_unquote(inner[0])).run():
            stripped = _strip_prefix(nested)
            if stripped:
                found += _commands_with_wrapped(stripped, depth + 1)
        return found
    return found + _commands_with_wrapped(inner, depth + 1)


def _simple_commands(command: str) -> list[list[str]]:
    result: list[list[str]] = []
    for words in _BashSplitter(command).run():
        stripped = _strip_prefix(words)
        if stripped:
            result += _commands_with_wrapped(stripped)
    return result


def bash_commands(command: str) -> tuple[str, ...]:
    """The subjects a Bash command is checked on: one per simple command, as in opencode.

    ``git status && rm -rf build`` gives ``git status`` and ``rm -rf build``,
    so ``"git *": "allow"`` cannot let the ``rm`` through. Commands come in
    the order they end (a substitution before the command containing it).
    Commands inside ``$(...)``, backticks and subshells count; words are joined by one space
    and kept as written (quotes included); leading variable assignments,
    redirections, here-document bodies and comments are left out. A command
    run through a wrapper (``sudo``, ``timeout``, ``env``, ``xargs``,
    ``nice``, ``nohup``, ``time``, ``watch``, ``stdbuf``, ``ionice``,
    ``find -exec``) gives both: ``sudo rm -rf /`` and ``rm -rf /``. ``cd``
    commands are not checked (only their directory is). A command that yields
    nothing else is checked as written. Shell re-entry (``sh -c "..."``) is
    matched as the outer command only, as in opencode; the sandbox covers it.
    """
    subjects = [" ".join(words) for words in _simple_commands(command) if words[0] != "cd"]
    if not subjects:
        return (command.strip(),)
    return tuple(dict.fromkeys(subjects))


def _bash_checks(
    command: str, project_dir: str | None
) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
    external: list[PermissionCheck] = []
    for words in _simple_commands(command):
        if words[0] not in _PATH_COMMANDS:
            continue
        for arg in words[1:]:
            if arg.startswith("-") or (words[0] == "chmod" and arg.startswith("+")):
                continue
            path = _resolve(_unquote(arg), project_dir)
            check = _external_check(path, project_dir, directory=words[0] in ("cd", "mkdir"))
            if check is not None:
                external.append(check)
    own = [PermissionCheck("bash", subject) for subject in bash_commands(command)]
    return external, own
