"""The command line's Rich console: nothing an agent or a repository wrote reaches the
terminal as a control sequence, and none of it is read as Rich markup.

Every view (``run``, ``ps``, ``logs``, ``agents``, ``workflow``) shows text
that a model, a subagent, a task record, a profile or a repository chose: a
description, a profile's name, a transcript, an error. Rich strips only BEL,
BS, VT, FF and CR from it, so an ESC would set the window title (OSC 0) or
the clipboard (OSC 52), erase lines, or ask the terminal a question whose
answer arrives on stdin as if typed; and a ``[/]`` in it, in a table cell or
a rule, would raise ``MarkupError`` (a traceback instead of the view).

Two layers. Each view passes such text through ``shown`` (a ``Text``: never
markup) or ``quoted`` (for a markup string), both ``printable`` first, so it
is escaped before it is measured and the tables line up. ``SafeConsole`` is
the guard behind them, for a site that forgot: it escapes every
non-printable character of the text of each segment it writes, except
control segments. That is safe for Rich's own output because Rich never puts
its escape codes in a segment's text: a style's SGR codes (and an OSC 8
link) are added around the text by ``Style.render`` as it is written, and
cursor moves, clearing and the live view's redraws (``rich.control``) are
control segments, written as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from ..files._printable import printable

__all__ = ["SafeConsole", "quoted", "shown"]


def shown(text: str | None, *, multiline: bool = False, style: str = "") -> Text:
    """``text`` (an agent's, a record's, a repository's) as a ``Text``: escaped, never markup."""
    return Text(printable(text or "", multiline=multiline), style=style)


def quoted(text: str | None, *, multiline: bool = False) -> str:
    """``text`` escaped for a Rich markup string (``f"[red]{quoted(error)}[/]"``)."""
    return escape(printable(text or "", multiline=multiline))


class SafeConsole(Console):
    """A ``Console`` that writes no control or format character it was given as text.

    Newlines and tabs stay (Rich lays text out with them); every other
    non-printable character of a non-control segment is written as its
    Python escape (``\\x1b``, ``\\u202e``). See the module docstring for why
    Rich's own escape codes are untouched.
    """

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment
            if segment.control or segment.text.isprintable()
            else Segment(printable(segment.text, multiline=True), segment.style, None)
            for segment in buffer
        )
