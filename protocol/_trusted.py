"""Building a message from values that are already valid, without validating them again.

The hot paths build a message around a model that was validated when it was
built (a request's params, an event's data, a command's result) and an id
that is the connection's own or a validated request's. Running the
message's validator again would check nothing new; ``trusted`` does what
``model_construct`` does, without its per-call walk over the model's fields.

Invariants: ``fields`` names every field of the model, in the model's order
and with its defaults filled in (the type tag included), so the message
packs to the bytes ``model_dump`` would give; ``fields_set`` names those the
caller gave. Only this package's specs and ``Response.answering`` call it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["trusted"]

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__


def trusted(cls: type[M], fields: dict[str, Any], fields_set: frozenset[str]) -> M:
    """An instance of ``cls`` holding ``fields``, which are not validated again."""
    message = _new(cls)
    _set(message, "__dict__", fields)
    _set(message, "__pydantic_fields_set__", set(fields_set))
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    return message
