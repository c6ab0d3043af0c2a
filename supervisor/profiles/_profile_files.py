"""Parsing one profile file: Markdown with YAML frontmatter into an ``AgentProfile`` (S-PROF-2).

The frontmatter is read with ``yaml.safe_load`` once ``supervisor.files._untrusted_yaml`` has
found no alias and no lone surrogate in it (a few hundred bytes of nested
aliases cost seconds and gigabytes to whatever walks the result); the body
after the closing ``---`` line is the system prompt. Three dialects share one
vocabulary:

- ``subvisor`` (``.subvisor/agents``, ``$SUBVISOR_HOME/agents``): the S-PROF-2
  fields; a file without ``name`` is named after its path below the scanned
  dir, without the suffix (``team/reviewer``), as opencode does.
- ``claude`` (``.claude/agents``, plugins): Claude Code files. Claude Code
  requires ``name`` and skips a file without one; we name it after the file
  stem and say so in a warning.
- ``opencode`` (``.opencode/agent(s)``): ``mode``, ``temperature``,
  ``steps``/``maxSteps``, ``permission`` (kept as written for the permission
  engine), and ``tools`` as a map of switches (``{write: false}``: kept as
  ``tool_switches``, and its false entries are disallowed). The name is the
  path below the agent dir (``subagents/coder``).

Every field is accepted in every dialect. An unknown field is a warning kept
on the profile; a wrong value is a :class:`ProfileError` naming the file, the
line of the key and the field. A plain value that YAML rejects only because
it holds ``": "`` (``description: Triggers on: 'x'``) is read as the line's
text, as Claude Code does, with a warning.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import ValidationError

from ..files._confined import Confinement, OutsideConfinementError
from ..files._input_files import open_regular_file
from ..files._untrusted_yaml import RefusedYamlError, check_untrusted_yaml, describe_yaml_error
from ..kernel import SubvisorError
from ..providers import ModelStringError, parse_model_string
from ._profile import AgentProfile, ProfileScope

__all__ = [
    "FRONTMATTER_FIELDS",
    "MAX_PROFILE_BYTES",
    "NotAProfileError",
    "ProfileDialect",
    "ProfileError",
    "RefusedProfileFileError",
    "parse_profile_file",
    "parse_profile_text",
]

ProfileDialect = Literal["subvisor", "claude", "opencode"]

#: A profile file larger than this is refused rather than put into a prompt.
MAX_PROFILE_BYTES = 1 << 20

#: Frontmatter keys and the ``AgentProfile`` field each sets. Several keys may
#: set one field; the first listed of those present wins (``maxTurns`` over
#: ``steps`` over ``maxSteps``). ``source``, ``scope`` and ``prompt`` are not
#: here on purpose: a file must not choose its own scope (S-PROF-4).
FRONTMATTER_FIELDS: Mapping[str, str] = {
    "name": "name",
    "description": "description",
    "tools": "tools",
    "disallowedTools": "disallowed_tools",
    "model": "model",
    "skills": "skills",
    "color": "color",
    "permissionMode": "permission_mode",
    "maxTurns": "max_turns",
    "steps": "max_turns",
    "maxSteps": "max_turns",
    "background": "background",
    "memory": "memory",
    "mcpServers": "mcp_servers",
    "mode": "mode",
    "temperature": "model_temperature",
    "permission": "permission",
    "permissions": "permission",
    "disable": "disabled",
    "sandbox": "sandbox",
    "network": "network",
    "cpus": "cpus",
}
_DIALECTS: tuple[str, ...] = get_args(ProfileDialect)
_FRONTMATTER_OPEN = re.compile(r"---[ \t]*")
_SIMPLE_LINE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_-]*):[ \t]+(?P<value>\S.*?)[ \t]*")
# What YAML rejects in a plain value (Claude Code quotes values holding these).
_NEEDS_QUOTES = re.compile(r"[{}\[\]*&#!|>%@`]|: ")
# A value starting with one of these is YAML syntax, not a forgotten quote.
_YAML_SYNTAX_STARTS = tuple("\"'[{|>&*!#-?")


class ProfileError(SubvisorError, ValueError):
    """A profile file that cannot be loaded; ``str()`` is ``path:line: field: message``.

    ``line`` is 1-based in the file (the line of the offending key), or None
    when the problem is not on one line. ``profile_name`` is the name the
    file would have had, so a request for that name can show this error.
    """

    def __init__(
        self,
        path: str,
        message: str,
        *,
        line: int | None = None,
        field: str | None = None,
        profile_name: str | None = None,
    ) -> None:
        self.path = path
        self.message = message
        self.line = line
        self.field = field
        self.profile_name = profile_name
        where = path if line is None else f"{path}:{line}"
        what = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {what}")


class NotAProfileError(ProfileError):
    """A Markdown file without frontmatter: documentation, not a profile; skipped quietly."""


class RefusedProfileFileError(ProfileError):
    """A project's profile file that resolves outside the project (S-SEC-3): skipped, said."""


