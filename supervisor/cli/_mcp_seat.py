"""``McpSeat``: one MCP client connection as a root session of its own (S-SRV-5).

A seat is made on a connection's first request and closed with it. It owns a
root session in the store and the tools that session's client may call:
``Agent`` (S-TOOL-1..6), ``SendMessage``, ``TaskList``, ``TaskOutput`` and
``TaskStop``, built on the ``Subvisor``'s own parts, so the sandbox, caps,
fan-out limits and keys-never-in-a-worker hold as for ``subvisor run``.

Invariants:

- Every agent id a client names is checked against the seat's session first;
  another client's agent reads as "no agent ... in this session", never as
  its state (the ``Agent`` tool's ``task_id`` resume included).
- A background agent's end reaches the client once: its S-NOTE-1 text leaves
  the session's command queue through the seat's ``NotificationSink``.
- Closing a seat stops every agent of its session that still runs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import trio

from protocol import ToolCall, ToolSpec
from worker.tools import LOCAL_TOOL_NAMES, ToolOutput

from ..delegation._agent_tool import AgentTool
from ..delegation._agent_tool_schema import AGENT_TOOL_NAME, HIDDEN_ALIASES
from ..delegation._messaging import SendMessageTool
from ..delegation._notifications import (
    Command,
    build_task_notification,
    format_command_turn,
    format_task_output,
)
from ..delegation._shells import TaskListTool
from ..delegation._subagents import SubagentRun
from ..delegation._subvisor import Subvisor
from ..policy._policy import ToolPolicy
from ..profiles._profile_catalog import ProfileCatalog
from ..state._task_record import TaskRecord
from ..state._tasks import TaskError

__all__ = ["CLIENT_GONE", "McpSeat", "NotificationSink", "ProgressReport", "new_seat_session_id"]

#: ``(step, message)``: one lifecycle step of a foreground agent, for the caller's progress token.
ProgressReport = Callable[[int, str], Awaitable[None]]


def new_seat_session_id() -> str:
    """A fresh root session id for one client's seat."""
    return f"sess_mcp_{uuid.uuid4().hex[:16]}"


_TASK_ID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task_id": {"type": "string", "description": "The agentId."}},
    "required": ["task_id"],
    "additionalProperties": False,
}

_TASK_OUTPUT = ToolSpec(
    name="TaskOutput",
    description=(
        "Read a subagent's output by its agentId: once it has ended, its completion "
        "notification (status, result or error, usage); while it runs, what it has written "
        "so far."
    ),
    input_schema=_TASK_ID_SCHEMA,
)
_TASK_STOP = ToolSpec(
    name="TaskStop",
    description="Stop a running subagent of this session by its agentId.",
    input_schema=_TASK_ID_SCHEMA,
)

#: Said to the record of every agent a closing seat stops.
CLIENT_GONE = "the MCP client disconnected"


class NotificationSink(Protocol):
    """Where a seat's notifications go: its client, as MCP logging notifications."""

    async def notify(self, text: str) -> None:
        """Send one notification's text to the client."""
        ...


