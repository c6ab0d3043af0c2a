"""Reading settings from ``$SUBVISOR_HOME/config.toml`` and the project's files.

Later wins: defaults < user config < project config < command-line flags.
Only keys subvisor knows are accepted; a typo, a file that is not UTF-8
TOML (or JSON for ``.mcp.json``), or a wrong shape is an error naming the
file and what to fix.

A project's ``subvisor.toml`` and ``.mcp.json`` come with the repository (or
from a subagent that wrote them), so they may not lift what protects the
user from that repository:

- the sandbox and permission protections (S-SBX-3, like a project
  profile's ``permissionMode``): a ``permission_mode`` that approves more
  than the one in force (``acceptEdits``, ``bypassPermissions``), a sandbox
  mode wider than the one in force (``full`` always), network access, UNIX
  sockets (``allow_unix_sockets``), running unsandboxed where Landlock is
  missing, and plugin dirs (their profiles may set most of these);
- permission rules (S-SEC-3): a project's rules come after the user's and
  may only make an answer stricter (allow < ask < deny); a rule that could
  loosen what the user's rules (or the default) answer is refused;
- numeric caps (S-SEC-3): a project value above the one otherwise in force
  (user config or default) is refused, and ``home`` cannot come from it;
- MCP servers, provider endpoints or keys, the root agent's ``model`` and
  ``placement`` (S-SEC-3) take effect only once the user trusted the file's
  exact content (``supervisor.config._project_trust``);
- a ``scripted:`` model (S-SEC-3) is refused outright: the root's tools run
  unsandboxed in the supervisor, and a subagent could rewrite the scenario
  after the user trusted the file.
  This module is the one reader of project files and applies the trust
  gate itself, so no command can skip it.

Those belong in the user's config or on the command line.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from protocol import ResourceLimits

from ..delegation._mcp import McpServerConfig, mcp_server_name_problem, parse_mcp_json
from ..delegation._settings import SubvisorSettings
from ..files._printable import printable
from ..kernel import validation_problems
from ..policy._rule_config import rules_from_config
from ..policy._rules import (
    PERMISSION_MODES,
    STRICTNESS,
    PermissionConfigError,
    PermissionMode,
    PermissionRule,
    Ruleset,
    parse_permission_mode,
)
from ..providers import ModelStringError, parse_model_string
from ..state._paths import subvisor_home
from ._errors import ConfigError
from ._project_trust import (
    ROOT_MODEL_KEYS,
    TrustGate,
    TrustRequest,
    mcp_json_trust_request,
    toml_trust_request,
    without_trust_needing,
)
from ._trust_store import TrustStore

__all__ = [
    "MCP_JSON",
    "PROJECT_CONFIG",
    "USER_CONFIG",
    "ConfigError",
    "load_settings",
    "project_trust_requests",
    "read_config_bytes",
]

PROJECT_CONFIG = "subvisor.toml"
USER_CONFIG = "config.toml"
MCP_JSON = ".mcp.json"
#: Config files are small text; anything bigger is the wrong file.
_MAX_CONFIG_BYTES = 1 << 20

#: Numeric caps a project file may lower but never raise (S-SEC-3), as key paths.
_CAPS: tuple[tuple[str, ...], ...] = (
    ("max_concurrent_subagents",),
    ("max_subagents_per_session",),
    ("max_turns",),
    ("root_max_turns",),
    ("root_max_notification_calls",),
    ("subagent_depth",),
    *(("subagent_limits", name) for name in ResourceLimits.model_fields),
    ("gateway", "max_concurrency"),
    ("gateway", "max_retries"),
    ("gateway", "backoff_max_s"),
    ("gateway", "retry_after_max_s"),
    ("event_budget", "max_events"),
    ("event_budget", "max_event_mb"),
)
#: Caps that `subvisor run` also takes as flags.
_CAP_FLAGS = {
    ("max_concurrent_subagents",): "--max-concurrent-subagents",
    ("max_subagents_per_session",): "--max-subagents-per-session",
}


@dataclass(frozen=True, slots=True)
class _File:
    """A config file as read: its exact bytes and what they parse to."""

    path: Path
    content: bytes
    data: dict[str, Any]


def read_config_bytes(path: Path) -> bytes | None:
    """The exact content of the config file ``path``, or None if there is none.

    Raises ``ConfigError`` for what no config file is: a FIFO, a directory,
    over 1 MiB, unreadable.
    """
    try:
        # Non-blocking, so a FIFO planted under the name cannot hang the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{path} is not a regular file; remove it or replace it with one")
    with open(fd, "rb") as file:
        content = file.read(_MAX_CONFIG_BYTES + 1)
    if len(content) > _MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is over 1 MiB, too big for a config file; check what it is")
    return content


def _decode(path: Path, content: bytes, language: str) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {content[exc.start]:#04x} at offset {exc.start}):"
            f" it must be {language}; fix it or remove it"
        ) from None


def _read_toml(path: Path) -> _File | None:
    content = read_config_bytes(path)
    if content is None:
        return None
    text = _decode(path, content, "TOML")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix it or remove it") from None
    except RecursionError:
        raise ConfigError(f"{path} nests too deeply to be a config file; fix it") from None
    return _File(path, content, data)


def _read_mcp_json(path: Path) -> tuple[_File, dict[str, McpServerConfig]] | None:
    content = read_config_bytes(path)
    if content is None:
        return None
    try:
        servers = parse_mcp_json(path, _decode(path, content, "JSON"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return _File(path, content, {}), servers


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: ``[sandbox]`` keys that only ``subvisor run`` flags set.
_FLAG_ONLY_SANDBOX_KEYS = ("force_mode", "force_network")

#: For each permission mode in force, the modes a project may set: those that
#: approve nothing more (S-SEC-3). ``plan`` and ``dontAsk`` deny different things,
#: so neither may replace the other.
_NO_LOOSER_MODES: Mapping[PermissionMode, frozenset[PermissionMode]] = {
    "bypassPermissions": frozenset(PERMISSION_MODES),
    "acceptEdits": frozenset({"acceptEdits", "default", "plan", "dontAsk"}),
    "default": frozenset({"default", "plan", "dontAsk"}),
    "plan": frozenset({"plan"}),
    "dontAsk": frozenset({"dontAsk"}),
}
#: For each sandbox mode in force, the modes a project may set (never ``full``, S-SBX-3).
_NO_WIDER_SANDBOXES: Mapping[str | None, frozenset[str]] = {
    None: frozenset({"read-only"}),  # None: by each profile's tools, read-only for some
    "read-only": frozenset({"read-only"}),
    "workspace-write": frozenset({"read-only", "workspace-write"}),
    "full": frozenset({"read-only", "workspace-write"}),
}


def _loosened_by_project(project: Mapping[str, Any], in_force: SubvisorSettings) -> list[str]:
    """What the project config sets that only the user may (see the module doc)."""
    found: list[str] = []
    mode = project.get("permission_mode")
    if mode is not None:
        try:
            if parse_permission_mode(mode) not in _NO_LOOSER_MODES[in_force.mode]:
                found.append(f"permission_mode = {mode!r}")
        except PermissionConfigError:
            pass  # reported by validation, with the file named
    sandbox = project.get("sandbox")
    if isinstance(sandbox, dict):
        wanted = sandbox.get("mode")
        # An unknown mode is left to validation, which names the modes.
        known = wanted in _NO_WIDER_SANDBOXES and wanted is not None
        if known and wanted not in _NO_WIDER_SANDBOXES[in_force.sandbox.mode]:
            found.append(f"sandbox.mode = {wanted!r}")
        for key, lifted in (("network", "allow"), ("on_unsupported", "warn")):
            if sandbox.get(key) == lifted:
                found.append(f"sandbox.{key} = {lifted!r}")
        # Anything but false: validation would take "true" or 1 for true.
        if sandbox.get("allow_unix_sockets", False) is not False:
            found.append("sandbox.allow_unix_sockets")
    if "plugin_dirs" in project:
        found.append("plugin_dirs")
    return found


def _user_config() -> Path:
    return subvisor_home() / USER_CONFIG


def _check_config_file(
    path: Path, data: Mapping[str, Any], *, in_force: SubvisorSettings | None = None
) -> None:
    """Check a config file; ``in_force``: for a project file, the settings before it."""
    sandbox = data.get("sandbox")
    if isinstance(sandbox, dict):
        for key in _FLAG_ONLY_SANDBOX_KEYS:
            if key in sandbox:
                flag = "--sandbox" if key == "force_mode" else "--network"
                raise ConfigError(
                    f"{path}: sandbox.{key} is set by `subvisor run {flag}` only;"
                    f" use sandbox.{key.removeprefix('force_')} in a config file"
                )
    if "mcp_servers" in data and not isinstance(data["mcp_servers"], dict):
        raise ConfigError(
            f"{path}: mcp_servers must be a table of servers ([mcp_servers.NAME] with"
            " command or url)"
        )
    for name in data.get("mcp_servers") or {}:
        problem = mcp_server_name_problem(str(name))
        if problem is not None:
            raise ConfigError(f"{path}: mcp_servers.{printable(str(name))}: {problem}")
    if in_force is None:
        return
    loosened = _loosened_by_project(data, in_force)
    if loosened:
        flags = " or pass the flag to `subvisor run`" if "sandbox" in " ".join(loosened) else ""
        raise ConfigError(
            f"{path} sets {', '.join(loosened)}: a project's config comes with the"
            " repository and may not lift the user's protections (S-SBX-3, S-SEC-3); put it in"
            f" {_user_config()}{flags}"
        )
    if "home" in data:
        raise ConfigError(
            f"{path} sets home: subvisor's home cannot come from a project's config (S-SEC-3);"
            f" set SUBVISOR_HOME or home in {_user_config()}"
        )
    for key in ROOT_MODEL_KEYS:
        if _is_scripted(data.get(key)):
            raise ConfigError(
                f"{path} sets {key} = {printable(repr(data[key]))}: a project's config may not"
                " make the root agent a script, whose tools would run unsandboxed in the"
                f" supervisor (S-SEC-3); pass --model, or set {key} in {_user_config()}"
            )


def _is_scripted(model: Any) -> bool:
    """Whether ``model`` is a model string of the ``scripted`` provider."""
    if not isinstance(model, str):
        return False  # left to validation
    try:
        spec = parse_model_string(model)
    except ModelStringError:
        return False  # not a model string: no provider takes it
    return spec is not None and spec.provider == "scripted"


_DEFAULT_PERMISSION = SubvisorSettings.model_fields["permission"].get_default(
    call_default_factory=True
)


def _project_rules(path: Path, project: Mapping[str, Any]) -> Ruleset:
    try:
        return rules_from_config(project.get("permission"))
    except PermissionConfigError as exc:
        raise ConfigError(f"{path}: {exc}; fix it or remove it") from None


def _user_rules(base: Mapping[str, Any]) -> Ruleset:
    """The rules of the defaults and the user's config (``base``)."""
    try:
        return rules_from_config(base.get("permission", _DEFAULT_PERMISSION))
    except PermissionConfigError as exc:
        raise ConfigError(f"{_user_config()}: {exc}; fix it") from None


