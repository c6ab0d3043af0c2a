"""Model strings (S-PROF-6): ``provider:model`` or ``provider/model``, optional ``$effort``.

The provider is everything before the first ``:`` or ``/``; the rest, up to an
optional single ``$``, is the model, kept whole (so ``scripted:/tmp/a:b.yaml``
and ``openai:llama3.1:8b`` keep their paths and tags). ``inherit``, ``main``,
``sonnet``, ``opus`` and ``haiku`` (any case) mean "inherit the parent's model"
and parse to ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._errors import ModelStringError

__all__ = ["INHERIT_ALIASES", "ModelSpec", "parse_model_string"]

#: Model strings that mean "use the parent's model" (S-PROF-6).
INHERIT_ALIASES: frozenset[str] = frozenset({"inherit", "main", "sonnet", "opus", "haiku"})

_PROVIDER = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_EFFORT = re.compile(r"[A-Za-z0-9_-]+")
_EXAMPLE = "write provider:model, e.g. openai:gpt-4o"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model string: provider name (lower case), model, optional effort."""

    provider: str
    model: str
    effort: str | None = None

    def __str__(self) -> str:
        suffix = f"${self.effort}" if self.effort is not None else ""
        return f"{self.provider}:{self.model}{suffix}"


def parse_model_string(text: str) -> ModelSpec | None:
    """Parse a model string; ``None`` means the caller must inherit its parent's model.

    Raises ``ModelStringError`` with a message saying how to write it when
    ``text`` is malformed.
    """
    if not isinstance(text, str):
        raise ModelStringError(
            f"model string must be text, got {type(text).__name__} {text!r}: {_EXAMPLE}"
        )
    stripped = text.strip()
    if not stripped:
        raise ModelStringError(f"model string is empty: {_EXAMPLE}, or inherit")
    if stripped.lower() in INHERIT_ALIASES:
        return None
    cut = min((i for i in (stripped.find(":"), stripped.find("/")) if i >= 0), default=-1)
    if cut <= 0:
        raise ModelStringError(
            f"model string {text!r} has no provider part: {_EXAMPLE}{_suggestion(stripped)}"
        )
    provider, rest = stripped[:cut], stripped[cut + 1 :]
    if not _PROVIDER.fullmatch(provider):
        raise ModelStringError(
            f"model string {text!r} has no provider part ({provider!r} is not a provider "
            f"name: letters, digits, '-' and '_', starting with a letter): {_EXAMPLE}"
        )
    model, dollar, effort_text = rest.partition("$")
    model = model.strip()
    if not model:
        raise ModelStringError(
            f"model string {text!r} has no model part after {provider!r}: {_EXAMPLE}"
        )
    effort: str | None = None
    if dollar:
        effort = effort_text.strip()
        if not _EFFORT.fullmatch(effort):
            raise ModelStringError(
                f"model string {text!r} has a malformed effort suffix {effort_text!r}: "
                "write one word after a single '$', e.g. openai:o3$high"
            )
        effort = effort.lower()
    return ModelSpec(provider=provider.lower(), model=model, effort=effort)


def _suggestion(model: str) -> str:
    lowered = model.lower()
    if lowered.startswith("claude"):
        return f" (did you mean 'anthropic:{model}'?)"
    if lowered.startswith(("gpt", "o1", "o3", "o4")):
        return f" (did you mean 'openai:{model}'?)"
    return ""
