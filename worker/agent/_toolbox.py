"""``Toolbox``: an agent's tools: the local ones plus any its host adds (Agent, MCP)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Protocol, TypeGuard

from protocol import ToolCall, ToolSpec

from ..tools import LocalToolSet, ToolContext, ToolOutput
from ._ports import ApprovalPort

__all__ = ["HostTool", "QueueingHostTool", "Toolbox"]

log = logging.getLogger("subvisor")

# Local tools that only read: several may run at once.
_CONCURRENCY_SAFE_LOCAL = frozenset({"Read", "Glob", "Grep", "LS"})


class HostTool(Protocol):
    """A tool implemented by the agent's host rather than by ``worker.tools``."""

    @property
    def spec(self) -> ToolSpec:
        """The tool as offered to the model."""
        ...

    @property
    def aliases(self) -> Sequence[str]:
        """Other names the model may call it by (never shown to the model)."""
        ...

    @property
    def concurrency_safe(self) -> bool:
        """True when it may run alongside other safe calls."""
        ...

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Run the call; failures are error results."""
        ...


class QueueingHostTool(Protocol):
    """A host tool whose calls queue for something (a worker slot) in call order.

    Concurrent calls start in no set order, so the toolbox lets such a tool
    take each call's place in line first, in the order the model made them.
    """

    def reserve(self, call: ToolCall) -> None:
        """Take ``call``'s place in line; the call itself comes later (or never)."""
        ...

    def release(self, call: ToolCall) -> None:
        """Give up ``call``'s place if it still holds one (the call ended or never ran)."""
        ...


def _queues(tool: HostTool) -> TypeGuard[QueueingHostTool]:
    # Not a runtime_checkable isinstance: in Python 3.11 that walks the
    # Protocol's members on every call (about 0.1 ms in a fresh worker).
    return callable(getattr(tool, "reserve", None)) and callable(getattr(tool, "release", None))


class Toolbox:
    """Dispatches tool calls to local tools or host tools by name."""

    def __init__(
        self,
        local: LocalToolSet,
        context: ToolContext,
        host_tools: Sequence[HostTool] = (),
        approvals: ApprovalPort | None = None,
    ) -> None:
        self._local = local
        self._approvals = approvals
        self._context = context
        self._host: dict[str, HostTool] = {}
        for tool in host_tools:
            for name in (tool.spec.name, *tool.aliases):
                self._host[name] = tool
        # A host tool may replace a local one of the same name (the root's
        # Bash adds run_in_background); the model sees it once.
        local_specs = (spec for spec in local.specs if spec.name not in self._host)
        self._specs = (*local_specs, *(tool.spec for tool in host_tools))
        self._queueing = {name: tool for name, tool in self._host.items() if _queues(tool)}

    @property
    def specs(self) -> Sequence[ToolSpec]:
        """Every tool offered to the model (aliases hidden)."""
        return self._specs

    @property
    def names(self) -> tuple[str, ...]:
        """The names offered to the model."""
        return tuple(spec.name for spec in self._specs)

    def is_concurrency_safe(self, name: str) -> bool:
        """Whether a call of ``name`` may overlap other safe calls."""
        host = self._host.get(name)
        if host is not None:
            return host.concurrency_safe
        return name in _CONCURRENCY_SAFE_LOCAL

    def reserve(self, calls: Sequence[ToolCall]) -> None:
        """Before a batch of calls starts at once: queueing host tools take places in order."""
        for call in calls:
            tool = self._queueing.get(call.name)
            if tool is not None:
                tool.reserve(call)

    def release(self, calls: Sequence[ToolCall]) -> None:
        """After the batch: give up whatever place a call left unused."""
        for call in calls:
            tool = self._queueing.get(call.name)
            if tool is not None:
                tool.release(call)

    async def call(self, call: ToolCall) -> ToolOutput:
        """Run ``call`` with whichever tool answers to its name, if it is allowed to run."""
        context = self._context
        if self._approvals is not None:
            verdict = await self._approvals.authorize(call)
            if not verdict.allowed:
                return ToolOutput(f"Error: permission denied: {verdict.reason}", is_error=True)
            if verdict.read_rules:
                context = dataclasses.replace(context, read_denied=verdict.hides)
        host = self._host.get(call.name)
        if host is not None:
            try:
                return await host(call)
            except Exception as exc:
                # A defect in one tool must cost the model one failed call,
                # not the agent's whole run (and, in the root, the supervisor).
                log.exception("tool %s failed", call.name)
                return ToolOutput(
                    f"Error: {call.name} failed unexpectedly ({type(exc).__name__}: {exc}); "
                    "this is a bug in the tool, not in your input",
                    is_error=True,
                )
        if call.name in self._local or not self._host:
            return await self._local.run(call.name, call.input, context)
        available = ", ".join(self.names) or "none"
        return ToolOutput(
            f"Error: no tool named {call.name!r} is available. Available tools: {available}.",
            is_error=True,
        )
