"""The parent side of subvisor: spawns, supervises and serves worker processes.

The import name is shared with supervisord's package: do not install both
in one environment.
"""

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
from ._handle import RequestHandler, RequestRefused, WorkerHandle
from ._supervisor import Supervisor

__all__ = [
    "ExitKind",
    "FleetCapacityError",
    "FleetExhaustedError",
    "NestedSupervisorError",
    "RequestHandler",
    "RequestRefused",
    "SpawnError",
    "SpawnMode",
    "SubvisorError",
    "Supervisor",
    "SupervisorConfig",
    "WorkerExit",
    "WorkerExitedError",
    "WorkerHandle",
    "WorkerRequestError",
]
