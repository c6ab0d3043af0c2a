"""``RequestSpec``: one method of a request table, shared by both directions.

``protocol._methods`` (worker -> supervisor) and ``protocol._commands``
(supervisor -> worker) each narrow it to their own request class; the logic
of building a request and checking its answer is this one.

Invariant: a spec's ``name`` is its request class's ``method`` literal, so
a table cannot name a method under one name and send it under another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ._trusted import trusted

__all__ = ["RequestSpec"]

Q = TypeVar("Q", bound=BaseModel)
P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)

_REQUEST_FIELDS_SET = frozenset({"id", "method", "params"})


@dataclass(frozen=True, slots=True)
class RequestSpec(Generic[Q, P, R]):
    """One method of a table: its name, request class, params and result models."""

    name: str
    request: type[Q]
    params: type[P]
    result: type[R]
    _validate_result: Callable[[Any], R] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        method = self.request.model_fields["method"].default
        if method != self.name:
            raise ValueError(f"spec {self.name!r} names request class of method {method!r}")
        object.__setattr__(
            self, "_validate_result", self.result.__pydantic_validator__.validate_python
        )

    def request_for(self, request_id: int, params: P) -> Q:
        """The request message asking this method with ``params`` (validated when built).

        ``request_id`` is the connection's (``Connection.next_request_id``).
        """
        if type(params) is not self.params:
            raise TypeError(
                f"{self.name} takes {self.params.__name__}, not {type(params).__name__}"
            )
        fields = {"type": "request", "id": request_id, "method": self.name, "params": params}
        return trusted(self.request, fields, _REQUEST_FIELDS_SET)

    def parse_result(self, raw: object) -> R:
        """Validate what the peer answered (raises pydantic's ``ValidationError``)."""
        return self._validate_result(raw)
