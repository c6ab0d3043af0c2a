"""Which model an actor runs on (S-ACT-5): omitted means inherit, explicit means replace.

=========  ===========  ===================  =================================
run model  declared     journal pin          actor model (source)
=========  ===========  ===================  =================================
given      any          any                  the run model (``run``)
-          given        any                  the declared model (``declared``)
-          -            -                    the parent's model (``parent``)
-          -            = parent's model     the parent's model (``parent``)
-          -            other model          the pin (``pin``)
-          -            no provider part     ``WorkflowActorPinnedModelError``
=========  ===========  ===================  =================================

The run model is ``--model`` (the user's word for this one run); declared is
``agent(..., model=...)`` in the script; the pin is the model the actor last
ran on, from the journal of the run being amended; the parent's model is the
workflow's own (``@workflow(model=...)``, else the configured model). An
inherit alias (``inherit``, ``main``, ``sonnet``...) as run or declared model
means "not given". Model strings are compared parsed, so ``OpenAI:gpt-4o``
and ``openai/gpt-4o`` are the same model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..providers import ModelStringError, parse_model_string
from ._errors import WorkflowActorPinnedModelError

__all__ = ["ActorModel", "ModelSource", "canonical_model", "resolve_actor_model"]

ModelSource = Literal["run", "declared", "pin", "parent"]


@dataclass(frozen=True, slots=True)
class ActorModel:
    """The model an actor runs on, and which row of the table chose it."""

    model: str
    source: ModelSource


def resolve_actor_model(
    actor: str,
    *,
    run_model: str | None,
    declared: str | None,
    pin: str | None,
    parent_model: str,
) -> ActorModel:
    """Apply the S-ACT-5 table; ``actor`` names the actor in an error."""
    if _given(run_model):
        assert run_model is not None
        return ActorModel(run_model.strip(), "run")
    if _given(declared):
        assert declared is not None
        return ActorModel(declared.strip(), "declared")
    if pin is None:
        return ActorModel(parent_model, "parent")
    try:
        pinned = parse_model_string(pin)
    except ModelStringError as exc:
        raise WorkflowActorPinnedModelError(actor, pin, str(exc)) from None
    if pinned is None:
        # An inherit alias names no provider: it cannot say which model ran.
        raise WorkflowActorPinnedModelError(actor, pin)
    if str(pinned) == canonical_model(parent_model):
        return ActorModel(parent_model, "parent")
    return ActorModel(pin, "pin")


def _given(model: str | None) -> bool:
    if model is None or not model.strip():
        return False
    try:
        return parse_model_string(model) is not None
    except ModelStringError:
        # Malformed but explicit: it is the caller's choice, and the gateway
        # refuses it with its own message when the actor starts.
        return True


def canonical_model(model: str) -> str:
    """``model`` as the gateway parses it (``OpenAI:gpt-4o`` is ``openai:gpt-4o``)."""
    try:
        spec = parse_model_string(model)
    except ModelStringError:
        return model.strip()
    return str(spec) if spec is not None else model.strip()
