"""Opening a file that a user, a project or a repository supplies, without trusting what it is.

Such a path may name a FIFO (a plain ``open`` blocks until a writer comes,
which hangs the supervisor), a device (``/dev/zero`` never ends), a socket or
a directory, or a file far larger than anything it should be. Invariant: every
file of that kind (profiles, plugin manifests, memory indexes, scenario and
workflow files) is opened here, and opened for reading only once it is known
to be a regular file where it may be read: first as a path alone
(``O_PATH``, which opens no device, wakes no FIFO writer and is no open to
the file's watchers), checked, then reopened through that same descriptor.
What is wrong is an ``OSError`` whose ``strerror`` says it in words, so the
callers' existing ``except OSError`` handling reports it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .._errors import SubvisorError
from ._confined import Confinement

__all__ = ["FileTooLargeError", "NotARegularFileError", "open_regular_file", "read_regular_file"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotARegularFileError(SubvisorError, OSError):
    """The path names a directory, a FIFO, a device or a socket, not a file to read."""


class FileTooLargeError(SubvisorError, OSError):
    """The file is larger than its reader accepts."""


def open_regular_file(
    path: Path | str,
    *,
    dir_fd: int | None = None,
    follow_symlinks: bool = True,
    confine: Confinement | None = None,
) -> BinaryIO:
    """``path`` opened for reading in binary, once it is known to be a regular file.

    ``dir_fd`` and ``follow_symlinks`` as in ``os.open`` (a final symlink not
    followed: ``ELOOP``). With ``confine``, the file opened must lie where it
    allows (``OutsideConfinementError`` otherwise). Raises ``OSError``
    (``NotARegularFileError`` for anything but a regular file).
    """
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    located = os.open(path, flags, dir_fd=dir_fd)
    try:
        if confine is not None:
            confine.check_fd(located, path)
        mode = os.fstat(located).st_mode
        if stat.S_ISLNK(mode):  # O_PATH | O_NOFOLLOW names the link itself
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise NotARegularFileError(
                errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                f"it is {kind}, not a regular file",
                str(path),
            )
        # The file checked, not whatever the path names by now. O_NONBLOCK: a
        # lease on it refuses at once instead of blocking until it is broken.
        try:
            fd = os.open(
                f"/proc/self/fd/{located}",
                os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
            )
        except FileNotFoundError:
            raise OSError(
                errno.ENOENT, "it cannot be reopened to be read: /proc must be mounted", str(path)
            ) from None
    finally:
        os.close(located)
    try:
        return open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(
    path: Path | str, max_bytes: int, *, confine: Confinement | None = None
) -> bytes:
    """The whole content of the regular file ``path``; ``FileTooLargeError`` past ``max_bytes``.

    ``confine`` as in :func:`open_regular_file`.
    """
    with open_regular_file(path, confine=confine) as handle:
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise FileTooLargeError(errno.EFBIG, f"it is larger than {max_bytes} bytes", str(path))
    return raw
