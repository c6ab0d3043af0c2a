"""Messages between the supervisor and one worker, as frozen pydantic models.

Each direction has its own discriminated union (``type`` is the tag):
``WorkerMessage`` for what a worker may send, ``SupervisorMessage`` for what
the supervisor may send. A tag that is not in the sender's union is a protocol
violation, so capabilities are a property of the schema: there is no message
by which a worker could ask for a process to be spawned (S-POL-4), and no way
for a worker to send a ``welcome`` or ``shutdown``.

Requests nest a second union, by ``method`` (``protocol._methods`` for a
worker's, ``protocol._commands`` for the supervisor's), and events one by
``name`` (``protocol._events``): no message carries an untyped dict, except
``Response.result``, which the asker validates against its method's result
model, and ``Progress.data``, which no method sends today.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ._commands import (
    AgentRunRequest,
    AgentSteerRequest,
    KernelAllocateRequest,
    KernelAskSupervisorRequest,
    KernelBurnCpuRequest,
    KernelCrashRequest,
    KernelEchoRequest,
    KernelFloodRequest,
    KernelForbiddenRequest,
    KernelHangRequest,
    KernelInfoRequest,
    KernelSleepRequest,
    SupervisorRequest,
    WorkflowCheckAnswerRequest,
    WorkflowRunRequest,
)
from ._events import (
    Event,
    FaultMemoryEvent,
    FloodEvent,
    MessageEvent,
    ProcessGroupEvent,
    ToolFinishedEvent,
    ToolStartedEvent,
)
from ._json import BoundedJsonObject
from ._methods import (
    CoordinatorMessageRequest,
    EchoRequest,
    McpToolCallRequest,
    ModelCallRequest,
    PermissionCheckRequest,
    UserQuestionRequest,
    WorkerRequest,
    WorkflowAskRequest,
    WorkflowDeclareActorRequest,
    WorkflowEscalateRequest,
)
from ._sandbox import SandboxReport
from ._trusted import trusted

__all__ = [
    "PROTOCOL_VERSION",
    "Cancel",
    "ErrorReply",
    "Heartbeat",
    "Hello",
    "Message",
    "Progress",
    "ResourceLimits",
    "Response",
    "Shutdown",
    "SupervisorMessage",
    "Welcome",
    "WorkerMessage",
    "supervisor_message_adapter",
    "worker_message_adapter",
]

PROTOCOL_VERSION = 1


class _Frozen(BaseModel):
    # Strict: a wire value of the wrong type is a protocol violation, never
    # coerced ("7" is not an id, True is not 1).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ResourceLimits(_Frozen):
    """Per-worker caps.

    The worker applies the rlimit-backed ones to itself before it says hello
    (``cpu_seconds`` -> RLIMIT_CPU, ``address_space_mb`` -> RLIMIT_AS,
    ``open_files`` -> RLIMIT_NOFILE, ``file_size_mb`` -> RLIMIT_FSIZE, which
    every descendant inherits and none can raise). The supervisor enforces
    the rest from outside over the worker's whole process tree (S-SEC-4):
    ``memory_mb``, ``max_processes`` and ``cpu_seconds`` through a cgroup
    where it can make one, else by sampling the tree; ``wall_timeout_s`` and
    ``idle_timeout_s`` by its watchdog. ``cpus`` is a claim, not a cap: the
    CPUs placement reserves for the worker on its node (Ray, fractional
    like Ray's); locally it must not exceed this machine's CPUs. ``None``
    means no cap.
    """

    memory_mb: float | None = Field(default=None, gt=0)
    cpus: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    cpu_seconds: int | None = Field(default=None, gt=0)
    address_space_mb: int | None = Field(default=None, gt=0)
    open_files: int | None = Field(default=1024, gt=16)
    max_processes: int | None = Field(default=256, ge=1)
    file_size_mb: int | None = Field(default=4096, gt=0)
    wall_timeout_s: float | None = Field(default=None, gt=0)
    idle_timeout_s: float | None = Field(default=600.0, gt=0)


# -- worker -> supervisor -------------------------------------------------------


class Hello(_Frozen):
    """First frame of a worker: who it is and which limits and sandbox it actually applied."""

    type: Literal["hello"] = "hello"
    protocol_version: int
    worker_id: str
    pid: int
    pgid: int
    spawn_mode: Literal["zygote", "exec"]
    #: ``{"RLIMIT_CPU": [soft, hard], ...}``
    rlimits: dict[str, Annotated[list[int], Field(min_length=2, max_length=2)]] = Field(
        default_factory=dict
    )
    #: The sandbox in force (S-SBX-1); never claims more than is (S-SBX-2).
    sandbox: SandboxReport | None = None
    #: The nice value it runs at: under load the supervisor runs first.
    nice: int = Field(default=0, ge=-20, le=19)
    #: Why it could not join the cgroups it was given ("": it joined them, or had none).
    cgroup_error: str = ""


# -- supervisor -> worker -------------------------------------------------------


class Welcome(_Frozen):
    """The supervisor's answer to ``hello``; the connection is open after it."""

    type: Literal["welcome"] = "welcome"
    protocol_version: int
    worker_id: str


class Cancel(_Frozen):
    """Cancel the worker's handling of request ``id``; it still answers it."""

    type: Literal["cancel"] = "cancel"
    id: int = Field(ge=0)


class Shutdown(_Frozen):
    """Ask the worker to finish and exit; no further requests will come."""

    type: Literal["shutdown"] = "shutdown"
    reason: str = ""


# -- both directions ------------------------------------------------------------


class Response(_Frozen):
    """Successful answer to the peer's request ``id``.

    ``result`` is an instance of the result model of the request's method; the
    asker validates it against that model (``MethodSpec.parse_result``,
    ``CommandSpec.parse_result``).
    """

    type: Literal["response"] = "response"
    id: int = Field(ge=0)
    result: Any = None

    @classmethod
    def answering(cls, request_id: int, result: BaseModel) -> Response:
        """The answer ``result`` (a model, valid since it was built) to the received
        request ``request_id``, built without validating either again."""
        fields = {"type": "response", "id": request_id, "result": result}
        return trusted(cls, fields, _RESPONSE_FIELDS_SET)


_RESPONSE_FIELDS_SET = frozenset({"id", "result"})


class ErrorReply(_Frozen):
    """Failed answer to the peer's request ``id``."""

    type: Literal["error"] = "error"
    id: int = Field(ge=0)
    code: str
    message: str


class Progress(_Frozen):
    """Partial output of a request still being answered.

    Reserved: no method of either table streams progress today, so neither
    end sends one; a receiver checks that it names a request it asked and
    drops it. A method that streams will give it a typed model of its own.
    """

    type: Literal["progress"] = "progress"
    id: int = Field(ge=0)
    data: BoundedJsonObject = Field(default_factory=dict)


class Heartbeat(_Frozen):
    """Liveness probe; a worker echoes the supervisor's heartbeat with the same ``seq``."""

    type: Literal["heartbeat"] = "heartbeat"
    seq: int = Field(ge=0)


#: A worker's request, by method (``protocol._methods`` holds the table).
_AnyWorkerRequest = Annotated[
    EchoRequest
    | ModelCallRequest
    | PermissionCheckRequest
    | CoordinatorMessageRequest
    | McpToolCallRequest
    | UserQuestionRequest
    | WorkflowDeclareActorRequest
    | WorkflowAskRequest
    | WorkflowEscalateRequest,
    Field(discriminator="method"),
]
#: A worker's event, by name (``protocol._events`` holds the table).
_AnyEvent = Annotated[
    MessageEvent
    | ToolStartedEvent
    | ToolFinishedEvent
    | ProcessGroupEvent
    | FaultMemoryEvent
    | FloodEvent,
    Field(discriminator="name"),
]
#: The supervisor's request, by method (``protocol._commands`` holds the table).
_AnySupervisorRequest = Annotated[
    KernelEchoRequest
    | KernelSleepRequest
    | KernelAllocateRequest
    | KernelBurnCpuRequest
    | KernelCrashRequest
    | KernelHangRequest
    | KernelFloodRequest
    | KernelForbiddenRequest
    | KernelInfoRequest
    | KernelAskSupervisorRequest
    | AgentRunRequest
    | AgentSteerRequest
    | WorkflowRunRequest
    | WorkflowCheckAnswerRequest,
    Field(discriminator="method"),
]
WorkerMessage = Annotated[
    Hello | _AnyWorkerRequest | Response | ErrorReply | Progress | _AnyEvent | Heartbeat,
    Field(discriminator="type"),
]
SupervisorMessage = Annotated[
    Welcome
    | _AnySupervisorRequest
    | Response
    | ErrorReply
    | Progress
    | Cancel
    | Heartbeat
    | Shutdown,
    Field(discriminator="type"),
]
Message = (
    Hello
    | WorkerRequest
    | Event
    | Welcome
    | SupervisorRequest
    | Cancel
    | Shutdown
    | Response
    | ErrorReply
    | Progress
    | Heartbeat
)

worker_message_adapter: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)
supervisor_message_adapter: TypeAdapter[SupervisorMessage] = TypeAdapter(SupervisorMessage)
