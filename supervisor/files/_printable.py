"""Text from agents and repositories made safe to show on a terminal.

A subagent's output, a task's description, a profile's name: any of them can
carry an escape sequence that moves the cursor over an approval question,
sets the clipboard (OSC 52), or asks the terminal a question whose answer
arrives on stdin as if typed. Shown through ``printable`` they cannot: every
control and format character (C0, DEL, C1, bidi overrides, zero-width
marks) is written as its Python escape instead.
"""

from __future__ import annotations

__all__ = ["printable"]

_KEPT_IN_TEXT = frozenset("\n\t")


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\u202e``).

    ``multiline`` keeps newlines and tabs, for transcripts and answers.
    """
    if text.isprintable():
        return text
    kept = _KEPT_IN_TEXT if multiline else frozenset()
    return "".join(
        char
        if char.isprintable() or char in kept
        else char.encode("unicode_escape").decode("ascii")
        for char in text
    )
