"""Which permissions a tool call needs, on which subjects (S-POL-2, S-SEC-9).

A tool call needs one or more checks (:func:`permission_checks`): the tool's
own permission, and ``external_directory`` when it touches a path outside the
project, as opencode asks both. A Bash command needs a ``bash`` check for each
command it runs, in every spelling :mod:`~supervisor.policy._bash_lexer` sees
(``sudo /bin/rm x`` is also ``rm x``), and an ``edit`` check for each file it
writes; the most restrictive answer wins (``decide``), so no wrapper or
spelling turns a deny into an allow, and a rule allows a wrapped command only
if it allows the wrapper too.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from worker.tools import resolve_tool_name

from ._bash_lexer import (
    CommandTooComplexError,
    SimpleCommand,
    bash_commands,
    run_commands,
    unquote,
    word_value,
)
from ._rules import PermissionCheck, PermissionRule

__all__ = [
    "MAX_PATHS",
    "disabled_tools",
    "expand_home",
    "permission_checks",
    "permission_for_tool",
    "permission_name",
    "read_deny_checks",
]

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
            if rule.names(permission):
                if rule.covers_every_subject and rule.action == "deny":
                    hidden.add(name)
                break
    return frozenset(hidden)


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


def read_deny_checks(
    tool_name: str, tool_input: Mapping[str, object], project_dir: str | None = None
) -> tuple[PermissionCheck, ...]:
    """The ``read`` checks on which only a deny counts (S-POL-2): what a ``read`` deny covers
    beyond the tool's own check.

    ``Glob``/``Grep``: the path they search (their own checks match the pattern), as Claude
    Code's Read denies cover Grep and Glob. ``Read``, ``Glob``, ``Grep``: the path's target
    with every link resolved, when it differs from the path as written, so ``src/notes.txt``
    linking to ``../.env`` is denied as ``.env`` is. Neither is added to
    :func:`permission_checks`: a read rule's allow or ask does not bear on a search, and
    "always" must not remember a read rule for it.

    The target is resolved here, by the supervisor, in its own view of the files: a
    relative path only under ``project_dir``. It is a policy over an honest worker's tools,
    not a boundary: a link swapped between this check and the open, or a worker that lies,
    reads what its sandbox lets it read, and only the sandbox stops that.
    """
    permission = permission_name(tool_name)
    if permission == "read":
        raw = _text(tool_input, "file_path", "filePath", "notebook_path", "path")
    elif permission in ("glob", "grep"):
        raw = _text(tool_input, "path") or "."
    else:
        return ()
    written = _resolve(raw or ".", project_dir)
    subjects = [] if permission == "read" else [written]
    if posixpath.isabs(written):
        try:
            target = os.path.realpath(written)
        except (OSError, ValueError):  # a NUL in the path: nothing to open either
            target = written
        subjects.append(target)
    return tuple(PermissionCheck("read", subject) for subject in dict.fromkeys(subjects))


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
    Without ``project_dir`` no external checks are made. A Bash line past the
    lexer's limits, or naming more than :data:`MAX_PATHS` different paths,
    raises :class:`CommandTooComplexError`: the work of one call is bounded.
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
#: Different paths one Bash line may give to check (arguments of the path commands, files it
#: redirects from or to, ``tee``'s files), each counted once; past it the line is too complex.
MAX_PATHS: Final = 1024


def _opened_file_checks(
    target: str, project_dir: str | None, *, writes: bool, home: str
) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
    """The external_directory and edit checks of a file a command opens (S-SEC-9).

    A target an expansion decides (``> "$OUT"``) is checked as written, as
    both an edit and an external directory: no rule can tell where it goes.
    """
    if target.startswith(("<(", ">(")):
        return [], []  # a pipe to a command that is checked on its own
    value = word_value(target, {"HOME": home})
    if value is None:
        external = [PermissionCheck("external_directory", target)] if project_dir else []
        return external, [PermissionCheck("edit", target)] if writes else []
    resolved = _resolve(value, project_dir)
    if resolved in _DEVICE_SINKS or _FD_PATH.fullmatch(resolved):
        return [], []
    outside, edit = _path_tool("edit", value, project_dir, directory=False)
    return [outside] if outside else [], [edit] if writes else []


class _PathChecks:
    """The checks of each different path of one line, each worked out once, at most
    :data:`MAX_PATHS` of them: the work is bounded by the paths, not by how often a wrapper
    or a spelling repeats one."""

    def __init__(self, project_dir: str | None) -> None:
        self.project_dir = project_dir
        self.home = expand_home("~")
        self.found: dict[tuple[str, str], tuple[list[PermissionCheck], list[PermissionCheck]]] = {}

    def get(self, kind: str, raw: str) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
        """The external_directory and edit checks of ``raw`` used as ``kind``."""
        key = (kind, raw)
        checks = self.found.get(key)
        if checks is None:
            if len(self.found) >= MAX_PATHS:
                raise CommandTooComplexError(f"it names more than {MAX_PATHS} paths to check")
            checks = self.found[key] = self._work_out(kind, raw)
        return checks

    def _work_out(self, kind: str, raw: str) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
        if kind in ("read", "write"):
            return _opened_file_checks(
                raw, self.project_dir, writes=kind == "write", home=self.home
            )
        path = _resolve(unquote(raw), self.project_dir)
        check = _external_check(path, self.project_dir, directory=kind == "directory")
        return [check] if check is not None else [], []


def _path_arguments(simple: SimpleCommand) -> list[str]:
    """The words of a path command (``rm``, ``cd``...) that name paths: not its options."""
    program = simple.program
    if program not in _PATH_COMMANDS:
        return []
    arguments = []
    for arg in simple.words[1:]:
        value = unquote(arg)
        if not (value.startswith("-") or (program == "chmod" and value.startswith("+"))):
            arguments.append(arg)
    return arguments


def _bash_checks(
    command: str, project_dir: str | None
) -> tuple[list[PermissionCheck], list[PermissionCheck]]:
    """The checks of a Bash line (S-SEC-9): bounded by :data:`MAX_PATHS` and the lexer's limits.

    A line past them raises :class:`CommandTooComplexError`, which the policy answers with
    a deny: the strictest answer, never an allow for a line only partly checked.
    """
    external: list[PermissionCheck] = []
    edits: list[PermissionCheck] = []
    paths = _PathChecks(project_dir)
    commands = run_commands(command)
    for simple in commands:
        kind = "directory" if simple.program in ("cd", "mkdir") else "file"
        for arg in _path_arguments(simple):
            external += paths.get(kind, arg)[0]
        for target in simple.read_files():
            external += paths.get("read", target)[0]
        for target in simple.written_files():
            outside, edit = paths.get("write", target)
            external += outside
            edits += edit
    own = [PermissionCheck("bash", subject) for subject in bash_commands(command, commands)]
    return external, own + edits
