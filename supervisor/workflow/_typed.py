"""Typed asks: the answer is JSON validated into the schema the script asked for.

The ask's prompt gets the JSON schema and the instruction to answer with
JSON only. An answer that does not validate gets one correction round (the
validation error is put to the actor); a second failure fails the ask.
A fenced block (```json ... ```) is accepted around the JSON, since models
add one whatever they are told.

A script run in the supervisor (``subvisor workflow run``, the user's)
hands its type (``AnswerSchema``), validated here with pydantic. A script
run in a worker (one the root model wrote: untrusted) sends its type's JSON
schema and the id of its ask (``ScriptAnswerSchema``): the schema is only
text here, told to the actor and hashed, never evaluated; whether an answer
fits is asked of the script's worker (``workflow.check_answer``), which
validates it against the script's own type. A schema's cost (a ``pattern``
that backtracks exponentially, a ``$ref`` cycle) so falls on the script's
worker, never on the supervisor's event loop (S-SEC-8), and a script that
lies about its answers fools only itself. Both say the same to the actor,
and hash the same.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

from worker.workflow import describe_errors, dump_value, strip_fence

__all__ = [
    "MAX_SCHEMA_CHARS",
    "AnswerSchema",
    "AskSchema",
    "ScriptAnswerSchema",
    "describe_errors",
    "dump_value",
]

T = TypeVar("T")

#: The longest JSON schema a script's typed ask may send (it is put in the prompt).
MAX_SCHEMA_CHARS = 256 << 10


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

    async def check(self, text: str) -> Any:
        """Validate a fresh answer; raises ``ValueError`` with a readable message."""
        raise NotImplementedError

    def replayed(self, text: str) -> Any:
        """The value of an answer replayed from the journal (validated when first given)."""
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

    async def check(self, text: str) -> T:
        """``parse``: the user's own type, checked here."""
        return self.parse(text)

    def replayed(self, text: str) -> T:
        """``parse`` again: the value is the type's, not the text."""
        return self.parse(text)


#: Asks the script's worker what is wrong with an answer (None: nothing).
AnswerChecker = Callable[[str], Awaitable[str | None]]


class ScriptAnswerSchema(AskSchema):
    """A typed ask of a script in a worker: its type's name and JSON schema, and its checker.

    ``check`` returns the answer's text once the script's worker says it
    fits; the script parses that into its type. A schema that cannot be
    written as JSON, or is longer than ``MAX_SCHEMA_CHARS``, raises
    ``ValueError`` here, before the actor is asked.
    """

    def __init__(self, name: str, schema: dict[str, Any], checker: AnswerChecker) -> None:
        try:
            text = json.dumps(schema, sort_keys=True)
        except (RecursionError, TypeError, ValueError):
            raise ValueError(
                f"the JSON schema of {name} cannot be written as JSON (nested too deep?)"
            ) from None
        if len(text) > MAX_SCHEMA_CHARS:
            raise ValueError(
                f"the JSON schema of {name} is {len(text)} characters, more than the "
                f"{MAX_SCHEMA_CHARS} a typed ask may send; ask for a smaller type"
            )
        self.name = name
        self.json_schema = text
        self._checker = checker

    async def check(self, text: str) -> str:
        """The answer's text, once the script's worker says it fits its type."""
        problem = await self._checker(text)
        if problem is not None:
            raise ValueError(problem)
        return text

    def replayed(self, text: str) -> str:
        """The text: the script parses it, as it parses a fresh answer."""
        return text
