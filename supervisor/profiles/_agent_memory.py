"""Persistent memory of a profile with ``memory`` (S-PROF-8).

Each such profile has its own dir: ``user`` -> ``$SUBVISOR_HOME/agent-memory/<profile>/``,
``project`` -> ``<project>/.subvisor/agent-memory/<profile>/``, ``local`` ->
``<project>/.subvisor/agent-memory-local/<profile>/`` (Claude Code's third
scope: this project, kept out of version control). A project profile's
``user`` is ``local`` (``memory_scope``): the user's memory across projects is
theirs, and a repository's profile named like one of theirs must not read it
into its prompt nor write it (S-SEC-3); the parser says so in its warnings.

The child's system prompt gets, after the profile body, a section that
defines the four kinds of memory and how to keep them, then ``MEMORY.md``
from that dir: its first 200 lines, and at most 25000 bytes of them, as
Claude Code does. A profile that lists its tools also gets Read, Write and
Edit, so that it can keep the memory.

Invariant (S-SEC-3): a repository ships ``.subvisor/`` and a subagent may
write into it, so no symlink is ever followed from the dir's anchor (the
project dir, or subvisor's home) down: ``make_memory_dir`` (run at each
launch, before the sandbox is chosen) creates and checks it, and refuses a
link or non-dir on the way; ``MEMORY.md`` is read through the same checked
components. The worker opens the dir again without following links
(``SandboxPolicy.memory_dir``), since one may be swapped in after the check.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from ..files._input_files import open_regular_file
from ..kernel import SubvisorError
from ._profile import AgentProfile, MemoryScope

__all__ = [
    "MEMORY_INDEX",
    "MEMORY_INDEX_MAX_BYTES",
    "MEMORY_INDEX_MAX_LINES",
    "MEMORY_KINDS",
    "MEMORY_TOOLS",
    "MemoryDirError",
    "apply_memory",
    "make_memory_dir",
    "memory_dir",
    "memory_dir_name",
    "memory_prompt",
    "memory_scope",
    "memory_tools",
]

MEMORY_INDEX = "MEMORY.md"
MEMORY_INDEX_MAX_LINES = 200
MEMORY_INDEX_MAX_BYTES = 25_000
#: The tools a memory needs: Read to consult a memory file, Write and Edit to keep them.
MEMORY_TOOLS: tuple[str, ...] = ("Read", "Write", "Edit")
#: The kinds of memory and what each is for (S-PROF-8).
MEMORY_KINDS: dict[str, str] = {
    "user": (
        "who the user is: their role, expertise and preferences, so that you can work the "
        "way they want"
    ),
    "feedback": (
        "guidance the user gave about how to do the work: corrections, and approaches they "
        "confirmed; note why, so that you can judge new cases"
    ),
    "project": (
        "facts about the work that the code and its history do not show: goals, decisions "
        "and their reasons, constraints, deadlines, who owns what"
    ),
    "reference": (
        "where to find things outside this directory: documents, dashboards, tickets, URLs, "
        "and what each is good for"
    ),
}
_SCOPE_SENTENCES: dict[str, str] = {
    "user": "It is yours across every project, so keep project details out of it.",
    "project": "It belongs to this project and may be committed and shared with its team.",
    "local": "It belongs to this project on this machine and is not for version control.",
}
_UNSAFE = frozenset('/\\:*?"<>|\0')


def memory_dir_name(profile_name: str) -> str:
    """``profile_name`` as one safe path component (``plugin:x`` -> ``plugin-x``)."""
    name = "".join(
        "-" if char in _UNSAFE or not char.isprintable() else char for char in profile_name
    )
    name = name.strip().strip(".")
    if not name:
        raise ValueError(f"profile name {profile_name!r} cannot name a memory dir")
    return name


class MemoryDirError(SubvisorError):
    """A profile's memory dir is reached through a symlink, or is no directory (S-SEC-3)."""


_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def memory_scope(profile: AgentProfile) -> MemoryScope | None:
    """Where the profile's memory lives: its ``memory``, except a project profile's ``user``,
    which is ``local`` (a repository may not reach the user's memory, S-SEC-3)."""
    if profile.memory == "user" and profile.scope == "project":
        return "local"
    return profile.memory


def _memory_place(
    profile: AgentProfile, *, home: Path, project_dir: Path
) -> tuple[Path, tuple[str, ...]] | None:
    """The memory dir's anchor and its components below it; None without ``memory``."""
    scope = memory_scope(profile)
    if scope is None:
        return None
    name = memory_dir_name(profile.name)
    if scope == "user":
        return home, ("agent-memory", name)
    if scope == "project":
        return project_dir, (".subvisor", "agent-memory", name)
    return project_dir, (".subvisor", "agent-memory-local", name)


def memory_dir(profile: AgentProfile, *, home: Path, project_dir: Path) -> Path | None:
    """The profile's memory dir, or None when it has no ``memory`` (S-PROF-8).

    Only the path: ``make_memory_dir`` is what checks it.
    """
    place = _memory_place(profile, home=home, project_dir=project_dir)
    return None if place is None else place[0].joinpath(*place[1])


