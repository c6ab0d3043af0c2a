"""``server_launch``: where and how a stdio MCP server starts, outside what subagents write.

A stdio server runs unsandboxed, with the user's environment and the
secrets of its ``env``. A workspace-write subagent can write the project
directory and the temp dir. So a server must not find its code there by
looking it up: started in the project, ``npx pkg`` prefers the project's
``node_modules`` and reads its ``.npmrc``, ``uv run`` its ``pyproject.toml``,
``python -m pkg`` the project's ``pkg/``; and a ``PATH`` through the
project's virtualenv finds commands a subagent wrote. Each is a way out of
the sandbox at the next start, with no person looking.

Invariants:

- A server with no ``cwd`` of its own starts in ``NEUTRAL_DIR`` (``/``, as
  Claude Desktop starts its servers): no directory on the walk up from it
  is one a sandboxed subagent can write.
- Words of its command line that are paths relative to the project (``.``,
  ``./x``, ``../x``, or a bare word naming a regular file there such as
  ``server.py``; also as an option's value, ``--require=./boot.js``) are made
  absolute against the project directory, so they
  name what they named when the server started in the project: the dirs on
  the way are resolved where they stand (``_looked_up``), as the kernel
  follows ``l/../x`` (``normpath`` would drop ``l/..`` and name another file
  than the one trust hashed, S-SEC-3). Those files
  are the project's own code, which the user trusted by content (S-SEC-3,
  ``supervisor.config``); what they import is not covered.
- A server's command is looked up on a ``PATH`` without any entry that is
  relative or lies in the project or the temp dir, whatever set that
  ``PATH`` (the user's environment or the server's ``env``).
- An explicit ``cwd`` (from ``subvisor.toml`` or ``config.toml``, relative to
  the project) is where the user asked the server to run: it starts there
  with its words as written, and only its ``PATH`` is cleaned.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._mcp import McpServerConfig

__all__ = [
    "DIRECTORY_ENTRY_FILES",
    "NEUTRAL_DIR",
    "ServerLaunch",
    "clean_path",
    "path_words",
    "server_launch",
]

#: Where a server with no ``cwd`` of its own starts.
NEUTRAL_DIR = "/"


@dataclass(frozen=True)
class ServerLaunch:
    """A stdio server's command line, directory and ``PATH``, as it is started."""

    command: str
    args: tuple[str, ...]
    cwd: str
    path: str
    #: ``PATH`` entries left out, for the message when the command is not found.
    dropped: tuple[str, ...]

    def executable(self) -> str:
        """The command's absolute path, looked up on ``path`` if it is a bare name.

        Raises ``FileNotFoundError`` (its ``filename`` None), saying what to do.
        """
        if os.sep in self.command:
            if not os.path.exists(self.command):
                raise FileNotFoundError(f"command {self.command!r} not found")
            return self.command
        found = shutil.which(self.command, path=self.path)
        if found is None:
            left_out = f" (left out: {', '.join(self.dropped)})" if self.dropped else ""
            raise FileNotFoundError(
                f"command {self.command!r} not found on a PATH without the project and the"
                f" temp dir; install it elsewhere or give its absolute path{left_out}"
            )
        return found


def _inside(entry: str, places: tuple[str, ...]) -> bool:
    return any(entry == place or entry.startswith(place.rstrip("/") + "/") for place in places)


def _writable_places(project_dir: Path) -> tuple[str, ...]:
    """The project and the temp dir, as named and resolved (a link is both)."""
    places: list[str] = []
    for place in (str(project_dir), tempfile.gettempdir()):
        places.append(os.path.normpath(os.path.abspath(place)))
        places.append(os.path.realpath(place))
    return tuple(dict.fromkeys(places))


def clean_path(path: str, project_dir: Path) -> tuple[str, tuple[str, ...]]:
    """``path`` without entries a subagent could write into, and those dropped.

    An entry is dropped when it is relative (it would be looked up from the
    server's directory) or lies, as written or resolved, in the project or
    the temp dir.
    """
    places = _writable_places(project_dir)
    kept: list[str] = []
    dropped: list[str] = []
    for entry in path.split(os.pathsep):
        if not entry:
            continue
        absolute = os.path.isabs(entry)
        if (
            not absolute
            or _inside(os.path.normpath(entry), places)
            or _inside(os.path.realpath(entry), places)
        ):
            dropped.append(entry)
        else:
            kept.append(entry)
    return os.pathsep.join(kept), tuple(dropped)


#: What an interpreter runs when its script is a directory: Python's
#: ``__main__.py``, node's ``index.*`` (or the ``main`` of ``package.json``).
DIRECTORY_ENTRY_FILES = ("__main__.py", "index.js", "index.mjs", "index.cjs")


def path_words(words: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """Each word of a command's arguments that may name a path, and whether it
    stands where an interpreter's script does (the first that is not an option).

    An option's value counts too: ``--require=./boot.js`` names ``./boot.js``.
    """
    script_seen = False
    for word in words:
        if not word:
            continue
        if word.startswith("-"):
            _, equals, value = word.partition("=")
            if equals and value:
                yield value, False
            continue
        yield word, not script_seen
        script_seen = True


def _looked_up(base: Path | str, word: str) -> str:
    """``word`` as the kernel finds it from the dir ``base``, made absolute.

    Every dir on the way is resolved where it stands, so ``l/../x`` with
    ``l -> /a/b`` is ``/a/x`` (what an ``open`` from ``base`` opens), not
    ``base/x`` as ``normpath`` has it; the last component is kept as written.
    """
    path = os.path.join(base, word)
    head, tail = os.path.split(path)
    if tail in ("", ".", ".."):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head), tail)


def _explicitly_relative(word: str) -> bool:
    return word in (".", "..") or word.startswith(("./", "../"))


def _project_word(word: str, project_dir: Path) -> str:
    """``word`` made absolute when it is, or its ``--option=`` value is, a path
    relative to the project (module doc)."""
    if word.startswith("-"):
        option, equals, value = word.partition("=")
        if equals and value:
            return f"{option}={_project_word(value, project_dir)}"
        return word
    if not word or os.path.isabs(word):
        return word
    candidate = _looked_up(project_dir, word)
    if _explicitly_relative(word) or os.path.isfile(candidate):
        return candidate
    return word


def server_launch(
    config: McpServerConfig, project_dir: Path, *, environ_path: str | None = None
) -> ServerLaunch:
    """How the stdio server ``config`` of the project at ``project_dir`` starts.

    ``environ_path``: the ``PATH`` it would inherit (default: this process's);
    a ``PATH`` in the server's ``env`` takes its place. The command is
    looked up by ``ServerLaunch.executable``.
    """
    project_dir = Path(os.path.abspath(project_dir))
    inherited = os.environ.get("PATH", os.defpath) if environ_path is None else environ_path
    path, dropped = clean_path(config.env.get("PATH", inherited), project_dir)
    command = config.command or ""
    if config.cwd is not None:
        cwd = _looked_up(project_dir, config.cwd)
        args = tuple(config.args)
        if os.sep in command and not os.path.isabs(command):
            command = _looked_up(cwd, command)
    else:
        cwd = NEUTRAL_DIR
        args = tuple(_project_word(word, project_dir) for word in config.args)
        if os.sep in command and not os.path.isabs(command):
            command = _looked_up(project_dir, command)
    return ServerLaunch(command, args, cwd, path, dropped)
