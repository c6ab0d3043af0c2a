"""Where subvisor keeps its state on disk: the home dir, the database, agent output dirs.

Nothing here creates a directory; the code that writes a file creates its
parents when it needs them.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "agent_output_dir",
    "agents_dir",
    "database_path",
    "known_homes",
    "run_dir",
    "subvisor_home",
]


def subvisor_home() -> Path:
    """``$SUBVISOR_HOME`` if set (and not empty), else ``~/.subvisor``."""
    configured = os.environ.get("SUBVISOR_HOME", "")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".subvisor"


def known_homes(home: Path) -> tuple[Path, ...]:
    """``home`` and every other subvisor home this process can name that exists.

    ``$SUBVISOR_HOME`` and ``~/.subvisor`` besides ``home``: a user who
    points one run elsewhere keeps keys and transcripts in the default home
    too. A home only some other process knows of (another project's
    ``SUBVISOR_HOME``) cannot be named here.
    """
    configured = os.environ.get("SUBVISOR_HOME", "")
    others = [Path(configured).expanduser()] if configured else []
    others.append(Path.home() / ".subvisor")
    found = [home, *(other for other in others if other.is_dir())]
    return tuple(dict.fromkeys(Path(os.path.realpath(path)) for path in found))


def database_path(home: Path) -> Path:
    """The SQLite session store: ``home/subvisor.db``."""
    return home / "subvisor.db"


def run_dir(home: Path) -> Path:
    """Where live sessions keep their files, ``home/run/<session>.*`` (control sockets)."""
    return home / "run"


def agents_dir(home: Path) -> Path:
    """Where the output dirs of every session's tasks live: ``home/agents``."""
    return home / "agents"


def agent_output_dir(home: Path, parent_session_id: str, agent_id: str) -> Path:
    """A task's output dir, ``home/agents/<parent_session_id>/<agent_id>`` (S-RUN-1).

    Raises ``ValueError`` when an id is not a single plain path component:
    ids can come from a model (resume, SendMessage), and one like ``../x``
    must not place files outside ``home/agents``.
    """
    for label, value in (("parent session id", parent_session_id), ("agent id", agent_id)):
        _check_path_component(label, value)
    return agents_dir(home) / parent_session_id / agent_id


def _check_path_component(label: str, value: str) -> None:
    if value in ("", ".", "..") or "/" in value or "\\" in value or "\0" in value:
        raise ValueError(
            f"{label} {value!r} cannot name a directory: "
            "it must be non-empty, not '.' or '..', without '/', '\\' or NUL"
        )
