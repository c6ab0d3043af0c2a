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