@dataclass(frozen=True, slots=True)
class _Frontmatter:
    data: dict[str, Any]
    body: str
    first_line: int  # file line of the frontmatter text's first line
    root: yaml.MappingNode | None
    warnings: tuple[str, ...]

    def line_of(self, key: str | None, *path: str | int) -> int:
        """The file line of ``key`` (then of ``path`` inside its value), 1-based.

        Without a key, or for a key that is not there, the line of the opening ``---``.
        """
        if self.root is None or key is None:
            return self.first_line - 1
        found: tuple[yaml.Node, int] | None = None
        for key_node, value_node in self.root.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                found = (value_node, key_node.start_mark.line)
        if found is None:
            return self.first_line - 1
        node, line = found
        for step in path:
            child = _child(node, step)
            if child is None:
                break
            node, line = child, child.start_mark.line
        return line + self.first_line


def parse_profile_file(
    path: Path,
    *,
    scope: ProfileScope,
    default_name: str,
    dialect: ProfileDialect = "subvisor",
    plugin: str | None = None,
    confine: Confinement | None = None,
) -> AgentProfile:
    """Read and parse one profile file; raises :class:`ProfileError` (and only that).

    With ``confine``, a file that resolves where it does not allow is not
    read: :class:`RefusedProfileFileError` says where it resolves.
    """
    source = str(path)
    fallback = f"{plugin}:{default_name}" if plugin else default_name
    try:
        # Read through the descriptor the confinement checked (see _confined).
        with open_regular_file(path, confine=confine) as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)
    except OutsideConfinementError as exc:
        raise RefusedProfileFileError(
            source, exc.strerror or str(exc), profile_name=fallback
        ) from None
    except OSError as exc:
        raise ProfileError(
            source, f"cannot read the file: {exc.strerror or exc}", profile_name=fallback
        ) from exc
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(
            source,
            f"the file is larger than {MAX_PROFILE_BYTES} bytes; a profile is a short "
            "Markdown file",
            profile_name=fallback,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(
            source,
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            line=raw[: exc.start].count(b"\n") + 1,
            profile_name=fallback,
        ) from exc
    return parse_profile_text(
        text, source=source, scope=scope, default_name=default_name, dialect=dialect, plugin=plugin
    )


def parse_profile_text(
    text: str,
    *,
    source: str,
    scope: ProfileScope,
    default_name: str,
    dialect: ProfileDialect = "subvisor",
    plugin: str | None = None,
) -> AgentProfile:
    """Parse a profile file's text; raises :class:`ProfileError` (and only that).

    ``default_name`` is used when the frontmatter has no ``name``; ``plugin``
    prefixes the name (``<plugin>:<name>``, S-PROF-3). A project profile
    setting ``permissionMode`` is rejected (S-PROF-4); in a plugin it is
    ignored with a warning, as Claude Code ignores it there.
    """
    if dialect not in _DIALECTS:
        raise ValueError(f"unknown profile dialect {dialect!r}")
    prefix = f"{plugin}:" if plugin else ""
    front = _split(text, source, prefix + default_name)
    return _Parse(front, source, prefix, default_name).profile(scope, dialect)


class _Parse:
    """One file's frontmatter on its way to an ``AgentProfile``."""

    def __init__(self, front: _Frontmatter, source: str, prefix: str, default_name: str) -> None:
        self.front = front
        self.source = source
        self.prefix = prefix
        self.default_name = default_name
        self.fields: dict[str, Any] = {}
        self.keys: dict[str, str] = {}  # field -> the frontmatter key that set it
        self.warnings = list(front.warnings)

    def fail(self, message: str, key: str | None, *path: str | int) -> ProfileError:
        return ProfileError(
            self.source,
            message,
            line=self.front.line_of(key, *path),
            field=key,
            profile_name=self.best_name(),
        )

    def best_name(self) -> str:
        name = self.front.data.get("name")
        if isinstance(name, str) and name.strip():
            return self.prefix + name.strip()
        return self.prefix + self.default_name

    def profile(self, scope: ProfileScope, dialect: ProfileDialect) -> AgentProfile:
        self._collect()
        self._apply_tool_switches()
        self._apply_permissions()
        self._check_permission_mode(scope)
        self._check_sandbox(scope)
        self._check_memory(scope)
        self._name(dialect)
        self._check_model()
        if not self.front.body.strip():
            self.warnings.append("the body is empty: the subagent gets no system prompt of its own")
        try:
            return AgentProfile.model_validate(
                {
                    **self.fields,
                    "prompt": self.front.body.strip(),
                    "source": self.source,
                    "scope": scope,
                    "warnings": tuple(self.warnings),
                }
            )
        except ValidationError as exc:
            raise self._validation_error(exc) from None

    def _collect(self) -> None:
        for key, value in self.front.data.items():
            field = FRONTMATTER_FIELDS.get(key)
            if field is None:
                self.warnings.append(_unknown_field(key, self.front.line_of(key)))
                continue
            previous = self.keys.get(field)
            if previous is not None and field != "permission":
                kept = _preferred_key(previous, key)
                dropped = key if kept == previous else previous
                self.warnings.append(
                    f"line {self.front.line_of(dropped)}: '{dropped}' ignored: '{kept}' sets the "
                    "same thing"
                )
                if kept == previous:
                    continue
            self.keys[field] = key
            self.fields[field] = value

    def _apply_tool_switches(self) -> None:
        # opencode: ``tools: {write: false, bash: true}``; false disallows, true
        # leaves the tool as inherited.
        tools = self.fields.get("tools")
        if not isinstance(tools, dict):
            return
        denied: list[str] = []
        for tool, enabled in tools.items():
            if not isinstance(tool, str):
                raise self.fail(f"tool names must be text, got {_describe(tool)}", "tools")
            if not isinstance(enabled, bool):
                raise self.fail(
                    f"a tools map switches tools on or off: '{tool}' must be true or false, "
                    f"got {_describe(enabled)}",
                    "tools",
                    tool,
                )
            if not enabled:
                denied.append(tool)
        del self.fields["tools"]
        self.fields["tool_switches"] = tools
        self.keys["tool_switches"] = "tools"
        if not denied:
            return
        listed = self.fields.get("disallowed_tools")
        if listed is None:
            self.fields["disallowed_tools"] = denied
        elif isinstance(listed, str):
            self.fields["disallowed_tools"] = [*listed.split(","), *denied]
        elif isinstance(listed, list):
            self.fields["disallowed_tools"] = [*listed, *denied]

    def _apply_permissions(self) -> None:
        # opencode reads ``permission``; ``permissions`` is a common misspelling
        # it ignores. Its rules are mostly denials, so dropping them would make
        # the agent more powerful than its author meant: apply them, and say so.
        data = self.front.data
        if "permissions" not in data:
            return
        self.warnings.append(
            f"line {self.front.line_of('permissions')}: 'permissions' is not an opencode field "
            "(opencode reads 'permission' and ignores this one); its rules are applied as "
            "'permission'"
        )
        plural, singular = data["permissions"], data.get("permission")
        if isinstance(plural, dict) and isinstance(singular, dict):
            # ``permission`` wins rule by rule where both are written.
            self.fields["permission"] = {**plural, **singular}
            self.keys["permission"] = "permission"
        elif singular is not None:
            self.fields["permission"] = singular
            self.keys["permission"] = "permission"
        else:
            self.fields["permission"] = plural
            self.keys["permission"] = "permissions"

    def _check_permission_mode(self, scope: ProfileScope) -> None:
        if "permission_mode" not in self.fields:
            return
        key = self.keys["permission_mode"]
        if scope == "project":
            raise self.fail(
                "a project-level profile may not set permissionMode (a repository must not "
                "raise its own permissions); move it to a user-level profile if you trust it "
                "(S-PROF-4)",
                key,
            )
        if scope == "plugin":
            self.warnings.append(
                f"line {self.front.line_of(key)}: permissionMode ignored: a plugin profile may "
                "not set it (Claude Code ignores it there too)"
            )
            del self.fields["permission_mode"]

    def _check_sandbox(self, scope: ProfileScope) -> None:
        # S-SBX-3: ``full`` lifts the sandbox, so it is treated as permissionMode is.
        if self.fields.get("sandbox") != "full":
            return
        key = self.keys["sandbox"]
        if scope == "project":
            raise self.fail(
                "a project-level profile may not set sandbox: full (a repository must not lift "
                "its own sandbox); move it to a user-level profile if you trust it, or run with "
                "`subvisor run --sandbox full` (S-SBX-3)",
                key,
            )
        if scope == "plugin":
            self.warnings.append(
                f"line {self.front.line_of(key)}: sandbox: full ignored: a plugin profile may "
                "not lift its own sandbox"
            )
            del self.fields["sandbox"]

    def _check_memory(self, scope: ProfileScope) -> None:
        # S-PROF-8 with S-SEC-3: ``user`` memory is the user's across every project. A
        # repository's profile named like one of the user's would read it into its prompt
        # and write it, so it keeps a memory of its own in this project instead: ``local``,
        # the scope that, like ``user``, is private to this machine and kept out of git.
        if scope != "project" or self.fields.get("memory") != "user":
            return
        self.fields["memory"] = "local"
        self.warnings.append(
            f"line {self.front.line_of(self.keys['memory'])}: memory: user read as memory: "
            "local (.subvisor/agent-memory-local/ in this project): a project profile may not "
            "read or write your memory across projects; move it to a user-level profile for that"
        )

    def _name(self, dialect: ProfileDialect) -> None:
        name = self.fields.get("name")
        if name is None:
            name = self.default_name
            if dialect == "claude":
                self.warnings.append(
                    f"no 'name' field: named {name!r} after the file (Claude Code requires name "
                    "and would skip this file)"
                )
        elif not isinstance(name, str):
            raise self.fail(f"must be text, got {_describe(name)}", self.keys["name"])
        # A blank name stays blank so that validation reports it.
        self.fields["name"] = self.prefix + name.strip() if name.strip() else name

    def _check_model(self) -> None:
        model = self.fields.get("model")
        if not isinstance(model, str):
            return
        try:
            parse_model_string(model)
        except ModelStringError as exc:
            self.warnings.append(
                f"line {self.front.line_of(self.keys['model'])}: model: {exc}; launching this "
                "profile fails until it is fixed (S-MODEL-1)"
            )

    def _validation_error(self, exc: ValidationError) -> ProfileError:
        # One problem per field: a union (``permission``) reports an error per
        # branch, and the branch that got deepest into the value is the one
        # the author meant.
        deepest: dict[str, tuple[int, tuple[str | int, ...], str]] = {}
        for error in exc.errors():
            loc = error["loc"]
            field = str(loc[0]) if loc else ""
            key = self.keys.get(field, field)
            if error["type"] == "missing":
                message = f"the required field '{key}' is missing"
                if key == "description":
                    message += ": say what the profile is for; the Agent tool shows it to the model"
                deepest.setdefault(key, (self.front.line_of(None), (), message))
                continue
            path = tuple(step for step in loc[1:] if not _is_type_step(step))
            if key in deepest and len(deepest[key][1]) >= len(path):
                continue
            where = "".join(f"[{step!r}]" for step in path)
            message = (
                f"{error['msg']}{' at ' + key + where if where else ''}, got "
                f"{_describe(error.get('input'))}"
            )
            deepest[key] = (self.front.line_of(key, *path), path, message)
        problems = sorted((line, key, message) for key, (line, _, message) in deepest.items())
        line, key, message = problems[0]
        more = "; ".join(f"line {ln}: {k}: {m}" for ln, k, m in problems[1:])
        return ProfileError(
            self.source,
            message + (f" (also {more})" if more else ""),
            line=line,
            field=key,
            profile_name=self.best_name(),
        )


def _split(text: str, source: str, default_name: str) -> _Frontmatter:
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if not _FRONTMATTER_OPEN.fullmatch(lines[0]):
        raise NotAProfileError(
            source,
            "no YAML frontmatter: a profile file starts with a '---' line",
            line=1,
            profile_name=default_name,
        )
    end = next((i for i in range(1, len(lines)) if _FRONTMATTER_OPEN.fullmatch(lines[i])), None)
    if end is None:
        raise ProfileError(
            source,
            "the frontmatter opened on line 1 is never closed by a '---' line",
            line=1,
            profile_name=default_name,
        )
    data, root, warnings = _load_yaml(lines[1:end], source, default_name)
    body = "\n".join(lines[end + 1 :])
    return _Frontmatter(data=data, body=body, first_line=2, root=root, warnings=warnings)


def _load_yaml(
    front_lines: list[str], source: str, default_name: str
) -> tuple[dict[str, Any], yaml.MappingNode | None, tuple[str, ...]]:
    lines = list(front_lines)
    warnings: list[str] = []
    # Each retry quotes one more offending line, so this ends.
    for _attempt in range(len(lines) + 1):
        text = "\n".join(lines)
        try:
            # Before anything is built: an alias bomb costs nothing until then.
            check_untrusted_yaml(text, yaml.SafeLoader)
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text)
        except RefusedYamlError as exc:
            raise _yaml_error(exc, lines, source, default_name) from None
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            index = mark.line if mark is not None and mark.line < len(lines) else None
            fixed = _quote_plain_value(lines[index]) if index is not None else None
            if index is not None and fixed is not None:
                key = fixed[0]
                lines[index] = fixed[1]
                warnings.append(
                    f"line {index + 2}: the value of '{key}' is not valid YAML (it contains "
                    "': ' or a reserved character); read as the rest of the line, as Claude Code "
                    "does. Quote the value to silence this warning"
                )
                continue
            raise _yaml_error(exc, lines, source, default_name) from None
        except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
            # PyYAML raises ValueError for impossible dates (2024-13-01) and
            # others for odd constructs; none of them is a crash of ours.
            raise ProfileError(
                source,
                "invalid YAML frontmatter: "
                + (
                    describe_yaml_error(exc)
                    if isinstance(exc, yaml.YAMLError)
                    else " ".join(str(exc).split())
                ),
                line=(
                    text.count("\n", 0, exc.position) + 2
                    if isinstance(exc, yaml.reader.ReaderError)
                    else None
                ),
                profile_name=default_name,
            ) from None
        if data is None:
            return {}, None, tuple(warnings)
        if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
            raise ProfileError(
                source,
                f"the frontmatter must be a mapping of fields (key: value), got {_describe(data)}",
                line=2,
                profile_name=default_name,
            )
        for key in data:
            if not isinstance(key, str):
                line = _key_line(root, key)
                raise ProfileError(
                    source,
                    f"field names must be text, got {_describe(key)} (YAML reads unquoted "
                    "yes/no/on/off as booleans)",
                    line=line + 2 if line is not None else None,
                    profile_name=default_name,
                )
        warnings.extend(_duplicate_keys(root))
        return data, root, tuple(warnings)
    raise AssertionError("unreachable: every retry quotes one more line")