def _check_project_permission(path: Path, project: Mapping[str, Any], user: Ruleset) -> None:
    """Refuse a project rule that could answer less strictly than the user's rules (S-SEC-3).

    The project's rules are evaluated after the user's (``_with_project_rules``),
    so where one of them matches it decides. It may only where every user rule
    that could decide the same call is no stricter; the user's rules before the
    last one covering all the project rule matches cannot decide, and where no
    user rule covers it the default (ask) can.
    """
    for rule in _project_rules(path, project):
        if rule.action == "deny":
            continue
        covering = [i for i, own in enumerate(user) if _covers(own, rule)]
        deciding = list(user[covering[-1] :] if covering else user)
        if not covering:
            deciding.append(PermissionRule(rule.permission, rule.pattern, "ask"))
        for own in deciding:
            if STRICTNESS[own.action] > STRICTNESS[rule.action] and _meet(own, rule):
                where = "the default" if own not in user else "your config"
                raise ConfigError(
                    f"{path} sets permission {rule.permission} {rule.pattern!r} ="
                    f" {rule.action!r}, looser than {own.permission} {own.pattern!r} ="
                    f" {own.action!r} of {where}: a project's rules may only tighten"
                    f" (S-SEC-3); to loosen it, set it in {_user_config()}"
                )


