"""The parent side of subvisor: spawns, supervises and serves worker processes.

The import name is shared with supervisord's package: do not install both
in one environment.
"""

from .delegation._agent_tool import AgentTool
from .delegation._root import RootSession
from .delegation._settings import SubvisorSettings
from .delegation._subvisor import Subvisor
from .kernel import (
    EventBudgetLimits,
    ExitKind,
    FleetCapacityError,
    FleetExhaustedError,
    NestedSupervisorError,
    RequestHandler,
    RequestRefusedError,
    SpawnError,
    SpawnMode,
    SubvisorError,
    Supervisor,
    SupervisorConfig,
    WireTap,
    WorkerExit,
    WorkerExitedError,
    WorkerHandle,
    WorkerRequestError,
)

#: The old name, kept for code written before every exception's name ended in ``Error``.
RequestRefused = RequestRefusedError

__all__ = [
    "AgentTool",
    "EventBudgetLimits",
    "ExitKind",
    "FleetCapacityError",
    "FleetExhaustedError",
    "NestedSupervisorError",
    "RequestHandler",
    "RequestRefused",
    "RequestRefusedError",
    "RootSession",
    "SpawnError",
    "SpawnMode",
    "Subvisor",
    "SubvisorError",
    "SubvisorSettings",
    "Supervisor",
    "SupervisorConfig",
    "WireTap",
    "WorkerExit",
    "WorkerExitedError",
    "WorkerHandle",
    "WorkerRequestError",
]
