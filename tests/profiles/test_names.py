"""Matching a model's ``subagent_type`` to a profile name (S-TOOL-2)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from supervisor.profiles._names import (
    AmbiguousAgentTypeError,
    SubagentTypeError,
    UnknownAgentTypeError,
    normalize_agent_name,
    resolve_agent_name,
)

# Characters whose case round-trips (unlike "ß" -> "SS"), with the separators
# the normaliser ignores and the ":" of plugin names.
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789éÉ:-_ "
_names = st.text(alphabet=_NAME_CHARS, min_size=1, max_size=12).filter(
    lambda name: normalize_agent_name(name) != ""
)
_SEPARATORS = (" ", "-", "_", "\t", "\u3000")  # \u3000: ideographic space


def _fullwidth(char: str) -> str:
    """The fullwidth form of a printable ASCII character; NFKC maps it back."""
    return chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char


@st.composite
def _variants(draw: st.DrawFn, name: str) -> str:
    """``name`` with random case changes, fullwidth forms and separators inserted."""
    out: list[str] = []
    for char in name:
        if draw(st.booleans()):
            out.append(draw(st.sampled_from(_SEPARATORS)))
        changed = draw(st.sampled_from((char, char.upper(), char.lower())))
        if draw(st.booleans()):
            changed = "".join(_fullwidth(c) for c in changed)
        out.append(changed)
    if draw(st.booleans()):
        out.append(draw(st.sampled_from(_SEPARATORS)))
    return "".join(out)


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("general-purpose", "generalpurpose"),
        ("General Purpose", "generalpurpose"),
        ("general_purpose", "generalpurpose"),
        ("  EXPLORE\n", "explore"),
        ("\uff25\uff58\uff50\uff4c\uff4f\uff52\uff45", "explore"),  # fullwidth "Explore"
        ("general\uff0dpurpose", "generalpurpose"),  # fullwidth hyphen
        ("my-plugin:Reviewer", "myplugin:reviewer"),
    ],
)
def test_normalize_agent_name(raw: str, normalized: str) -> None:
    """S-TOOL-2: NFKC, lower-case, no whitespace, ``-`` or ``_``."""
    assert normalize_agent_name(raw) == normalized


@given(data=st.data(), available=st.lists(_names, min_size=1, max_size=6, unique=True))
def test_a_name_that_normalises_to_one_profile_resolves_to_it(
    data: st.DataObject, available: list[str]
) -> None:
    """S-TOOL-2: a single normalised hit resolves to the canonical name."""
    target = data.draw(st.sampled_from(available))
    others = [name for name in available if name != target]
    assume(all(normalize_agent_name(o) != normalize_agent_name(target) for o in others))
    requested = data.draw(_variants(target))
    assert resolve_agent_name(requested, available) == target


@given(name=_names, data=st.data())
def test_exact_match_wins_over_normalised_collisions(name: str, data: st.DataObject) -> None:
    """S-TOOL-2: exact first, even when other names normalise the same."""
    twin = data.draw(_variants(name))
    assume(twin != name)
    available = data.draw(st.permutations([name, twin]))
    assert resolve_agent_name(name, available) == name
    assert resolve_agent_name(twin, available) == twin


@given(name=_names, data=st.data())
def test_ambiguity_reports_every_candidate(name: str, data: st.DataObject) -> None:
    """S-TOOL-2: several normalised hits are an error naming all of them, sorted."""
    candidates = data.draw(st.lists(_variants(name), min_size=2, max_size=4, unique=True))
    requested = data.draw(_variants(name))
    assume(requested not in candidates)
    assume(normalize_agent_name(name) != normalize_agent_name("unrelated-0"))
    with pytest.raises(AmbiguousAgentTypeError) as caught:
        resolve_agent_name(requested, [*candidates, "unrelated-0"])
    assert str(caught.value) == (
        f"ambiguous subagent_type {requested}: matches {', '.join(sorted(candidates))}"
    )
    assert caught.value.candidates == tuple(sorted(candidates))


def test_ambiguity_message_is_exact() -> None:
    """S-TOOL-2: the message a model sees for an ambiguous name."""
    with pytest.raises(AmbiguousAgentTypeError) as caught:
        resolve_agent_name("code reviewer", ["code_reviewer", "Code-Reviewer", "Explore"])
    assert str(caught.value) == (
        "ambiguous subagent_type code reviewer: matches Code-Reviewer, code_reviewer"
    )


def test_unknown_name_lists_the_available_ones_sorted() -> None:
    """S-TOOL-2: no hit is an error listing what is available and what to do."""
    with pytest.raises(UnknownAgentTypeError) as caught:
        resolve_agent_name("planner", ["general-purpose", "Explore", "reviewer"])
    message = str(caught.value)
    assert "'planner'" in message
    assert "Explore, general-purpose, reviewer" in message
    assert "subagent_type" in message
    assert caught.value.available == ("Explore", "general-purpose", "reviewer")
    assert caught.value.requested == "planner"


def test_unknown_name_with_nothing_available_says_so() -> None:
    with pytest.raises(UnknownAgentTypeError, match="No agent types are available"):
        resolve_agent_name("Explore", [])


def test_separators_alone_match_nothing() -> None:
    """A request that normalises to nothing is unknown, not a match for everything."""
    with pytest.raises(UnknownAgentTypeError):
        resolve_agent_name(" -_ ", ["Explore", "general-purpose"])


def test_errors_are_value_errors() -> None:
    """Callers may catch both kinds as one ``ValueError``."""
    assert issubclass(AmbiguousAgentTypeError, SubagentTypeError)
    assert issubclass(UnknownAgentTypeError, SubagentTypeError)
    assert issubclass(SubagentTypeError, ValueError)


def test_duplicate_available_names_are_not_ambiguous() -> None:
    """The same name listed twice (e.g. a profile and its alias entry) is one match."""
    assert resolve_agent_name("explore", ["Explore", "Explore"]) == "Explore"
