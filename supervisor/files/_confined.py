"""Where a file a project supplies may lie: inside the project, outside every hidden dir.

A repository (or a subagent allowed to write in it) can put a symlink where
the supervisor reads its files: ``.claude/agents/m -> ~/.subvisor/agent-memory/x``
would have the supervisor, with the user's rights, read what the sandbox hides
from every worker and put it into a prompt (S-SEC-1, S-SEC-3).

Invariant: a confined read checks the file it has OPEN, never the path it
was given. The kernel resolves every link on the way once, at ``open``; the
check then reads where that open file lies (``/proc/self/fd``) and everything
after reads through the same descriptor. A link swapped in after the check
changes nothing that is read (no time-of-check to time-of-use window). Links
that stay inside the project keep working, as they do in the project itself.
Where the open file's path cannot be learnt it is refused.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._errors import SubvisorError

__all__ = ["Confinement", "OutsideConfinementError"]


class OutsideConfinementError(SubvisorError, OSError):
    """The file opened lies outside the project, or inside a dir hidden from it."""


@dataclass(frozen=True, slots=True)
class Confinement:
    """Files may be read inside ``root`` and outside every ``hidden`` dir (all resolved)."""

    root: Path
    hidden: tuple[Path, ...] = ()

    @classmethod
    def of_project(cls, project_dir: Path, hidden: Iterable[Path] = ()) -> Confinement:
        """``project_dir`` and ``hidden`` resolved; a hidden dir holding the project is dropped.

        A home that holds the project would otherwise refuse the whole
        project; one inside it (a ``SUBVISOR_HOME`` in the checkout) stays hidden.
        """
        root = Path(os.path.realpath(project_dir))
        kept = []
        for path in hidden:
            resolved = Path(os.path.realpath(path))
            if not root.is_relative_to(resolved):
                kept.append(resolved)
        return cls(root, tuple(dict.fromkeys(kept)))

    def why_not(self, where: Path) -> str | None:
        """Why a file resolved to ``where`` may not be read, or None when it may."""
        if not where.is_relative_to(self.root):
            return f"it resolves to {str(where)!r}, outside the project {str(self.root)!r}"
        for hidden in self.hidden:
            if where.is_relative_to(hidden):
                return (
                    f"it resolves to {str(where)!r}, inside subvisor's home {str(hidden)!r},"
                    " which is hidden from the project"
                )
        return None

    def check_fd(self, fd: int, path: Path | str) -> None:
        """Raise ``OutsideConfinementError`` unless the open file ``fd`` may be read."""
        try:
            where = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError as exc:
            raise OutsideConfinementError(
                errno.EACCES,
                f"where it resolves cannot be checked ({exc.strerror or exc}); /proc must be"
                " mounted",
                str(path),
            ) from None
        # A path that is no longer reachable ("... (deleted)", "pipe:[...]")
        # is not absolute or lies nowhere under the root: refused below.
        why = self.why_not(where) if where.is_absolute() else f"it is {str(where)!r}"
        if why is not None:
            raise OutsideConfinementError(errno.EACCES, why, str(path))

    def open_dir(self, path: Path) -> int:
        """A descriptor of the dir ``path`` (links followed), once it may be read."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.check_fd(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return fd