class McpSeat:
    """One client's root session, its tools and its notification pump."""

    def __init__(
        self,
        host: Subvisor,
        *,
        session_id: str,
        model: str,
        cwd: Path,
        catalog: ProfileCatalog,
        label: str,
    ) -> None:
        self.session_id = session_id
        self._store = host.store
        self._registry = host.registry
        #: The live subagent runs by task id, and their lifecycle events.
        self._runs = host.runs
        self._lifecycle = host.lifecycle
        self._queue = host.command_queue(session_id)
        self._store.create_session(
            self.session_id,
            parent_id=None,
            task_type="root",
            description=label,
            model=model,
            cwd=str(cwd),
        )
        settings = host.settings
        mcp_names = tuple(spec.name for spec in host.mcp.tool_specs())
        self.policy = ToolPolicy(rules=settings.rules, mode=settings.mode, project_dir=str(cwd))
        # As a root session's Agent tool: children inherit the local tools and
        # the supervisor's MCP tools (S-MCP-1), never the client's own.
        self.agent_tool = AgentTool(
            host.launch_services,
            launch_order=host.launch_order(session_id),
            parent_session_id=self.session_id,
            parent_tools=(*LOCAL_TOOL_NAMES, AGENT_TOOL_NAME, *mcp_names),
            catalog=catalog,
            current_model=lambda: model,
            cwd=cwd,
            parent_policy=self.policy,
        )
        self.send_message = SendMessageTool(
            self.session_id,
            self.agent_tool,
            runs=self._runs,
            registry=self._registry,
            store=self._store,
            spawn=host.spawn_background,
        )
        self._task_list = TaskListTool(self._registry, self.session_id)
        self.specs = [
            self.agent_tool.spec,
            self.send_message.spec,
            self._task_list.spec,
            _TASK_OUTPUT,
            _TASK_STOP,
        ]
        self._scopes: set[trio.CancelScope] = set()
        self.closed = False

    # -- ownership ---------------------------------------------------------------

    def record(self, task_id: str) -> TaskRecord | None:
        """The record of an agent this seat launched, else None (whoever else's it is)."""
        record = self._registry.get(task_id) or self._store.find_task(
            task_id, parent_session_id=self.session_id
        )
        if record is None or record.parent_session_id != self.session_id:
            return None
        return record

    def _not_ours(self, task_id: object) -> ToolOutput:
        return ToolOutput(f"Error: no agent {task_id!r} was launched in this session.", True)

    # -- tools ---------------------------------------------------------------------

    @staticmethod
    def new_call_id() -> str:
        """A fresh tool-use id for one client call (its agents' ``parent_tool_call_id``)."""
        return f"toolu_mcp_{uuid.uuid4().hex[:16]}"

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        report: ProgressReport | None = None,
        *,
        call_id: str | None = None,
    ) -> ToolOutput:
        """Run one tool call of the client; unknown tools are an error result."""
        call = ToolCall(id=call_id or self.new_call_id(), name=name, input=dict(arguments))
        if name == AGENT_TOOL_NAME or name in HIDDEN_ALIASES:
            return await self._agent(call, report)
        if name == self.send_message.spec.name:
            return await self.send_message(call)
        if name == self._task_list.spec.name:
            return await self._task_list(call)
        if name == _TASK_OUTPUT.name:
            return self._task_output(call.input.get("task_id"))
        if name == _TASK_STOP.name:
            return await self._task_stop(call.input.get("task_id"))
        known = ", ".join(spec.name for spec in self.specs)
        return ToolOutput(f"Error: no tool {name!r}; this server has {known}.", True)

    async def _agent(self, call: ToolCall, report: ProgressReport | None) -> ToolOutput:
        resumed = call.input.get("task_id")
        if isinstance(resumed, str) and resumed.strip() and self.record(resumed.strip()) is None:
            return self._not_ours(resumed)
        if report is None:
            return await self.agent_tool.invoke(call.input, tool_use_id=call.id)
        relay = _ProgressRelay(self._runs, self.session_id, call.id, report)
        with self._lifecycle.subscribe() as events:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay.run, events)
                # (Should the call raise, the nursery cancels the relay.)
                output = await self.agent_tool.invoke(call.input, tool_use_id=call.id)
                # A step being reported is finished, not cut off: the relay
                # stops at its next wait for an event.
                relay.stop()
            # Its last events (``task.ended`` among them) were published before
            # the call returned, but the relay may not have taken them yet: the
            # call's waiter can wake first. They go out before the result.
            while True:
                try:
                    event = events.receive_nowait()
                except trio.WouldBlock:
                    break
                await relay.send(event)
        return output

    def _task_output(self, task_id: object) -> ToolOutput:
        record = self.record(task_id) if isinstance(task_id, str) and task_id else None
        if record is None:
            return self._not_ours(task_id)
        if record.is_terminal:
            # S-SRV-2: what the completion notification said, for a client that missed it.
            return ToolOutput(build_task_notification(record))
        try:
            output = self._registry.read_output(record.task_id)
        except TaskError as exc:
            return ToolOutput(f"Error: {exc}", is_error=True)
        return ToolOutput(format_task_output(record, output))

    async def _task_stop(self, task_id: object) -> ToolOutput:
        record = self.record(task_id) if isinstance(task_id, str) and task_id else None
        if record is None:
            return self._not_ours(task_id)
        try:
            stopped = await self._registry.stop(record.task_id, "stopped by the MCP client")
        except TaskError as exc:
            return ToolOutput(f"Error: {exc}", is_error=True)
        return ToolOutput(f"task {stopped.task_id} {stopped.status}")

    # -- lifetime ------------------------------------------------------------------

    @asynccontextmanager
    async def until_closed(self) -> AsyncIterator[None]:
        """A block that the seat's closing cancels (a seat's own background work)."""
        with trio.CancelScope() as scope:
            if self.closed:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)

    async def pump_notifications(self, sink: NotificationSink) -> None:
        """Until the seat closes: hand each queued notification or message to ``sink``."""
        queue = self._queue
        async with self.until_closed():
            while True:
                await queue.wait()
                for command in queue.take("later"):
                    await sink.notify(_notification_text(command))

    async def close(self) -> None:
        """Stop the seat's running agents and end its session; idempotent."""
        if self.closed:
            return
        self.closed = True
        for scope in self._scopes:
            scope.cancel()
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for run in list(self._runs.values()):
                    if run.launch.parent_session_id == self.session_id and not run.done.is_set():
                        nursery.start_soon(run.stop, CLIENT_GONE)
            self._store.set_session_status(self.session_id, "completed")


