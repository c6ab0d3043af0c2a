"""Telling text files from binary ones, and reading them whole."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ._errors import BinaryFileError, ToolError

__all__ = ["SNIFF_BYTES", "check_regular_file", "looks_binary", "read_text_file"]

# Like git and ripgrep: a NUL byte near the start means binary.
SNIFF_BYTES = 8_192


def looks_binary(head: bytes) -> bool:
    """Whether the first bytes of a file mark it as binary."""
    return b"\x00" in head[:SNIFF_BYTES]


def check_regular_file(path: Path) -> os.stat_result:
    """``path``'s status if it is a regular file (symlinks followed).

    Raises ``OSError`` (missing, a directory) or :class:`ToolError` (a pipe,
    socket or device, which could block a reader forever).
    """
    status = path.stat()
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(status.st_mode):
        raise ToolError(f"Error: {path} is not a regular file (a device, pipe or socket).")
    return status


def read_text_file(path: Path) -> str:
    """The exact text of a UTF-8 file, line endings kept.

    Raises :class:`BinaryFileError` for binary content, and what
    :func:`check_regular_file` raises.
    """
    check_regular_file(path)
    data = path.read_bytes()
    if looks_binary(data):
        raise BinaryFileError(str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BinaryFileError(str(path)) from None
