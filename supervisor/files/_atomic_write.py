"""Rewrite a file so that readers see the old content or the new, never half, freeing no inode.

The usual way, write a temp file and ``rename`` it over the target, frees
the target's old inode on every rewrite and creates a new one. On ext4
without a journal (common on VMs, and this project's CI machine) a new
inode is found by skipping every inode freed in the last 60 s (360 s while
its inode table block is dirty), reading a table block for each skip: with
several rewrites per subagent, file creation got slower with every subagent
just run, to 0.1-0.7 ms of kernel time per create here (tmpfs: 6 us).

So the new content goes into a sibling scratch file ``.<name>.partial``,
and ``renameat2(RENAME_EXCHANGE)`` swaps the two names. The old inode lives
on as the scratch file for the next rewrite, so only a file's first two
writes create an inode and none frees one. The price: a reader that opened
the old version must read it before the rewrite after next, which then
reuses that inode (these files are small, read at once, and rewritten a
few times per task). Where the exchange is
unsupported (another OS, an old kernel, a filesystem without it) the
scratch file is renamed over the target as usual.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Callable

__all__ = ["write_all", "write_atomically"]

_AT_FDCWD = -100
_RENAME_EXCHANGE = 1 << 1

_Renameat2 = Callable[[int, bytes, int, bytes, int], int]


def _load_renameat2() -> _Renameat2 | None:
    with contextlib.suppress(OSError, AttributeError):
        function = ctypes.CDLL(None, use_errno=True).renameat2
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        function.argtypes += [ctypes.c_uint]
        function.restype = ctypes.c_int
        renameat2: _Renameat2 = function
        return renameat2
    return None


_renameat2 = _load_renameat2()
#: "No target yet" (a rename then frees nothing), or "this kernel or filesystem cannot".
_RENAME_INSTEAD = {errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}


def write_atomically(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Set ``path``'s content to ``text``; a concurrent reader sees the old file or the new.

    Leaves ``.<name>.partial`` beside ``path``, holding the previous content,
    for the next rewrite to reuse. ``mode``: the file's permission bits (for
    example 0o600), set before the content is written; default: as created.
    """
    # Plain strings and os calls, not pathlib: every task's metadata.json is
    # rewritten through here, on the supervisor's hot path.
    target = os.fspath(path)
    folder, name = os.path.split(target)
    scratch = os.path.join(folder, f".{name}.partial")
    # Written over and then cut to length, not truncated first: O_TRUNC frees
    # the old content's blocks only for the write to allocate new ones, on
    # ext4 without a journal 4x the cost of the whole rewrite here.
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
    fd = os.open(scratch, flags, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            # The scratch file may be an older inode with other bits.
            os.fchmod(fd, mode)
        data = text.encode("utf-8")
        write_all(fd, data)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    if _renameat2 is not None:
        source, dest = os.fsencode(scratch), os.fsencode(target)
        if _renameat2(_AT_FDCWD, source, _AT_FDCWD, dest, _RENAME_EXCHANGE) == 0:
            return
        error = ctypes.get_errno()
        if error not in _RENAME_INSTEAD:
            raise OSError(error, os.strerror(error), target)
    os.replace(scratch, target)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a regular file takes it in one write, as a rule)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
