"""Turning failures into messages a model can act on (S-LOCAL-2)."""

from __future__ import annotations

import errno
import os

from pydantic import ValidationError

__all__ = ["BinaryFileError", "ToolError", "describe_os_error", "describe_validation_error"]


class ToolError(Exception):
    """A failure whose message is written for the model and returned to it as is."""


class BinaryFileError(ToolError):
    """A file that should be text is binary (NUL bytes or not valid UTF-8)."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"Error: {path} looks like a binary file (not valid UTF-8 text); "
            "this tool only handles text files."
        )
        self.path = path


_OS_ERROR_MESSAGES: dict[int, str] = {
    errno.ENOENT: "No such file or directory",
    errno.EISDIR: "Is a directory (use LS or Glob to see what it contains)",
    errno.ENOTDIR: "A component of the path is not a directory",
    errno.EACCES: "Permission denied",
    errno.EPERM: "Operation not permitted",
    errno.EROFS: "Read-only file system",
    errno.ENOSPC: "No space left on device",
    errno.ENAMETOOLONG: "File name too long",
    errno.ELOOP: "Too many levels of symbolic links",
    errno.EEXIST: "File exists",
}


def describe_os_error(exc: OSError) -> str:
    """One line saying what went wrong and on which path."""
    reason = _OS_ERROR_MESSAGES.get(exc.errno or 0) or exc.strerror or str(exc)
    if exc.filename is None:
        return f"Error: {reason}"
    return f"Error: {reason}: {os.fsdecode(exc.filename)}"


def describe_validation_error(tool_name: str, exc: ValidationError) -> str:
    """Which parameters of ``tool_name`` were wrong, one line each, by the model's names."""
    problems: dict[str, str] = {}
    for error in exc.errors():
        loc = error["loc"]
        # A union field reports once per member; the first says enough.
        field = str(loc[0]) if loc else "(input)"
        problems.setdefault(field, error["msg"])
    lines = [f"Invalid input for {tool_name}:"]
    lines += [f"- {field}: {message}" for field, message in problems.items()]
    return "\n".join(lines)
