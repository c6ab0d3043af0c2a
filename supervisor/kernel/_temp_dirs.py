"""``WorkerTempDirs``: the private temp dir each sandboxed worker may write (S-SBX-1)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from ..files._ext4_topdir import mark_top_directory
from ._worker_tree import process_exists

__all__ = ["WorkerTempDirs"]


class WorkerTempDirs:
    """The private temp dirs of one supervisor's sandboxed workers.

    All live under one dir per supervisor, ``$TMPDIR/subvisor-sandbox-<pid>-*/workers``,
    removed when the supervisor closes. A supervisor killed by SIGKILL cannot
    do that, so the first sandboxed spawn of the next one removes the dirs of
    supervisors whose pid no longer exists.

    A worker that leaves its dir empty (most do) leaves it until close, or
    until ``MAX_KEPT_EMPTY`` pile up: on ext4 without a journal every removal
    slows each file created in the next minute (see ``supervisor.files._atomic_write``), so
    removing them while subagents start only makes the starts slower. An
    empty dir is never handed to another worker: a process the old worker
    left behind could still write into it.
    """

    PREFIX = "subvisor-sandbox-"
    _WORKERS = "workers"
    MAX_KEPT_EMPTY = 1024

    def __init__(self) -> None:
        self._root: str | None = None
        self._dirs: dict[str, str] = {}
        self._kept_empty: list[str] = []

    def make(self, worker_id: str, *, create: bool = True) -> str:
        """A fresh temp dir for ``worker_id``; with ``create`` False only its path.

        The zygote makes the dir of a worker it forks (``SpawnWorker``), off the
        supervisor's loop: on ext4 without a journal a new inode can take a
        millisecond (see ``supervisor.files._atomic_write``). The name is as
        unguessable as ``mkdtemp``'s, and the zygote refuses one that exists as
        anything but its own directory.
        """
        if self._root is None:
            _remove_orphans(Path(tempfile.gettempdir()), self.PREFIX)
            root = tempfile.mkdtemp(prefix=f"{self.PREFIX}{os.getpid()}-")
            # Marked as a top dir, the root puts its one subdir in a lightly
            # used ext4 block group, and the workers' dirs follow it there:
            # usually cheap to create even when $TMPDIR's group saw many
            # deletions (see files._ext4_topdir).
            mark_top_directory(Path(root))
            os.mkdir(os.path.join(root, self._WORKERS), 0o700)
            self._root = root
        parent = os.path.join(self._root, self._WORKERS)
        if create:
            path = tempfile.mkdtemp(prefix=f"{worker_id}-", dir=parent)
        else:
            path = os.path.join(parent, f"{worker_id}-{secrets.token_hex(6)}")
        self._dirs[worker_id] = path
        return path

    def release(self, worker_id: str) -> list[str]:
        """Forget the worker's temp dir; return the dirs to remove now (with ``remove``).

        That is the worker's dir if it holds anything, or every kept empty
        dir once there are ``MAX_KEPT_EMPTY`` of them; else nothing.
        """
        path = self._dirs.pop(worker_id, None)
        if path is None:
            return []
        try:
            with os.scandir(path) as entries:
                empty = next(entries, None) is None
        except OSError:
            empty = False
        if not empty:
            return [path]
        self._kept_empty.append(path)
        if len(self._kept_empty) < self.MAX_KEPT_EMPTY:
            return []
        doomed, self._kept_empty = self._kept_empty, []
        return doomed

    @staticmethod
    def remove(paths: list[str]) -> None:
        """Remove ``paths`` and all they hold (blocking: call from a thread)."""
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Remove every temp dir (blocking)."""
        self._dirs.clear()
        self._kept_empty.clear()
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _remove_orphans(parent: Path, prefix: str) -> None:
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            pid_text = entry.name.removeprefix(prefix).split("-", 1)[0]
            if not entry.name.startswith(prefix) or not pid_text.isdigit():
                continue
            if process_exists(int(pid_text)):
                continue  # alive, or its pid was reused (perhaps by somebody else's): leave it
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == os.getuid():
                    shutil.rmtree(entry, ignore_errors=True)