def _covers(rule: PermissionRule, other: PermissionRule) -> bool:
    """Whether ``rule`` surely matches every call ``other`` matches (a sufficient test)."""
    return rule.permission in ("*", other.permission) and rule.pattern in ("*", other.pattern)


def _meet(rule: PermissionRule, other: PermissionRule) -> bool:
    """Whether some call matches both rules."""
    return _wildcards_meet(rule.permission, other.permission) and _wildcards_meet(
        rule.pattern, other.pattern
    )


def _wildcards_meet(first: str, second: str) -> bool:
    """Whether some text matches both wildcards (``wildcard_match``'s syntax)."""
    return any(_globs_meet(a, b) for a in _glob_forms(first) for b in _glob_forms(second))


def _glob_forms(pattern: str) -> tuple[str, ...]:
    """``pattern`` as plain ``*``/``?`` globs: a trailing ``" *"`` may also be absent."""
    pattern = pattern.replace("\\", "/")
    return (pattern, pattern[:-2]) if pattern.endswith(" *") else (pattern,)


def _globs_meet(a: str, b: str) -> bool:
    # A search over pairs of positions: both globs read the same text at once.
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(a) and j == len(b):
            return True
        star_a = i < len(a) and a[i] == "*"
        star_b = j < len(b) and b[j] == "*"
        if star_a:
            todo.append((i + 1, j))  # the star reads nothing more
        if star_b:
            todo.append((i, j + 1))
        if i == len(a) or j == len(b) or (star_a and star_b):
            continue
        # One more character of the text, read by both.
        if star_a:
            todo.append((i, j + 1))
        elif star_b:
            todo.append((i + 1, j))
        elif a[i] == b[j] or "?" in (a[i], b[j]):
            todo.append((i + 1, j + 1))
    return False


