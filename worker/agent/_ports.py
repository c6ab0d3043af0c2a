"""The agent loop's view of the world: small interfaces it is given, never imports.

In a worker these cross the pipe to the supervisor; in the root session they
are the real thing. That keeps one loop for both, testable without processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from pydantic import BaseModel

from protocol import EventSpec, ModelRequest, ModelResult, PermissionVerdict, ToolCall, ToolSpec

from ..tools import ToolOutput

__all__ = ["ApprovalPort", "EventSink", "ModelPort", "ToolPort"]

D = TypeVar("D", bound=BaseModel)


class ModelPort(Protocol):
    """Makes one model call."""

    async def call(self, request: ModelRequest) -> ModelResult:
        """Answer ``request``; raise on provider errors."""
        ...


class ToolPort(Protocol):
    """The tools an agent may call."""

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """The tools as offered to the model."""
        ...

    def is_concurrency_safe(self, name: str) -> bool:
        """True when calls of ``name`` may run at the same time as other safe calls."""
        ...

    def reserve(self, calls: Sequence[ToolCall]) -> None:
        """Before ``calls`` start at once: let what queues take its place in call order."""
        ...

    def release(self, calls: Sequence[ToolCall]) -> None:
        """After those calls: give up any place a call left unused."""
        ...

    async def call(self, call: ToolCall) -> ToolOutput:
        """Run one tool call; failures are results with ``is_error``, not exceptions."""
        ...


class EventSink(Protocol):
    """Receives what the agent does, for transcripts and live views."""

    async def emit(self, event: EventSpec[D], data: D) -> None:
        """Record one event of ``protocol.WORKER_EVENTS``."""
        ...


class ApprovalPort(Protocol):
    """Decides whether a tool call may run (permission rules, approvals)."""

    async def authorize(self, call: ToolCall) -> PermissionVerdict:
        """Whether the call may run, why not, and which files a search must skip."""
        ...
