"""Where subvisor keeps its state on disk: the home dir, the database, agent output dirs.

Only ``register_home`` writes (the list of homes, in the default home it
creates); elsewhere the code that writes a file creates its parents when it
needs them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

__all__ = [
    "HOMES_FILE",
    "agent_output_dir",
    "agents_dir",
    "database_path",
    "known_homes",
    "register_home",
    "run_dir",
    "subvisor_home",
]

#: In the default home (``~/.subvisor``): every home a run of this user has
#: used, one resolved path a line. Each run adds its own and hides every one
#: listed from its workers (S-SEC-1): a home only another run names (another
#: project's ``SUBVISOR_HOME``) holds keys and transcripts too.
HOMES_FILE = "homes"

#: The most bytes of ``HOMES_FILE`` read: a few thousand homes.
_HOMES_FILE_MAX = 1 << 20


def subvisor_home() -> Path:
    """``$SUBVISOR_HOME`` if set (and not empty), else ``~/.subvisor``."""
    configured = os.environ.get("SUBVISOR_HOME", "")
    if configured:
        return Path(configured).expanduser()
    return _default_home()


def known_homes(home: Path) -> tuple[Path, ...]:
    """``home`` and every other subvisor home this process can name that exists.

    ``$SUBVISOR_HOME`` and ``~/.subvisor`` besides ``home``: a user who
    points one run elsewhere keeps keys and transcripts in the default home
    too. Then every home listed in the default home's ``HOMES_FILE``, where
    each run adds its own (``register_home``), except one that holds the
    user's home directory or this process's working directory (hiding it
    would hide the project), or that now resolves elsewhere. A home first
    used after this process read the list, or only by another user, cannot
    be named here.
    """
    configured = os.environ.get("SUBVISOR_HOME", "")
    others = [Path(configured).expanduser()] if configured else []
    default = _default_home()
    others.append(default)
    found = [home, *(other for other in others if other.is_dir())]
    named = [Path(os.path.realpath(path)) for path in found]
    around = [os.path.realpath(Path.home()), os.path.realpath(os.getcwd())]
    for listed in _listed_homes(default):
        # Listed resolved: one that resolves elsewhere now had a component
        # swapped for a symlink since, and what it points at is not a home.
        if os.path.realpath(listed) != listed or not os.path.isdir(listed):
            continue
        if not any(Path(p).is_relative_to(listed) for p in around):
            named.append(Path(listed))
    return tuple(dict.fromkeys(named))


def register_home(home: Path) -> None:
    """Add ``home`` to the default home's ``HOMES_FILE``, dropping homes that are gone.

    Creates the default home (0700) if missing: it is where the list lives,
    and every run hides it from its workers. Raises ``OSError`` where the
    default home cannot be written.
    """
    default = _default_home()
    default.mkdir(mode=0o700, parents=True, exist_ok=True)
    resolved = os.path.realpath(home)
    if "\n" in resolved:
        raise OSError(errno.EINVAL, "a path holding a newline cannot be listed", resolved)
    fd = os.open(default / HOMES_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # Two runs starting at once must not each drop the other's line.
        fcntl.flock(fd, fcntl.LOCK_EX)
        listed = _parse_homes(os.pread(fd, _HOMES_FILE_MAX, 0))
        kept = [path for path in dict.fromkeys(listed) if os.path.isdir(path)]
        if resolved not in kept:
            kept.append(resolved)
        if kept != listed:
            data = "".join(f"{path}\n" for path in kept).encode("utf-8", "surrogateescape")
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _default_home() -> Path:
    """``~/.subvisor``: the home of a run without ``SUBVISOR_HOME``, and where the list lives."""
    return Path.home() / ".subvisor"


def _listed_homes(default: Path) -> list[str]:
    """The homes in ``default``'s ``HOMES_FILE``; none when it is missing or unreadable."""
    with contextlib.suppress(OSError):
        fd = os.open(default / HOMES_FILE, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return _parse_homes(os.pread(fd, _HOMES_FILE_MAX, 0))
        finally:
            os.close(fd)
    return []


def _parse_homes(data: bytes) -> list[str]:
    # Only absolute paths count: anything else in the file (it is the user's,
    # never a worker's) is skipped rather than resolved against some cwd, and a
    # NUL, which no path holds, rather than raised from ``realpath``.
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    return [line for line in lines if line.startswith("/") and "\0" not in line]


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
