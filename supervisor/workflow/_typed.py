"""Typed asks: the answer is JSON validated into the schema the script asked for.

The ask's prompt gets the JSON schema and the instruction to answer with
JSON only. An answer that does not validate gets one correction round (the
validation error is put to the actor); a second failure fails the ask.
A fenced block (```json ... ```) is accepted around the JSON, since models
add one whatever they are told.
"""

from __future__ import annotations

import json
import re
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

__all__ = ["AnswerSchema", "describe_errors", "dump_value"]

T = TypeVar("T")

_FENCED = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```$", re.S)


class AnswerSchema(Generic[T]):
    """The declared type of a typed ask, with its prompt text and its validator."""

    def __init__(self, schema: type[T]) -> None:
        self.name = getattr(schema, "__name__", repr(schema))
        self._adapter: TypeAdapter[T] = TypeAdapter(schema)
        self.json_schema = json.dumps(self._adapter.json_schema(), sort_keys=True)

    def instructions(self) -> str:
        """What is appended to the ask's prompt."""
        return (
            "Answer with a single JSON value that matches this JSON schema, and nothing else "
            f"(no prose before or after it):\n{self.json_schema}"
        )

    def correction(self, error: str) -> str:
        """The follow-up ask after an answer that did not validate."""
        return (
            f"Your answer does not match the JSON schema: {error}\n"
            "Answer again with only the corrected JSON value."
        )

    def parse(self, text: str) -> T:
        """Validate an answer; raises ``ValueError`` with a readable message."""
        body = text.strip()
        fenced = _FENCED.match(body)
        if fenced:
            body = fenced.group(1).strip()
        try:
            return self._adapter.validate_json(body)
        except ValidationError as exc:
            raise ValueError(describe_errors(exc)) from None


def describe_errors(exc: ValidationError) -> str:
    """``field: message; ...`` for each error, with the input when JSON was invalid."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "answer"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def dump_value(value: Any) -> Any:
    """A JSON-ready form of a workflow's return value (pydantic models included)."""
    try:
        return TypeAdapter(Any).dump_python(value, mode="json")
    except PydanticSerializationError:
        return repr(value)
