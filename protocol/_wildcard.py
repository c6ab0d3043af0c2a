"""The wildcards of permission rules, as opencode's ``Wildcard.match`` (S-POL-2).

Here, not in ``supervisor``, because both sides match them: the supervisor against each
call's subjects, and a worker's Grep and Glob against each file they find, with the ``read``
rules a permission verdict carries (:class:`ReadRule`). One matcher, one meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["wildcard_match"]


@dataclass(frozen=True, slots=True)
class _Piece:
    """What a pattern holds between two ``*``: literal text, each ``?`` any one character."""

    text: str
    #: For a piece with ``?``: a regex of exactly ``len(text)`` characters.
    regex: re.Pattern[str] | None

    @classmethod
    def of(cls, text: str) -> _Piece:
        if "?" not in text:
            return cls(text, None)
        body = "".join("." if char == "?" else re.escape(char) for char in text)
        return cls(text, re.compile(body, re.DOTALL))

    def at(self, text: str, start: int) -> bool:
        if self.regex is None:
            return text.startswith(self.text, start)
        return self.regex.match(text, start) is not None

    def find(self, text: str, start: int, end: int) -> int:
        if self.regex is None:
            return text.find(self.text, start, end)
        found = self.regex.search(text, start, end)
        return -1 if found is None else found.start()


@lru_cache(maxsize=4096)
def _wildcard_pieces(pattern: str) -> tuple[tuple[_Piece, ...], ...]:
    """The pieces of each form ``pattern`` may take; a trailing ``" *"`` gives two forms."""
    pattern = pattern.replace("\\", "/")
    forms = [pattern]
    if pattern.endswith(" *"):
        # opencode: a trailing " *" also matches nothing at all, so "git *" covers "git".
        forms.append(pattern[:-2])
    return tuple(tuple(_Piece.of(part) for part in form.split("*")) for form in forms)


def _pieces_match(pieces: tuple[_Piece, ...], text: str) -> bool:
    """Whether ``text`` is the pieces in order with anything between them (no backtracking).

    Every piece has a fixed length, so taking each middle piece at its first
    place after the one before leaves the most room for the rest: one pass,
    linear in ``text`` for a given pattern (a regex of ``.*`` runs
    backtracks: ``*a*b*c*`` took cubic time in the length of a subject).
    """
    first, last = pieces[0], pieces[-1]
    if len(pieces) == 1:
        return len(text) == len(first.text) and first.at(text, 0)
    tail = len(text) - len(last.text)
    if tail < len(first.text) or not first.at(text, 0) or not last.at(text, tail):
        return False
    position = len(first.text)
    for piece in pieces[1:-1]:
        found = piece.find(text, position, tail)
        if found < 0:
            return False
        position = found + len(piece.text)
    return True


def wildcard_match(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches the whole of ``text``, as opencode's ``Wildcard.match``.

    ``*`` matches any run of characters, ``/`` and newlines included (it is
    not a path glob: ``src/*`` matches ``src/a/b.py``); ``?`` matches exactly
    one character; everything else is literal, with no escape syntax. Both
    sides have ``\\`` turned into ``/`` first. A pattern ending in ``" *"``
    also matches without that tail: ``git *`` matches ``git``, ``git status``,
    but not ``gitk``. Case-sensitive (opencode ignores case only on Windows).
    Time linear in ``text`` for a given pattern, whatever either holds.
    """
    text = text.replace("\\", "/")
    return any(_pieces_match(pieces, text) for pieces in _wildcard_pieces(pattern))