def _notification_text(command: Command) -> str:
    """A task notification as S-NOTE-1 wrote it; anything else as a model turn frames it."""
    if command.kind == "task-notification":
        return command.text
    return format_command_turn([command])


class _ProgressRelay:
    """Turns the lifecycle events of the agent one Agent call launched into progress steps."""

    def __init__(
        self,
        runs: Mapping[str, SubagentRun],
        session_id: str,
        tool_use_id: str,
        report: ProgressReport,
    ) -> None:
        self._runs = runs
        self._session_id = session_id
        self._tool_use_id = tool_use_id
        self._report = report
        self._agent_id: str | None = None
        self._step = 0
        self._stopped = False
        self._waiting = trio.CancelScope()

    async def run(self, events: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
        """Relay every event until ``stop`` (or cancelled)."""
        while not self._stopped:
            event = None
            # A cancelled receive takes nothing: what is left stays in the channel.
            with trio.CancelScope() as self._waiting:
                event = await events.receive()
            if event is None:
                return
            await self.send(event)

    def stop(self) -> None:
        """End ``run`` at its next wait for an event (at once, if it is waiting)."""
        self._stopped = True
        self._waiting.cancel()

    async def send(self, event: dict[str, Any]) -> None:
        """Report ``event`` as the next step, if it is one of this call's agent."""
        message = self._message(event)
        if message is not None:
            self._step += 1
            await self._report(self._step, message)

    def _message(self, event: dict[str, Any]) -> str | None:
        if event["session_id"] != self._session_id:
            return None
        name = event["event"]
        agent_id = self._agent_id
        if agent_id is None:
            # Registered before its events reach us: the run is in ``runs``.
            run = self._runs.get(event["agentId"])
            if name != "task.registered" or run is None:
                return None
            if run.launch.tool_use_id != self._tool_use_id:
                return None
            self._agent_id = agent_id = event["agentId"]
            return f"{agent_id} launched"
        if event["agentId"] != agent_id:
            return None
        if name == "task.started":
            return f"{agent_id} running (pid {event.get('pid')})"
        if name == "turn.finished":
            return f"{agent_id} model turn {event.get('model_calls')} done"
        if name == "tool.finished":
            return f"{agent_id} tool call {event.get('tool')} done"
        if name == "task.backgrounded":
            return f"{agent_id} moved to the background"
        if name == "task.ended":
            return f"{agent_id} {event.get('status')}"
        return None