def _with_project_rules(
    path: Path, base: Mapping[str, Any], project: Mapping[str, Any]
) -> list[dict[str, str]]:
    """The user's rules, then the project's (checked to only tighten), as one rule list."""
    rules = _user_rules(base) + _project_rules(path, project)
    return [
        {"permission": rule.permission, "pattern": rule.pattern, "action": rule.action}
        for rule in rules
    ]


def _lookup(data: Any, key: tuple[str, ...]) -> Any:
    for part in key:
        data = data.get(part) if isinstance(data, Mapping) else getattr(data, part, None)
    return data


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_project_caps(path: Path, project: Mapping[str, Any], in_force: Any) -> None:
    """Refuse a project value above the cap otherwise in force (S-SEC-3)."""
    for key in _CAPS:
        value = _lookup(project, key)
        if value is not None and not _is_number(value):
            # Validation would turn "100000" into a number past this check.
            raise ConfigError(
                f"{path} sets {'.'.join(key)} = {value!r}, which is not a number: write the"
                " number itself (a project's config may only tighten limits, S-SEC-3)"
            )
        limit = _lookup(in_force, key)
        # A limit of None means no cap.
        if value is None or not _is_number(limit) or value <= limit:
            continue
        where = str(_user_config())
        if key in _CAP_FLAGS:
            where += f" or pass {_CAP_FLAGS[key]}"
        name = ".".join(key)
        raise ConfigError(
            f"{path} sets {name} = {value}, above the {limit} in force: a project's config"
            f" may only tighten limits (S-SEC-3); to raise it, set it in {where}"
        )


def _defaults(home: Path) -> dict[str, Any]:
    # A partial [subagent_limits] table amends the default caps; it does not drop them.
    limits = SubvisorSettings.model_fields["subagent_limits"].default
    return {"home": home, "subagent_limits": limits.model_dump()}


def _in_force(base: dict[str, Any], home: Path) -> SubvisorSettings:
    """Settings from the defaults and the user's config, to compare project caps with."""
    try:
        return SubvisorSettings.model_validate(base)
    except ValidationError:
        # Reported, naming the file, when the merged settings are validated.
        return SubvisorSettings(home=home)


@dataclass(frozen=True, slots=True)
class _Project:
    """A project's config files as read, and what in them waits for trust."""

    toml: _File | None
    mcp_json: _File | None
    mcp_json_servers: dict[str, McpServerConfig]
    requests: tuple[TrustRequest, ...]


