"""Checks on what the command line is given, before anything starts.

Invariant: every argument, and every ``SUBVISOR_*`` variable, that subvisor
reads as text is valid UTF-8, and so is the working directory's path. Python
hands an undecodable byte over as a lone surrogate (``\\udcff``), which no
UTF-8 encoder (SQLite, JSON, msgpack) accepts: it would fail wherever it is
first stored or sent. Such input is refused here, naming the argument, rather
than replaced with U+FFFD: a changed prompt or path would do something else
than was asked, silently.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from ..kernel import SubvisorError

__all__ = ["BadInputError", "check_text_arguments", "positive_seconds", "working_directory"]

#: The variables subvisor reads as text (paths and model strings).
TEXT_VARIABLES = ("SUBVISOR_HOME", "SUBVISOR_MODEL")
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONVERT = "convert it first (for example with iconv -t UTF-8)"
#: What a positional argument is called in an error; any other is an option.
_POSITIONALS = {
    "prompt": "the prompt",
    "script": "the script's path",
    "session": "the session id",
    "task_id": "the task id",
    "run_id": "the run id",
}


class BadInputError(SubvisorError):
    """Bad input on the command line: one line says what is wrong and what to do."""


def check_text_arguments(args: argparse.Namespace) -> None:
    """Refuse (``BadInputError``) an argument or ``SUBVISOR_*`` variable that is not UTF-8."""
    for dest, value in vars(args).items():
        for text in value if isinstance(value, list) else (value,):
            if isinstance(text, str):
                _check_text(_argument_label(dest), text)
    for name in TEXT_VARIABLES:
        _check_text(f"${name}", os.environ.get(name, ""))


def working_directory(raw: str) -> Path:
    """``raw`` resolved to the existing directory the agents work in, else ``BadInputError``."""
    try:
        path = Path(raw).resolve()
    except OSError as exc:
        # The current directory was removed under the shell.
        raise BadInputError(
            f"the working directory {raw!r} cannot be resolved ({exc.strerror or exc}): was the "
            "current directory removed? cd to an existing directory or pass --cwd DIR"
        ) from None
    _check_text(
        "the working directory's path",
        str(path),
        "rename the directory, or work in one whose path is UTF-8",
    )
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise BadInputError(
            f"the working directory {str(path)!r} {what}: pass --cwd DIR with an existing directory"
        )
    return path


def positive_seconds(raw: str) -> float:
    """argparse type: a finite number of seconds above 0."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {raw!r}")
    return seconds


def _argument_label(dest: str) -> str:
    return _POSITIONALS.get(dest) or f"--{dest.replace('_', '-')}"


def _check_text(label: str, text: str, fix: str = _CONVERT) -> None:
    match = _SURROGATE.search(text)
    if match is None:
        return
    code = ord(match[0])
    # An undecodable byte B arrives as U+DC00+B (PEP 383).
    what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
    raise BadInputError(
        f"{label} is not valid UTF-8 ({what} at character {match.start()}): subvisor takes "
        f"text as UTF-8 and does not guess another encoding; {fix}"
    )
