"""What every local tool is made of: its input model, context, output and spec."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

from protocol import ToolSpec

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "MIN_OUTPUT_BYTES",
    "LocalTool",
    "ToolContext",
    "ToolInput",
    "ToolOutput",
    "input_schema_of",
    "resolve_path",
]

DEFAULT_MAX_OUTPUT_BYTES = 30_000
# Below this a truncation marker and a useful head no longer both fit.
MIN_OUTPUT_BYTES = 1_024


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Where and under which limits a tool call runs.

    ``cwd`` resolves relative paths. ``max_output_bytes`` caps the UTF-8 size
    of the text the model gets back. ``on_process_group`` is called with the
    process group id of every command Bash starts, so that whoever owns the
    worker can kill leftovers (background ``&`` jobs) later. ``read_denied``
    tells Grep and Glob which absolute paths to skip: those a ``read`` deny of the agent's
    rules covers (S-POL-2), as the supervisor's verdict on the call says.
    """

    cwd: Path
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    on_process_group: Callable[[int], None] | None = None
    read_denied: Callable[[str], bool] | None = None

    def __post_init__(self) -> None:
        if not self.cwd.is_absolute():
            raise ValueError(f"ToolContext.cwd must be absolute, got {self.cwd}")
        if self.max_output_bytes < MIN_OUTPUT_BYTES:
            raise ValueError(f"ToolContext.max_output_bytes must be >= {MIN_OUTPUT_BYTES}")

    def hides(self, path: str) -> bool:
        """Whether a search must skip the absolute ``path``: ``read_denied`` covers it as
        written or its target with every link resolved, as the supervisor checks a Read.

        A policy over this honest worker's tools, not a boundary: a link swapped after this
        check is read, and only the sandbox holds a worker that lies.
        """
        if self.read_denied is None:
            return False
        written = os.path.normpath(path)
        return self.read_denied(written) or self.read_denied(os.path.realpath(written))


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """The result of one tool call as the model will read it."""

    text: str
    is_error: bool = False


class ToolInput(BaseModel):
    """Base of every tool's input model.

    Unknown parameters are rejected (the model learns the real names), and a
    parameter sent as ``null`` counts as omitted, as models often do that for
    optional parameters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_omitted(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


InputT = TypeVar("InputT", bound=ToolInput)


@dataclass(frozen=True, slots=True)
class LocalTool(Generic[InputT]):
    """A tool that runs inside the worker process.

    ``execute`` gets already validated input; :func:`worker.tools.run_tool`
    adds validation, error conversion and truncation, ending with
    ``truncation_hint`` (how the model can ask for less).
    """

    name: str
    description: str
    input_model: type[InputT]
    execute: Callable[[InputT, ToolContext], Awaitable[ToolOutput]]
    truncation_hint: str

    @property
    def spec(self) -> ToolSpec:
        """The tool as offered to the model."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=input_schema_of(self.input_model),
        )


def _clean_schema(node: Any) -> Any:
    """Drop pydantic's ``title`` and ``default: null`` noise from a schema node."""
    if isinstance(node, list):
        return [_clean_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    cleaned: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and value is None:
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            # Keys here are parameter names, which may well be "title".
            cleaned[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        else:
            cleaned[key] = _clean_schema(value)
    return cleaned


def input_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the model sees for ``model``, with parameter names by alias."""
    schema: dict[str, Any] = _clean_schema(model.model_json_schema(by_alias=True))
    # The input model's docstring is for programmers; the tool description
    # already tells the model what the tool does.
    schema.pop("description", None)
    return schema


def resolve_path(ctx: ToolContext, raw: str) -> Path:
    """``raw`` as an absolute, normalised path; relative paths start at ``ctx.cwd``."""
    path = Path(raw)
    # "~someone" with no such user stays literal.
    with contextlib.suppress(RuntimeError):
        path = path.expanduser()
    if not path.is_absolute():
        path = ctx.cwd / path
    return Path(os.path.normpath(path))
