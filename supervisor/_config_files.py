"""Reading settings from ``$SUBVISOR_HOME/config.toml`` and the project's ``subvisor.toml``.

Later wins: defaults < user config < project config < command-line flags.
Only keys subvisor knows are accepted; a typo is an error naming the file.

A project's ``subvisor.toml`` comes with the repository, so it may not lift
the limits that protect the user from that repository (S-SBX-3, like a
project profile's ``permissionMode``): bypassing permissions, ``full``
sandboxes, network access, running unsandboxed where Landlock is missing.
Those belong in the user's config or on the command line.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._errors import SubvisorError
from ._mcp import load_mcp_json
from ._paths import subvisor_home
from ._permissions import PermissionConfigError, parse_permission_mode
from ._settings import SubvisorSettings

__all__ = ["ConfigError", "load_settings"]

PROJECT_CONFIG = "subvisor.toml"
USER_CONFIG = "config.toml"


class ConfigError(SubvisorError):
    """A config file could not be read or has wrong keys or values."""


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


#: ``[sandbox]`` keys that only ``subvisor run`` flags set.
_FLAG_ONLY_SANDBOX_KEYS = ("force_mode", "force_network")


def _loosened_by_project(project: dict[str, Any]) -> list[str]:
    """What the project config sets that only the user may (see the module doc)."""
    found: list[str] = []
    mode = project.get("permission_mode")
    if mode is not None:
        try:
            if parse_permission_mode(mode) == "bypassPermissions":
                found.append(f"permission_mode = {mode!r}")
        except PermissionConfigError:
            pass  # reported by validation, with the file named
    sandbox = project.get("sandbox")
    if isinstance(sandbox, dict):
        for key, lifted in (("mode", "full"), ("network", "allow"), ("on_unsupported", "warn")):
            if sandbox.get(key) == lifted:
                found.append(f"sandbox.{key} = {lifted!r}")
    return found


def _check_config_file(path: Path, data: dict[str, Any], *, project: bool) -> None:
    sandbox = data.get("sandbox")
    if isinstance(sandbox, dict):
        for key in _FLAG_ONLY_SANDBOX_KEYS:
            if key in sandbox:
                flag = "--sandbox" if key == "force_mode" else "--network"
                raise ConfigError(
                    f"{path}: sandbox.{key} is set by `subvisor run {flag}` only;"
                    f" use sandbox.{key.removeprefix('force_')} in a config file"
                )
    if project:
        loosened = _loosened_by_project(data)
        if loosened:
            raise ConfigError(
                f"{path} sets {', '.join(loosened)}: a project's config comes with the"
                " repository and may not lift the user's protections (S-SBX-3); put it in"
                f" {subvisor_home() / USER_CONFIG} or pass the flag to `subvisor run`"
            )


def load_settings(project_dir: Path, **overrides: Any) -> SubvisorSettings:
    """Settings for a run in ``project_dir``: config files, then ``overrides`` (not None)."""
    home = subvisor_home()
    data: dict[str, Any] = {"home": home}
    sources = [home / USER_CONFIG, project_dir / PROJECT_CONFIG]
    for path, project in zip(sources, (False, True), strict=True):
        read = _read(path)
        _check_config_file(path, read, project=project)
        data = _merge(data, read)
    try:
        from_mcp_json = load_mcp_json(project_dir)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    configured = data.get("mcp_servers", {})
    data["mcp_servers"] = {
        **{name: cfg.model_dump() for name, cfg in from_mcp_json.items()},
        **(configured if isinstance(configured, dict) else {}),
    }
    data = _merge(data, {key: value for key, value in overrides.items() if value is not None})
    try:
        return SubvisorSettings.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        places = [str(p) for p in sources]
        if any(value is not None for value in overrides.values()):
            places.insert(0, "the command-line flags")
        raise ConfigError(f"invalid settings ({problems}); check {' or '.join(places)}") from None