def _read_project(project_dir: Path, user: Mapping[str, Any], base: dict[str, Any]) -> _Project:
    """Read and check the project's files; ``base``: the defaults and the user's config."""
    toml = _read_toml(project_dir / PROJECT_CONFIG)
    if toml is not None:
        in_force = _in_force(base, subvisor_home())
        _check_config_file(toml.path, toml.data, in_force=in_force)
        _check_project_caps(toml.path, toml.data, in_force)
        if "permission" in toml.data:
            _check_project_permission(toml.path, toml.data, _user_rules(base))
    read_json = _read_mcp_json(project_dir / MCP_JSON)
    mcp_json, servers = read_json if read_json is not None else (None, {})
    requests = []
    if toml is not None:
        requests.append(toml_trust_request(toml.path, toml.content, toml.data, user))
    if mcp_json is not None:
        requests.append(mcp_json_trust_request(mcp_json.path, mcp_json.content, servers))
    return _Project(toml, mcp_json, servers, tuple(r for r in requests if r is not None))


def project_trust_requests(project_dir: Path) -> tuple[TrustRequest, ...]:
    """What in ``project_dir``'s ``subvisor.toml`` and ``.mcp.json`` waits for trust."""
    home = subvisor_home()
    user = _read_toml(home / USER_CONFIG)
    user_data = user.data if user is not None else {}
    return _read_project(project_dir, user_data, _merge(_defaults(home), user_data)).requests


def load_settings(
    project_dir: Path, *, trust: TrustGate | None = None, **overrides: Any
) -> SubvisorSettings:
    """Settings for a run in ``project_dir``: config files, then ``overrides`` (not None).

    ``trust``: what to do with project files the user has not trusted
    (default: refuse with ``UntrustedProjectError``, asking no one).
    """
    home = subvisor_home()
    user_path = home / USER_CONFIG
    user = _read_toml(user_path)
    user_data = user.data if user is not None else {}
    _check_config_file(user_path, user_data)
    base = _merge(_defaults(home), user_data)
    project = _read_project(project_dir, user_data, base)
    settings = partial(_assemble, base, project, overrides=overrides, project_dir=project_dir)
    # Validated whole before anyone is asked: nobody is asked to trust a file refused anyway.
    everything = settings(admitted=None)
    admitted = (trust or TrustGate()).admit(project.requests, TrustStore(home))
    if all(request.path in admitted for request in project.requests):
        return everything
    return settings(admitted=admitted)


def _assemble(
    base: dict[str, Any],
    project: _Project,
    *,
    admitted: frozenset[Path] | None,
    overrides: Mapping[str, Any],
    project_dir: Path,
) -> SubvisorSettings:
    """``base``, the project's files and ``overrides``, validated; ``admitted``: None for all."""
    project_data: dict[str, Any] = {}
    if project.toml is not None:
        project_data = project.toml.data
        if admitted is not None and project.toml.path.absolute() not in admitted:
            project_data = without_trust_needing(project_data)
    data = _merge(base, project_data)
    if project.toml is not None and "permission" in project_data:
        # Not merged as tables: a project's key would take the place of the user's.
        data["permission"] = _with_project_rules(project.toml.path, base, project_data)
    from_mcp_json: dict[str, McpServerConfig] = {}
    if project.mcp_json is not None and (
        admitted is None or project.mcp_json.path.absolute() in admitted
    ):
        from_mcp_json = project.mcp_json_servers
    data["mcp_servers"] = {
        **{name: cfg.model_dump() for name, cfg in from_mcp_json.items()},
        **data.get("mcp_servers", {}),
    }
    data = _merge(data, {key: value for key, value in overrides.items() if value is not None})
    try:
        return SubvisorSettings.model_validate(data)
    except ValidationError as exc:
        places = [str(subvisor_home() / USER_CONFIG), str(project_dir / PROJECT_CONFIG)]
        if any(value is not None for value in overrides.values()):
            places.insert(0, "the command-line flags")
        raise ConfigError(
            f"invalid settings ({validation_problems(exc)}); check {' or '.join(places)}"
        ) from None
