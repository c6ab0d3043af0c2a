"""What every workflow script is made of, wherever it runs: ``@workflow``, its context, its inputs.

Both engines use this module: the supervisor's (``subvisor workflow run``,
a script the user runs) and the script worker's (a script the root model
wrote, run sandboxed). Errors are ``ScriptError`` with a message that says
what to fix; each engine reports them its own way.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar, overload

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

__all__ = [
    "ScriptError",
    "Workflow",
    "WorkflowContext",
    "bind_inputs",
    "describe_errors",
    "dump_value",
    "find_workflow",
    "strip_fence",
    "workflow",
]

R = TypeVar("R")

_FENCED = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```$", re.S)


class ScriptError(ValueError):
    """The script cannot be run as written: no ``@workflow``, inputs that do not bind."""


class Workflow(Generic[R]):
    """An ``async def`` decorated with ``@workflow``; an engine runs it."""

    def __init__(self, fn: Callable[..., Awaitable[R]], *, model: str | None = None) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@workflow needs an async def, not {fn!r}")
        if not inspect.signature(fn).parameters:
            raise TypeError(f"@workflow {fn.__name__}() must take the run's context first: (ctx)")
        self.fn = fn
        self.name = fn.__name__
        #: The workflow's own model: its actors' default (the parent's model, S-ACT-5).
        self.model = model
        self.__doc__ = fn.__doc__


@overload
def workflow(fn: Callable[..., Awaitable[R]], /) -> Workflow[R]: ...


@overload
def workflow(
    *, model: str | None = None
) -> Callable[[Callable[..., Awaitable[R]]], Workflow[R]]: ...


def workflow(
    fn: Callable[..., Awaitable[R]] | None = None, /, *, model: str | None = None
) -> Workflow[R] | Callable[[Callable[..., Awaitable[R]]], Workflow[R]]:
    """Mark ``async def name(ctx, **inputs)`` as a workflow; ``model`` is its default model."""
    if fn is not None:
        return Workflow(fn, model=model)

    def decorate(inner: Callable[..., Awaitable[R]]) -> Workflow[R]:
        return Workflow(inner, model=model)

    return decorate


@dataclass(frozen=True, slots=True)
class WorkflowContext:
    """What a workflow function gets first: which run this is, and where it works."""

    run_id: str
    cwd: Path
    #: The model its actors inherit (the workflow's, else the configured one).
    model: str
    inputs: Mapping[str, Any]
    #: The run this one amends, if any.
    amends: str | None = None


def find_workflow(module: ModuleType) -> Workflow[Any]:
    """The one ``@workflow`` function defined in ``module``; ``ScriptError`` otherwise."""
    found = [
        value
        for value in vars(module).values()
        if isinstance(value, Workflow) and value.fn.__module__ == module.__name__
    ]
    if len(found) != 1:
        names = ", ".join(w.name for w in found)
        raise ScriptError(
            "a workflow script defines exactly one @workflow async function; "
            + (f"this one defines {len(found)} ({names})" if found else "this one defines none")
        )
    return found[0]


def bind_inputs(flow: Workflow[Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` as keyword arguments of ``flow``: strings parsed into annotated types."""
    try:
        signature = inspect.signature(flow.fn, eval_str=True)
    except (NameError, SyntaxError):
        signature = inspect.signature(flow.fn)
    parameters = list(signature.parameters.values())[1:]
    known = {p.name for p in parameters}
    unknown = sorted(set(inputs) - known)
    described = ", ".join(
        p.name + ("" if p.default is inspect.Parameter.empty else "=...") for p in parameters
    )
    if unknown:
        raise ScriptError(
            f"{flow.name}() takes no input {', '.join(map(repr, unknown))}; "
            f"its inputs are: {described or '(none)'}"
        )
    bound: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name not in inputs:
            if parameter.default is inspect.Parameter.empty:
                raise ScriptError(
                    f"{flow.name}() needs the input {parameter.name!r}: pass "
                    f"--input {parameter.name}=VALUE (its inputs are: {described})"
                )
            continue
        value = inputs[parameter.name]
        annotation = parameter.annotation
        if isinstance(value, str) and annotation not in (inspect.Parameter.empty, str, Any):
            try:
                value = TypeAdapter(annotation).validate_strings(value)
            except ValidationError as exc:
                raise ScriptError(
                    f"input {parameter.name}={value!r} is not a valid "
                    f"{getattr(annotation, '__name__', annotation)}: {exc.errors()[0]['msg']}"
                ) from None
        bound[parameter.name] = value
    return bound


def strip_fence(text: str) -> str:
    """An answer without the ```json fence models put around JSON whatever they are told."""
    body = text.strip()
    fenced = _FENCED.match(body)
    return fenced.group(1).strip() if fenced else body


def describe_errors(exc: ValidationError) -> str:
    """``field: message; ...`` for each error (what a correction round tells the actor)."""
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
