"""What a worker may tell its supervisor unasked: one table of events, typed.

Each ``EventSpec`` of ``WORKER_EVENTS`` names an event and the model of its
data. A worker sends the event's own ``Event`` subclass
(``EventSpec.event_for``); the supervisor's decoder picks that subclass by
``name`` and validates ``data`` against it, so an unknown event name, or
data that does not fit its model, is a protocol violation named by field,
exactly like an unknown method. Consumers read typed fields.

Invariants:

- ``WorkerEventName`` is closed: this table is everything a worker can
  report. Events ask for nothing; the supervisor records them (S-SEC-8
  counts each against the worker's event budget) and acts on one only:
  ``process_group``, a group Bash started that a kill of the worker's own
  group would miss.
- Every event has exactly one ``Event`` subclass and one data model, and
  ``WORKER_EVENTS`` lists them all. Data models are frozen and forbid
  unknown fields.
- The worker's events are validated once, when their data model is built
  (``event_for`` does not validate them again); the supervisor validates
  every event it receives.
- What one event costs the supervisor is bounded (S-SEC-8): the JSON a model
  wrote (``ToolStarted.input``) is a ``BoundedJsonObject`` (``_json``), else
  the event is a protocol violation. A worker reports a longer input as
  ``event_input`` makes it: a note of its size, never a violation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field

from ._chat import ChatMessage
from ._json import MAX_JSON_CONTAINERS, BoundedJsonObject, json_containers
from ._trusted import trusted

__all__ = [
    "FAULT_MEMORY",
    "FLOOD",
    "MESSAGE",
    "PROCESS_GROUP",
    "TOOL_FINISHED",
    "TOOL_STARTED",
    "WORKER_EVENTS",
    "WORKER_EVENT_NAMES",
    "Event",
    "EventSpec",
    "FaultMemoryEvent",
    "FloodEvent",
    "FloodItem",
    "MemoryHeld",
    "MessageAppended",
    "MessageEvent",
    "ProcessGroupEvent",
    "ProcessGroupStarted",
    "ToolFinished",
    "ToolFinishedEvent",
    "ToolStarted",
    "ToolStartedEvent",
    "WorkerEventName",
    "event_input",
]

#: The only events a worker can send.
WorkerEventName = Literal[
    "message",
    "tool.started",
    "tool.finished",
    "process_group",
    "fault.memory",
    "flood",
]
WORKER_EVENT_NAMES: tuple[WorkerEventName, ...] = get_args(WorkerEventName)


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- JSON a model wrote ---------------------------------------------------------------


def event_input(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as an event may carry it: itself, or a note where it holds too many containers.

    The worker's side of ``MAX_JSON_CONTAINERS`` for events: the whole input is
    in the transcript (the assistant's message); the timeline only shows it.
    """
    if json_containers(value, MAX_JSON_CONTAINERS) <= MAX_JSON_CONTAINERS:
        return value
    return {"omitted": f"more than {MAX_JSON_CONTAINERS} JSON maps and arrays"}


# -- data -----------------------------------------------------------------------------


class MessageAppended(_Body):
    """``message``: the agent's conversation grew by this message (its transcript)."""

    message: ChatMessage


class ToolStarted(_Body):
    """``tool.started``: the agent called a tool with this input."""

    call_id: str
    name: str
    input: BoundedJsonObject = Field(default_factory=dict)


class ToolFinished(_Body):
    """``tool.finished``: the call ended; how much it wrote, and whether it failed.

    The output itself is not here: it is in the transcript (a ``tool``
    message), and a parent's timeline shows a child's tool activity, never its
    text (S-APR-2).
    """

    call_id: str
    name: str
    is_error: bool
    output_chars: int = Field(ge=0)


class ProcessGroupStarted(_Body):
    """``process_group``: a command runs in its own process group, out of reach of the
    worker's; the supervisor kills it with the worker."""

    pgid: int = Field(gt=1)


class MemoryHeld(_Body):
    """``fault.memory``: the oom fault holds this much (one event per chunk)."""

    held_bytes: int = Field(ge=0)


class FloodItem(_Body):
    """``flood``: one event of the kernel's ``flood`` command."""

    seq: int = Field(ge=0)
    payload: str


# -- events ---------------------------------------------------------------------------


class Event(BaseModel):
    """Something happened in the worker; each event name has its own subclass."""

    # Strict, like every message: the data models keep their own config.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: Literal["event"] = "event"
    name: WorkerEventName
    data: BaseModel


class MessageEvent(Event):
    """A ``message`` event."""

    name: Literal["message"] = "message"
    data: MessageAppended


class ToolStartedEvent(Event):
    """A ``tool.started`` event."""

    name: Literal["tool.started"] = "tool.started"
    data: ToolStarted


class ToolFinishedEvent(Event):
    """A ``tool.finished`` event."""

    name: Literal["tool.finished"] = "tool.finished"
    data: ToolFinished


class ProcessGroupEvent(Event):
    """A ``process_group`` event."""

    name: Literal["process_group"] = "process_group"
    data: ProcessGroupStarted


class FaultMemoryEvent(Event):
    """A ``fault.memory`` event."""

    name: Literal["fault.memory"] = "fault.memory"
    data: MemoryHeld


class FloodEvent(Event):
    """A ``flood`` event."""

    name: Literal["flood"] = "flood"
    data: FloodItem


# -- the table ------------------------------------------------------------------------

D = TypeVar("D", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class EventSpec(Generic[D]):
    """One event of the table: its name, message class and data model."""

    name: WorkerEventName
    event: type[Event]
    data: type[D]

    def event_for(self, data: D) -> Event:
        """The event message carrying ``data`` (validated when built)."""
        if type(data) is not self.data:
            raise TypeError(f"{self.name} carries {self.data.__name__}, not {type(data).__name__}")
        fields = {"type": "event", "name": self.name, "data": data}
        return trusted(self.event, fields, _EVENT_FIELDS_SET)


_EVENT_FIELDS_SET = frozenset({"name", "data"})


MESSAGE = EventSpec("message", MessageEvent, MessageAppended)
TOOL_STARTED = EventSpec("tool.started", ToolStartedEvent, ToolStarted)
TOOL_FINISHED = EventSpec("tool.finished", ToolFinishedEvent, ToolFinished)
PROCESS_GROUP = EventSpec("process_group", ProcessGroupEvent, ProcessGroupStarted)
FAULT_MEMORY = EventSpec("fault.memory", FaultMemoryEvent, MemoryHeld)
FLOOD = EventSpec("flood", FloodEvent, FloodItem)

#: Every event a worker may send, by name.
WORKER_EVENTS: dict[str, EventSpec[BaseModel]] = {
    spec.name: spec  # type: ignore[misc]
    for spec in (MESSAGE, TOOL_STARTED, TOOL_FINISHED, PROCESS_GROUP, FAULT_MEMORY, FLOOD)
}
