"""The control channel's requests, one model per op (``supervisor.cli._control``).

A request is one JSON object whose ``op`` picks its model; the server
validates every line against ``CONTROL_REQUEST`` before it acts, and the one
client (``_control_client.control_request``) sends only these models. A bad
request becomes one line that names the op and the field: ``parse_request``
never raises anything else.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..kernel import SubvisorError
from ..state._store import MAX_PAGE_SIZE

__all__ = [
    "CONTROL_OPS",
    "CONTROL_REQUEST",
    "BackgroundOp",
    "ControlOp",
    "ControlRequest",
    "ControlRequestError",
    "FollowOp",
    "ListOp",
    "SessionOp",
    "StopOp",
    "SubscribeOp",
    "TaskOp",
    "TasksOp",
    "TranscriptOp",
    "parse_request",
]

#: Every op the channel answers.
ControlOp = Literal[
    "session", "list", "tasks", "task", "transcript", "subscribe", "follow", "stop", "background"
]
CONTROL_OPS: tuple[ControlOp, ...] = get_args(ControlOp)

#: How many subagents a ``list`` page shows unless asked.
DEFAULT_PAGE_SIZE = 20

#: The last ``list`` page one may ask for: its rows' offset stays a 64-bit integer,
#: as SQLite needs, at every page size.
MAX_PAGE = (2**63 - 1) // MAX_PAGE_SIZE


class ControlRequestError(SubvisorError, ValueError):
    """A request the channel cannot answer; ``code`` says what kind of mistake it was."""

    def __init__(self, message: str, code: str = "bad_request") -> None:
        super().__init__(message)
        self.code = code


class _Op(BaseModel):
    # Strict: "2" is not a page number; an unknown key is a typo worth naming.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class SessionOp(_Op):
    """The session: status, counts, usage roll-up."""

    op: Literal["session"] = "session"


class ListOp(_Op):
    """One page of the session's subagents, finished ones too (S-OBS-1)."""

    op: Literal["list"] = "list"
    page: int = Field(default=1, ge=1, le=MAX_PAGE)
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)


class TasksOp(_Op):
    """Every task record of the session (``subvisor ps``)."""

    op: Literal["tasks"] = "tasks"


class TaskOp(_Op):
    """One task, by id or unique id prefix."""

    op: Literal["task"] = "task"
    task_id: str = Field(min_length=1)


class TranscriptOp(_Op):
    """A child's messages with ``seq > after_seq`` (read-only, incremental; S-OBS-2)."""

    op: Literal["transcript"] = "transcript"
    task_id: str = Field(min_length=1)
    after_seq: int = Field(default=0, ge=0, le=2**62)
    limit: int = Field(default=200, ge=1, le=1000)


class SubscribeOp(_Op):
    """Lifecycle events, one line each, until either end closes."""

    op: Literal["subscribe"] = "subscribe"


class FollowOp(_Op):
    """One task's transcript, then its new messages and streamed text until it ends
    (``subvisor logs -f``); the connection's last request."""

    op: Literal["follow"] = "follow"
    task_id: str = Field(min_length=1)


class StopOp(_Op):
    """Stop a task."""

    op: Literal["stop"] = "stop"
    task_id: str = Field(min_length=1)


class BackgroundOp(_Op):
    """Move a running foreground agent to the background (S-RUN-5)."""

    op: Literal["background"] = "background"
    task_id: str = Field(min_length=1)


ControlRequest = Annotated[
    SessionOp
    | ListOp
    | TasksOp
    | TaskOp
    | TranscriptOp
    | SubscribeOp
    | FollowOp
    | StopOp
    | BackgroundOp,
    Field(discriminator="op"),
]
CONTROL_REQUEST: TypeAdapter[ControlRequest] = TypeAdapter(ControlRequest)


def parse_request(line: bytes) -> ControlRequest:
    """The request on one line; ``ControlRequestError`` saying what to send instead."""
    try:
        return _parse(line)
    except RecursionError:
        # Nested deeper than Python parses or prints; a line under the length cap can be.
        raise ControlRequestError(
            'request nested too deeply: send one flat JSON object per line, such as {"op": "list"}'
        ) from None


def _parse(line: bytes) -> ControlRequest:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise ControlRequestError(
            f'malformed request ({exc}): send one JSON object per line, such as {{"op": "list"}}'
        ) from None
    if not isinstance(raw, dict):
        raise ControlRequestError(
            f'a request is a JSON object such as {{"op": "list"}}, not {type(raw).__name__}'
        )
    op = raw.get("op")
    if op not in CONTROL_OPS:
        what = "request has no 'op'" if op is None else f"unknown op {op!r}"
        raise ControlRequestError(f"{what}; known ops: {', '.join(CONTROL_OPS)}", "unknown_op")
    try:
        return CONTROL_REQUEST.validate_python(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"][1:]) or "request"
        value = f", not {error['input']!r}" if error["type"] != "missing" else ""
        raise ControlRequestError(f"{op}: {field}: {error['msg']}{value}") from None
