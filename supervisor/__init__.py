"""The parent side of subvisor: spawns, supervises and serves worker processes.

The import name is shared with supervisord's package: do not install both
in one environment.
"""

from ._agent_tool import AgentTool
from ._budget import EventBudgetLimits
from ._config import SpawnMode, SupervisorConfig
from ._errors import (
    FleetCapacityError,
    FleetExhaustedError,
    NestedSupervisorError,
    SpawnError,
    SubvisorError,
    WorkerExitedError,
    WorkerRequestError,
)
from ._exit import ExitKind, WorkerExit
from ._handle import RequestHandler, RequestRefused, WireTap, WorkerHandle
from ._host import Subvisor
from ._root import RootSession
from ._settings import SubvisorSettings
from ._supervisor import Supervisor

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
