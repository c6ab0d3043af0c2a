"""The parent side of subvisor: spawns, supervises and serves worker processes.

The import name is shared with supervisord's package: do not install both
in one environment.
"""

from ._agent_tool import AgentTool
from ._host import Subvisor
from ._root import RootSession
from ._settings import SubvisorSettings
from .kernel import (
    EventBudgetLimits,
    ExitKind,
    FleetCapacityError,
    FleetExhaustedError,
    NestedSupervisorError,
    RequestHandler,
    RequestRefused,
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

__all__ = [
    "AgentTool",
    "EventBudgetLimits",
    "ExitKind",
    "FleetCapacityError",
    "FleetExhaustedError",
    "NestedSupervisorError",
    "RequestHandler",
    "RequestRefused",
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
