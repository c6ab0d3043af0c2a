"""Mark a directory as the top of unrelated trees, so ext4 spreads its subdirectories.

ext4 puts a new directory in its parent's block group, and a new file in its
directory's group, unless the parent carries ``FS_TOPDIR_FL`` (``chattr +T``):
then the Orlov allocator places each subdirectory in a group with more free
inodes and blocks than average and few directories. That matters on ext4
without a journal (common on VMs, this project's CI machine): finding a free
inode there skips every inode of the group freed in the last 60-360 s,
reading an inode table block per skip. A group that saw many deletions
(``/tmp`` after a test run, a home whose old sessions were just removed) made
each create cost 0.2-0.7 ms here; in an untouched group it is about 15 us.
Each session's dir, and so every subagent dir and file in it, lands in such
a group when ``agents/`` is marked.

Usually that is not the group just churned, but it can be: a group whose
inodes were all just freed has the most free inodes. Measured: ``delegate``
right after runs that freed thousands of inodes took 4.5-5.2 ms of supervisor
CPU per agent with the mark against 6.2-8.0 without; a synthetic loop of
creates right after emptying a marked dir's group was 10x slower than
unmarked; back-to-back benchmark runs showed no difference either way.

Elsewhere (another filesystem, a kernel or user that may not set the flag)
marking does nothing.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["is_top_directory", "mark_top_directory"]

_FS_IOC_GETFLAGS = 0x80086601
_FS_IOC_SETFLAGS = 0x40086602
_FS_TOPDIR_FL = 0x00020000


def mark_top_directory(path: Path) -> bool:
    """Set ``FS_TOPDIR_FL`` on the directory ``path``; whether it carries the flag now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        with contextlib.suppress(OSError):
            flags = _flags(fd)
            if flags[0] & _FS_TOPDIR_FL:
                return True
            flags[0] |= _FS_TOPDIR_FL
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags)
            return True
        return False
    finally:
        os.close(fd)


def is_top_directory(path: Path) -> bool:
    """Whether the directory ``path`` carries ``FS_TOPDIR_FL``; raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return bool(_flags(fd)[0] & _FS_TOPDIR_FL)
    finally:
        os.close(fd)


def _flags(fd: int) -> array.array[int]:
    # The kernel reads and writes an int, whatever the ioctl's name says.
    flags = array.array("i", [0])
    fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags)
    return flags
