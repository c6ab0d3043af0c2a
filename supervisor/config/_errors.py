"""``ConfigError``: a config file that cannot be used, and why."""

from __future__ import annotations

from ..kernel import SubvisorError

__all__ = ["ConfigError"]


class ConfigError(SubvisorError):
    """A config file could not be read, has wrong keys or values, or is not trusted."""