def _open_memory_dir(
    profile: AgentProfile, *, home: Path, project_dir: Path, create: bool
) -> int | None:
    """An ``O_PATH`` fd of the memory dir, reached with no symlink below its anchor.

    None when the profile has no ``memory``, or the dir is missing and not
    ``create``. Raises ``MemoryDirError`` for a symlink or non-dir on the way.
    """
    place = _memory_place(profile, home=home, project_dir=project_dir)
    if place is None:
        return None
    anchor, parts = place
    if create:
        anchor.mkdir(parents=True, exist_ok=True)
    # The anchor is the user's own choice (their cwd, SUBVISOR_HOME): links
    # above it are theirs. Below it, each step is opened O_NOFOLLOW from the
    # fd of the last, so a link swapped in during the walk fails it too.
    try:
        fd = os.open(anchor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        for depth, part in enumerate(parts, 1):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if create:
                    raise
                os.close(fd)
                return None
            except NotADirectoryError:
                bad = anchor.joinpath(*parts[:depth])
                raise MemoryDirError(
                    f"profile {profile.name!r} ({profile.source}): its memory dir "
                    f"{anchor.joinpath(*parts)} is reached through {bad}, which is a symlink "
                    f"or not a directory; remove {bad} (a repository may not point a memory "
                    "dir elsewhere), then launch again"
                ) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_memory_dir(profile: AgentProfile, *, home: Path, project_dir: Path) -> Path | None:
    """The profile's memory dir, made where missing; its real path (None without ``memory``).

    Raises ``MemoryDirError`` where a component below the project dir (or
    home) is a symlink or not a directory: the dir becomes writable in every
    sandbox, so it must be exactly where it says (S-SEC-3, S-SBX-1).
    """
    fd = _open_memory_dir(profile, home=home, project_dir=project_dir, create=True)
    if fd is None:
        return None
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    finally:
        os.close(fd)


def memory_prompt(profile: AgentProfile, *, home: Path, project_dir: Path) -> str:
    """The system prompt section for the profile's memory; empty without ``memory``.

    Raises ``MemoryDirError`` where a symlink leads to the dir (S-SEC-3).
    """
    directory = memory_dir(profile, home=home, project_dir=project_dir)
    scope = memory_scope(profile)
    if directory is None or scope is None:
        return ""
    index = directory / MEMORY_INDEX
    fd = _open_memory_dir(profile, home=home, project_dir=project_dir, create=False)
    try:
        shown = _read_index(fd)
    finally:
        if fd is not None:
            os.close(fd)
    kinds = "\n".join(f"- {kind}: {meaning}" for kind, meaning in MEMORY_KINDS.items())
    return f"""\
# Persistent memory

You have a persistent memory directory at {directory}. What you save there is there the next \
time you run as {profile.name}. {_SCOPE_SENTENCES[scope]} Consult it before you start \
when the task relates to earlier work, and save what a later run should know when you finish.

## Kinds of memory
{kinds}

Do not save what the code, its history or its documentation already say, nor the state of the \
task at hand.

## How to save a memory
Write each memory to its own file in {directory} (for example feedback_test_style.md), \
starting with this frontmatter:

---
name: a short title
description: one line saying what it is about, to judge later whether it matters
type: user, feedback, project or reference
---

then the memory itself. Then add one line for it to {index}: \
`- [title](file.md): what it is about`. MEMORY.md is only the index, one line per memory and \
no memory content; it is loaded into this prompt at every start and cut after \
{MEMORY_INDEX_MAX_LINES} lines, so keep it short. Update a memory that changed instead of \
writing a second one, and delete memories that turned out wrong.

## MEMORY.md
{shown}"""


def memory_tools(profile: AgentProfile) -> tuple[str, ...] | None:
    """The profile's ``tools`` with what its memory needs (S-PROF-8).

    A listed set gains Read, Write and Edit. ``skills`` without ``tools``
    (only Skill, S-PROF-5) gains them too. Inheriting every tool already
    includes them; ``disallowedTools`` still wins.
    """
    if profile.memory is None:
        return profile.tools
    if profile.lists_tools or (profile.tools is None and profile.skills):
        return tuple(dict.fromkeys([*(profile.tools or ()), *MEMORY_TOOLS]))
    return profile.tools


def apply_memory(profile: AgentProfile, *, home: Path, project_dir: Path) -> AgentProfile:
    """The profile as launched: memory section after its body, memory tools added."""
    section = memory_prompt(profile, home=home, project_dir=project_dir)
    if not section:
        return profile
    prompt = f"{profile.prompt.rstrip()}\n\n{section}" if profile.prompt.strip() else section
    return profile.model_copy(update={"prompt": prompt, "tools": memory_tools(profile)})


def _read_index(directory_fd: int | None) -> str:
    """``MEMORY.md`` in the dir ``directory_fd`` (None: no dir yet), as the prompt shows it."""
    missing = "MEMORY.md does not exist yet: you have no memories. Create it with your first one."
    if directory_fd is None:
        return missing
    try:
        # Never followed: a link could show the prompt (and the model) any file.
        with open_regular_file(MEMORY_INDEX, dir_fd=directory_fd, follow_symlinks=False) as handle:
            raw = handle.read(MEMORY_INDEX_MAX_BYTES + 1)
    except FileNotFoundError:
        return missing
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "MEMORY.md is a symlink, which is not followed; tell the caller."
        return f"MEMORY.md could not be read ({exc.strerror or exc}); tell the caller."
    if not raw.strip():
        return "MEMORY.md is empty: you have no memories yet."
    text = raw[:MEMORY_INDEX_MAX_BYTES].decode("utf-8", errors="replace")
    lines = text.splitlines()
    notes = []
    if len(lines) > MEMORY_INDEX_MAX_LINES:
        lines = lines[:MEMORY_INDEX_MAX_LINES]
        notes.append(f"only its first {MEMORY_INDEX_MAX_LINES} lines are shown")
    elif len(raw) > MEMORY_INDEX_MAX_BYTES:
        notes.append(f"only its first {MEMORY_INDEX_MAX_BYTES} bytes are shown")
    shown = "\n".join(lines)
    if notes:
        shown += (
            f"\n\n[MEMORY.md is longer: {notes[0]}. Shorten it: one line per memory, details "
            "in the memory files.]"
        )
    return shown
