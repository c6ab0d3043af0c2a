"""Matching the ``subagent_type`` a model wrote to a profile name (S-TOOL-2).

Models misspell names in harmless ways (``explore``, ``General Purpose``,
``general_purpose``, fullwidth letters), so after an exact match fails the
comparison ignores case, whitespace, ``-`` and ``_`` and Unicode
compatibility forms.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence

from ..kernel import SubvisorError

__all__ = [
    "AmbiguousAgentTypeError",
    "SubagentTypeError",
    "UnknownAgentTypeError",
    "normalize_agent_name",
    "resolve_agent_name",
]

_IGNORED = frozenset("-_")


class SubagentTypeError(SubvisorError, ValueError):
    """A ``subagent_type`` that names no single profile."""

    def __init__(self, message: str, requested: str) -> None:
        super().__init__(message)
        self.requested = requested


class AmbiguousAgentTypeError(SubagentTypeError):
    """Several profiles match the requested name once normalised."""

    def __init__(self, requested: str, candidates: Sequence[str]) -> None:
        self.candidates: tuple[str, ...] = tuple(sorted(candidates))
        super().__init__(
            f"ambiguous subagent_type {requested}: matches {', '.join(self.candidates)}",
            requested,
        )


class UnknownAgentTypeError(SubagentTypeError):
    """No profile matches the requested name."""

    def __init__(self, requested: str, available: Iterable[str]) -> None:
        self.available: tuple[str, ...] = tuple(sorted(set(available)))
        if self.available:
            advice = (
                f"Available agent types: {', '.join(self.available)}. "
                "Call the tool again with one of these as subagent_type."
            )
        else:
            advice = "No agent types are available, so no subagent can be launched."
        super().__init__(f"unknown subagent_type {requested!r}. {advice}", requested)


def normalize_agent_name(name: str) -> str:
    """``name`` after NFKC, lower-casing, and removing whitespace, ``-`` and ``_``."""
    folded = unicodedata.normalize("NFKC", name).lower()
    return "".join(char for char in folded if not char.isspace() and char not in _IGNORED)


def resolve_agent_name(requested: str, available: Iterable[str]) -> str:
    """The canonical name among ``available`` that ``requested`` means (S-TOOL-2).

    An exact match wins; otherwise the one name whose normalised form equals
    the request's. Raises :class:`AmbiguousAgentTypeError` when several
    match, :class:`UnknownAgentTypeError` when none does.
    """
    names = tuple(dict.fromkeys(available))
    if requested in names:
        return requested
    wanted = normalize_agent_name(requested)
    matches = [name for name in names if normalize_agent_name(name) == wanted]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AmbiguousAgentTypeError(requested, matches)
    raise UnknownAgentTypeError(requested, names)
