"""What a supervisor may ask of a worker: one table, typed both ways.

The mirror of ``protocol._methods``. Each ``CommandSpec`` of
``SUPERVISOR_METHODS`` names a method, the model of its params and the model
of its result. The supervisor sends the method's own ``SupervisorRequest``
subclass; the worker's decoder picks that subclass by ``method`` and
validates ``params`` against it, so a request whose params do not fit is a
protocol violation exactly like an unknown method, and a command handler is
given its params model, never a dict. The worker answers with an instance of
the result model; the supervisor validates the ``Response.result`` it
receives against the same model (``CommandSpec.parse_result``): a worker is
an untrusted peer.

Invariants:

- ``SupervisorMethod`` is closed: this table is everything a worker can be
  asked to do. The kernel's commands (``echo`` ... ``ask_supervisor``) are
  methods like any other: they exist so the kernel can be tested and
  benchmarked with real processes doing real harm to themselves.
  ``forbidden`` has the worker break the protocol on purpose, by writing one
  of the frames ``ForbiddenFrame`` names past its own connection.
- Every method has exactly one request class, one params model and one
  result model, and ``SUPERVISOR_METHODS`` lists them all.
- Params and results are frozen and forbid unknown fields. The kernel's
  params are strict: ``"30"`` is not a number of seconds.
- The supervisor's requests are validated once, when their params model is
  built: ``request_for`` wraps the already valid params without validating
  them again.
"""

from __future__ import annotations

import signal
from typing import Annotated, Literal, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ._agent import AgentOutcome, AgentRunSpec
from ._methods import EchoParams, EchoResult
from ._request_spec import RequestSpec
from ._workflow import (
    WorkflowAnswerCheck,
    WorkflowCheckResult,
    WorkflowScriptOutcome,
    WorkflowScriptSpec,
)

__all__ = [
    "AGENT_RUN",
    "AGENT_STEER",
    "KERNEL_ALLOCATE",
    "KERNEL_ASK_SUPERVISOR",
    "KERNEL_BURN_CPU",
    "KERNEL_CRASH",
    "KERNEL_ECHO",
    "KERNEL_FLOOD",
    "KERNEL_FORBIDDEN",
    "KERNEL_HANG",
    "KERNEL_INFO",
    "KERNEL_SLEEP",
    "SUPERVISOR_METHODS",
    "SUPERVISOR_REQUEST_METHODS",
    "WORKFLOW_CHECK_ANSWER",
    "WORKFLOW_RUN",
    "AgentRunRequest",
    "AgentSteerRequest",
    "AllocateParams",
    "Allocated",
    "BurnCpuParams",
    "CommandSpec",
    "CpuBurned",
    "CrashKind",
    "CrashParams",
    "FloodParams",
    "Flooded",
    "ForbiddenFrame",
    "ForbiddenParams",
    "HangParams",
    "InfoParams",
    "KernelAllocateRequest",
    "KernelAskSupervisorRequest",
    "KernelBurnCpuRequest",
    "KernelCrashRequest",
    "KernelEchoRequest",
    "KernelFloodRequest",
    "KernelForbiddenRequest",
    "KernelHangRequest",
    "KernelInfoRequest",
    "KernelSleepRequest",
    "NoAnswer",
    "SleepParams",
    "Slept",
    "SteerMessage",
    "SteerReceipt",
    "SupervisorMethod",
    "SupervisorRequest",
    "WorkerInfo",
    "WorkflowCheckAnswerRequest",
    "WorkflowRunRequest",
]

#: The only requests a supervisor can make of a worker.
SupervisorMethod = Literal[
    "echo",
    "sleep",
    "allocate",
    "burn_cpu",
    "crash",
    "hang",
    "flood",
    "forbidden",
    "info",
    "ask_supervisor",
    "agent.run",
    "agent.steer",
    "workflow.run",
    "workflow.check_answer",
]
SUPERVISOR_REQUEST_METHODS: tuple[SupervisorMethod, ...] = get_args(SupervisorMethod)

#: How ``crash`` ends the worker.
CrashKind = Literal["segfault", "exit", "signal", "abort"]

