"""Reading settings from ``$SUBVISOR_HOME/config.toml`` and the project's ``subvisor.toml``.

Later wins: defaults < user config < project config < command-line flags.
Only keys subvisor knows are accepted; a typo is an error naming the file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ._errors import SubvisorError
from ._mcp import load_mcp_json
from ._paths import subvisor_home
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


def load_settings(project_dir: Path, **overrides: Any) -> SubvisorSettings:
    """Settings for a run in ``project_dir``: config files, then ``overrides`` (not None)."""
    home = subvisor_home()
    data: dict[str, Any] = {"home": home}
    sources = [home / USER_CONFIG, project_dir / PROJECT_CONFIG]
    for path in sources:
        data = _merge(data, _read(path))
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
        files = " or ".join(str(p) for p in sources)
        raise ConfigError(f"invalid settings ({problems}); check {files}") from None
