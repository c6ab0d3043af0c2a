"""Filesystem facts tests check: ext4's top-directory flag."""

from __future__ import annotations

import array
import fcntl
import os
from pathlib import Path

from supervisor import _top_directory

__all__ = ["can_mark_top_directories", "is_top_directory"]


def is_top_directory(path: Path) -> bool:
    """Whether ``path`` carries ``FS_TOPDIR_FL`` (``chattr +T``)."""
    flags = array.array("i", [0])
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, _top_directory._FS_IOC_GETFLAGS, flags)
    finally:
        os.close(fd)
    return bool(flags[0] & _top_directory._FS_TOPDIR_FL)


def can_mark_top_directories(scratch: Path) -> bool:
    """Whether the filesystem of ``scratch`` (a dir) keeps the top-directory flag."""
    probe = scratch / "top-directory-probe"
    probe.mkdir()
    try:
        return _top_directory.mark_top_directory(probe) and is_top_directory(probe)
    finally:
        probe.rmdir()