def _yaml_error(
    exc: yaml.MarkedYAMLError, lines: list[str], source: str, default_name: str
) -> ProfileError:
    # The problem mark is where the parser gave up, often a line after the
    # mistake (an unclosed '['); the context mark is where that construct began.
    parts = []
    if exc.context:
        parts.append(exc.context + _at(exc.context_mark))
    parts.append((exc.problem or "invalid YAML") + _at(exc.problem_mark))
    start = exc.context_mark or exc.problem_mark
    key = None
    if start is not None:
        for index in range(min(start.line, len(lines) - 1), -1, -1):
            match = re.match(r"([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:", lines[index])
            if match:
                key = match[1]
                break
    return ProfileError(
        source,
        f"invalid YAML frontmatter: {'; '.join(parts)}",
        line=start.line + 2 if start is not None else None,
        field=key,
        profile_name=default_name,
    )


def _at(mark: yaml.Mark | None) -> str:
    return "" if mark is None else f" (line {mark.line + 2}, column {mark.column + 1})"


def _quote_plain_value(line: str) -> tuple[str, str] | None:
    """``(key, line)`` with the value double-quoted, or None if that cannot be the fix."""
    match = _SIMPLE_LINE.fullmatch(line)
    if match is None:
        return None
    value = match["value"]
    if value.startswith(_YAML_SYNTAX_STARTS) or not _NEEDS_QUOTES.search(value):
        return None
    return match["key"], f"{match['key']}: {json.dumps(value, ensure_ascii=False)}"


