"""Typed asks: the answer is JSON validated into the schema the script asked for.

The ask's prompt gets the JSON schema and the instruction to answer with
JSON only. An answer that does not validate gets one correction round (the
validation error is put to the actor); a second failure fails the ask.
A fenced block (```json ... ```) is accepted around the JSON, since models
add one whatever they are told.

A script run in the supervisor hands its type (``AnswerSchema``); a script
run in a worker can only send the type's JSON schema (``JsonAnswerSchema``),
which is checked here with ``jsonschema``; the script then parses the JSON
into its type. Both say the same to the actor, and hash the same.
"""

from __future__ import annotations

import json
from typing import Any, Generic, TypeVar

import jsonschema
from pydantic import TypeAdapter, ValidationError

from worker.workflow import dump_value, strip_fence

__all__ = ["AnswerSchema", "AskSchema", "JsonAnswerSchema", "describe_errors", "dump_value"]

T = TypeVar("T")


class AskSchema:
    """What every typed ask tells the actor: the schema, and how to correct an answer."""

    name: str
    #: The JSON schema, as canonical JSON (what an ask's hash includes).
    json_schema: str

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

    def parse(self, text: str) -> Any:
        """Validate an answer; raises ``ValueError`` with a readable message."""
        raise NotImplementedError


class AnswerSchema(AskSchema, Generic[T]):
    """The declared type of a typed ask, with its prompt text and its validator."""

    def __init__(self, schema: type[T]) -> None:
        self.name = getattr(schema, "__name__", repr(schema))
        self._adapter: TypeAdapter[T] = TypeAdapter(schema)
        self.json_schema = json.dumps(self._adapter.json_schema(), sort_keys=True)

    def parse(self, text: str) -> T:
        """Validate an answer; raises ``ValueError`` with a readable message."""
        try:
            return self._adapter.validate_json(strip_fence(text))
        except ValidationError as exc:
            raise ValueError(describe_errors(exc)) from None


class JsonAnswerSchema(AskSchema):
    """A typed ask of a script in a worker: its type's name and JSON schema.

    ``parse`` returns the answer's JSON text once it fits the schema; the
    script parses that into its type. A schema that is not a valid JSON
    schema raises ``ValueError`` here, before the actor is asked.
    """

    def __init__(self, name: str, schema: dict[str, Any]) -> None:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(
                f"the schema of {name} is not a valid JSON schema: {exc.message}"
            ) from None
        self.name = name
        self._validator = jsonschema.Draft202012Validator(schema)
        self.json_schema = json.dumps(schema, sort_keys=True)

    def parse(self, text: str) -> str:
        """The answer's JSON, validated; raises ``ValueError`` with a readable message."""
        body = strip_fence(text)
        try:
            value = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"answer: Invalid JSON: {exc.msg}") from None
        problems = [
            f"{'.'.join(str(p) for p in error.absolute_path) or 'answer'}: {error.message}"
            for error in self._validator.iter_errors(value)
        ]
        if problems:
            raise ValueError("; ".join(problems[:5]))
        return body


def describe_errors(exc: ValidationError) -> str:
    """``field: message; ...`` for each error, with the input when JSON was invalid."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "answer"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)