#: The frames ``forbidden`` writes, each one a violation the supervisor must catch.
ForbiddenFrame = Literal[
    "spawn",
    "delegate",
    "approve",
    "welcome",
    "shutdown",
    "unsolicited_response",
    "garbage",
    "oversized",
    "unknown_event",
    "bad_event",
    "container_event",
    "container_permission_check",
    "container_mcp_call",
]


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _StrictBody(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _signal_name(name: str) -> str:
    if name not in signal.Signals.__members__:
        raise ValueError(f"unknown signal {name!r}: use a name such as SIGKILL or SIGTERM")
    return name


# -- params and results -----------------------------------------------------------


class SleepParams(_StrictBody):
    """``sleep``: wait this long (cancellable), then answer."""

    seconds: float = Field(ge=0)


class Slept(_Body):
    """How long ``sleep`` (or ``hang``) waited."""

    seconds: float


class AllocateParams(_StrictBody):
    """``allocate``: make ``mb`` of memory resident, ``step_mb`` at a time, and hold it."""

    mb: float = Field(gt=0)
    step_mb: float = Field(default=16, gt=0)
    step_delay_s: float = Field(default=0.0, ge=0)


class Allocated(_Body):
    """What ``allocate`` holds, and the worker's resident size after it."""

    allocated_mb: float
    rss_mb: float


class BurnCpuParams(_StrictBody):
    """``burn_cpu``: spin for this much CPU time (``None``: until stopped)."""

    seconds: float | None = Field(default=None, ge=0)


class CpuBurned(_Body):
    """The CPU time ``burn_cpu`` used."""

    cpu_seconds: float


class CrashParams(_StrictBody):
    """``crash``: die the way ``how`` says (``code`` for exit, ``signal`` for signal)."""

    how: CrashKind
    code: int = Field(default=1, ge=0, le=255)
    signal: Annotated[str, AfterValidator(_signal_name)] = "SIGKILL"


class HangParams(_StrictBody):
    """``hang``: block the whole process, event loop included, like a wedged C call."""

    seconds: float = Field(default=3600, ge=0)


class FloodParams(_StrictBody):
    """``flood``: send ``count`` events of ``size`` characters each, as fast as the pipe takes."""

    count: int = Field(ge=0)
    size: int = Field(default=64, ge=0)


class Flooded(_Body):
    """How many events ``flood`` sent."""

    count: int


class ForbiddenParams(_StrictBody):
    """``forbidden``: write the frame ``kind`` names, breaking the protocol on purpose."""

    kind: ForbiddenFrame = "spawn"


class InfoParams(_StrictBody):
    """``info`` takes nothing."""


class WorkerInfo(_Body):
    """``info``: the worker's process as it sees itself (ids, env, rlimits, fds, RSS)."""

    pid: int
    ppid: int
    pgid: int
    env: dict[str, str]
    #: ``{"RLIMIT_CPU": (soft, hard), ...}``
    rlimits: dict[str, tuple[int, int]]
    #: Open fd -> what it points at (``pipe:[123]``, a path...).
    fds: dict[str, str]
    rss_mb: float


class NoAnswer(_Body):
    """The result of a command that never answers (``crash``, ``forbidden``)."""


class SteerMessage(_Body):
    """``agent.steer``: a parent's message for the agent running in this worker (S-MSG-1)."""

    text: str = Field(min_length=1, pattern=r"\S")


class SteerReceipt(_Body):
    """Whether the message went into the running turn; ``reason`` says why not."""

    delivered: bool
    reason: str = ""


# -- requests -----------------------------------------------------------------------


class SupervisorRequest(BaseModel):
    """A request from the supervisor to a worker; each method has its own subclass."""

    # Strict: a wire value of the wrong type is a protocol violation, never
    # coerced. The params models keep their own config.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: Literal["request"] = "request"
    id: int = Field(ge=0)
    method: SupervisorMethod
    params: BaseModel


class KernelEchoRequest(SupervisorRequest):
    """An ``echo`` request: the worker answers with the value it was given."""

    method: Literal["echo"] = "echo"
    params: EchoParams


class KernelSleepRequest(SupervisorRequest):
    """A ``sleep`` request."""

    method: Literal["sleep"] = "sleep"
    params: SleepParams


class KernelAllocateRequest(SupervisorRequest):
    """An ``allocate`` request."""

    method: Literal["allocate"] = "allocate"
    params: AllocateParams


class KernelBurnCpuRequest(SupervisorRequest):
    """A ``burn_cpu`` request."""

    method: Literal["burn_cpu"] = "burn_cpu"
    params: BurnCpuParams


class KernelCrashRequest(SupervisorRequest):
    """A ``crash`` request."""

    method: Literal["crash"] = "crash"
    params: CrashParams


class KernelHangRequest(SupervisorRequest):
    """A ``hang`` request."""

    method: Literal["hang"] = "hang"
    params: HangParams


class KernelFloodRequest(SupervisorRequest):
    """A ``flood`` request."""

    method: Literal["flood"] = "flood"
    params: FloodParams


class KernelForbiddenRequest(SupervisorRequest):
    """A ``forbidden`` request."""

    method: Literal["forbidden"] = "forbidden"
    params: ForbiddenParams


class KernelInfoRequest(SupervisorRequest):
    """An ``info`` request."""

    method: Literal["info"] = "info"
    params: InfoParams


class KernelAskSupervisorRequest(SupervisorRequest):
    """An ``ask_supervisor`` request: the worker asks ``supervisor.echo`` and answers with it."""

    method: Literal["ask_supervisor"] = "ask_supervisor"
    params: EchoParams


class AgentRunRequest(SupervisorRequest):
    """An ``agent.run`` request: run one agent in the worker."""

    method: Literal["agent.run"] = "agent.run"
    params: AgentRunSpec


class AgentSteerRequest(SupervisorRequest):
    """An ``agent.steer`` request."""

    method: Literal["agent.steer"] = "agent.steer"
    params: SteerMessage


class WorkflowRunRequest(SupervisorRequest):
    """A ``workflow.run`` request: run one workflow script in the worker."""

    method: Literal["workflow.run"] = "workflow.run"
    params: WorkflowScriptSpec


class WorkflowCheckAnswerRequest(SupervisorRequest):
    """A ``workflow.check_answer`` request: validate a typed ask's answer in the script worker."""

    method: Literal["workflow.check_answer"] = "workflow.check_answer"
    params: WorkflowAnswerCheck


# -- the table ----------------------------------------------------------------------

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class CommandSpec(RequestSpec[SupervisorRequest, P, R]):
    """One method of the table; ``parse_result`` validates what the worker answered."""

    __slots__ = ()


KERNEL_ECHO = CommandSpec("echo", KernelEchoRequest, EchoParams, EchoResult)
KERNEL_SLEEP = CommandSpec("sleep", KernelSleepRequest, SleepParams, Slept)
KERNEL_ALLOCATE = CommandSpec("allocate", KernelAllocateRequest, AllocateParams, Allocated)
KERNEL_BURN_CPU = CommandSpec("burn_cpu", KernelBurnCpuRequest, BurnCpuParams, CpuBurned)
KERNEL_CRASH = CommandSpec("crash", KernelCrashRequest, CrashParams, NoAnswer)
KERNEL_HANG = CommandSpec("hang", KernelHangRequest, HangParams, Slept)
KERNEL_FLOOD = CommandSpec("flood", KernelFloodRequest, FloodParams, Flooded)
KERNEL_FORBIDDEN = CommandSpec("forbidden", KernelForbiddenRequest, ForbiddenParams, NoAnswer)
KERNEL_INFO = CommandSpec("info", KernelInfoRequest, InfoParams, WorkerInfo)
KERNEL_ASK_SUPERVISOR = CommandSpec(
    "ask_supervisor", KernelAskSupervisorRequest, EchoParams, EchoResult
)
AGENT_RUN = CommandSpec("agent.run", AgentRunRequest, AgentRunSpec, AgentOutcome)
AGENT_STEER = CommandSpec("agent.steer", AgentSteerRequest, SteerMessage, SteerReceipt)
WORKFLOW_RUN = CommandSpec(
    "workflow.run", WorkflowRunRequest, WorkflowScriptSpec, WorkflowScriptOutcome
)
WORKFLOW_CHECK_ANSWER = CommandSpec(
    "workflow.check_answer",
    WorkflowCheckAnswerRequest,
    WorkflowAnswerCheck,
    WorkflowCheckResult,
)

#: Every method a supervisor may ask of a worker, by name.
SUPERVISOR_METHODS: dict[str, CommandSpec[BaseModel, BaseModel]] = {
    spec.name: spec  # type: ignore[misc]
    for spec in (
        KERNEL_ECHO,
        KERNEL_SLEEP,
        KERNEL_ALLOCATE,
        KERNEL_BURN_CPU,
        KERNEL_CRASH,
        KERNEL_HANG,
        KERNEL_FLOOD,
        KERNEL_FORBIDDEN,
        KERNEL_INFO,
        KERNEL_ASK_SUPERVISOR,
        AGENT_RUN,
        AGENT_STEER,
        WORKFLOW_RUN,
        WORKFLOW_CHECK_ANSWER,
    )
}
