"""``WorkerTempDirs``: the private temp dir each sandboxed worker may write (S-SBX-1)."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from protocol import TEMP_SHARED_PREFIX

from ..files._ext4_topdir import mark_top_directory
from ._worker_tree import process_exists

__all__ = ["WorkerTempDirs"]

log = logging.getLogger(__name__)


class WorkerTempDirs:
    """The private temp dirs of one supervisor's sandboxed workers.

    All live under one dir per supervisor, ``<shared>/<pid>-*/workers``,
    removed when the supervisor closes. ``<shared>`` is one dir per uid,
    ``$TMPDIR/subvisor-sandboxes-<uid>`` (mode 0700), holding every session's:
    each worker covers it, and its own session's ``workers``, with an empty
    tmpfs that keeps only its own dir (``worker._mounts.isolate_temp_dir``),
    so that no worker reads another session's temp files, nor those of one
    that starts later (S-SEC-2). Where that name is taken by something not
    ours (another user made it first in a shared ``/tmp``), the same name in
    ``.cache`` in the uid's home serves (logged); only where it cannot, a
    private dir stands in for it (``<shared>-<pid>-*``), and other sessions'
    temp dirs are not hidden (logged).
    A supervisor killed by SIGKILL cannot remove its dir, so the first
    sandboxed spawn of the next one removes the dirs of supervisors whose pid
    no longer exists (also those of older versions, directly in ``$TMPDIR``).

    A worker that leaves its dir empty (most do) leaves it until close, or
    until ``MAX_KEPT_EMPTY`` pile up: on ext4 without a journal every removal
    slows each file created in the next minute (see ``supervisor.files._atomic_write``), so
    removing them while subagents start only makes the starts slower. An
    empty dir is never handed to another worker: a process the old worker
    left behind could still write into it.
    """

    #: Where older versions put a supervisor's dir: ``$TMPDIR/<PREFIX><pid>-*``.
    PREFIX = "subvisor-sandbox-"
    #: This uid's dir of every session's: ``$TMPDIR/<SHARED><uid>``.
    SHARED = TEMP_SHARED_PREFIX
    _WORKERS = "workers"
    MAX_KEPT_EMPTY = 1024

    def __init__(self) -> None:
        self._root: str | None = None
        #: A stand-in for the uid's shared dir, removed with ours at close.
        self._private_shared: str | None = None
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
            temp = tempfile.gettempdir()
            shared = self._shared_dir(temp)
            _remove_orphans(Path(temp), self.PREFIX)
            _remove_orphans(Path(temp), f"{self.SHARED}{os.getuid()}-")  # stand-ins
            _remove_orphans(Path(shared), "")
            root = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=shared)
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

    def _shared_dir(self, temp: str) -> str:
        """This uid's dir of every session's, made if need be.

        Where its name in ``temp`` is not ours, the same name in a dir only
        this uid can write (``.cache`` in its home), which every session of
        the uid finds alike, so they stay hidden from each other; failing
        that, a private stand-in of this supervisor's alone.
        """
        uid = os.getuid()
        name = f"{self.SHARED}{uid}"
        taken = os.path.join(temp, name)
        path = _own_dir(taken)
        if path is not None:
            return path
        parent = _private_parent()
        if parent is not None:
            path = _own_dir(os.path.join(parent, name))
            if path is not None:
                log.warning(
                    "%s is not a directory of uid %d, so subagents' temp dirs go in %s; remove %s",
                    taken,
                    uid,
                    path,
                    taken,
                )
                return path
        self._private_shared = tempfile.mkdtemp(prefix=f"{name}-{os.getpid()}-", dir=temp)
        log.warning(
            "%s is not a directory of uid %d, so this session's subagents' temp dirs go in %s and "
            "those of other sessions are not hidden from them; remove %s",
            taken,
            uid,
            self._private_shared,
            taken,
        )
        return self._private_shared

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
        shared, self._private_shared = self._private_shared, None
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)


def _own_dir(path: str) -> str | None:
    """``path``, made if need be, if it is a directory of this uid (then mode 0700); else None."""
    uid = os.getuid()
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        # lstat: a symlink planted under that name is not ours, whatever it leads to.
        # In a sticky $TMPDIR nobody else can rename or remove our dir afterwards.
        info = os.lstat(path)
        if not (stat.S_ISDIR(info.st_mode) and info.st_uid == uid):
            return None
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o700)
    except OSError:
        return None
    return path


def _private_parent() -> str | None:
    """``.cache`` in the uid's home as the password database names it (not ``$HOME``, nor
    ``$XDG_RUNTIME_DIR``: every session of the uid must find the same one, whatever its
    environment), if it is a dir of the uid that no other uid can write; else None."""
    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None
    parent = os.path.join(home, ".cache")
    if not os.path.isabs(parent):
        return None
    with contextlib.suppress(OSError):
        os.makedirs(parent, 0o700, exist_ok=True)
    try:
        info = os.lstat(parent)
    except OSError:
        return None
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022:
        return parent
    return None


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