def _duplicate_keys(root: yaml.MappingNode) -> list[str]:
    seen: dict[str, int] = {}
    warnings = []
    for key_node, _value in root.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        key = key_node.value
        if key in seen:
            warnings.append(
                f"line {key_node.start_mark.line + 2}: '{key}' is set twice (first on line "
                f"{seen[key]}); the last one is used"
            )
        seen[key] = key_node.start_mark.line + 2
    return warnings


def _key_line(root: yaml.MappingNode, key: object) -> int | None:
    for key_node, _value in root.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        # A plain ``on`` is the key True: resolve the scalar as YAML does.
        try:
            value = key_node.value if key_node.style else yaml.safe_load(key_node.value)
        except yaml.YAMLError:
            continue
        if value == key and type(value) is type(key):
            return int(key_node.start_mark.line)
    return None


def _child(node: yaml.Node, step: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.SequenceNode) and isinstance(step, int):
        items: list[yaml.Node] = node.value
        return items[step] if 0 <= step < len(items) else None
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(step):
                return key_node if value_node is None else value_node
    return None


def _preferred_key(first: str, second: str) -> str:
    order = list(FRONTMATTER_FIELDS)
    return first if order.index(first) <= order.index(second) else second


def _unknown_field(key: str, line: int) -> str:
    close = difflib.get_close_matches(key, list(FRONTMATTER_FIELDS), n=1, cutoff=0.75)
    folded = {k.lower().replace("_", "").replace("-", ""): k for k in FRONTMATTER_FIELDS}
    guess = folded.get(key.lower().replace("_", "").replace("-", "")) or (
        close[0] if close else None
    )
    hint = f" (did you mean '{guess}'?)" if guess else ""
    return f"line {line}: unknown field '{key}' ignored{hint}"


def _is_type_step(step: str | int) -> bool:
    return isinstance(step, str) and step.startswith(("literal[", "dict[", "str", "tuple["))


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = {dict: "a map", list: "a list", bool: "a boolean", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} {text}" if value is not None else "nothing (an empty value)"
