"""The parent side of subvisor: spawns, supervises and serves worker processes.

The import name is shared with supervisord's package: do not install both
in one environment.
"""

import importlib
import typing

if typing.TYPE_CHECKING:
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

# Imported on first use, not with the package: a process that needs one room
# (a gateway process runs ``supervisor.providers``) does not pay for the rest.
_HOMES = {
    "AgentTool": ".delegation._agent_tool",
    "RootSession": ".delegation._root",
    "SubvisorSettings": ".delegation._settings",
    "Subvisor": ".delegation._subvisor",
    **{
        name: ".kernel"
        for name in (
            "EventBudgetLimits",
            "ExitKind",
            "FleetCapacityError",
            "FleetExhaustedError",
            "NestedSupervisorError",
            "RequestHandler",
            "RequestRefusedError",
            "SpawnError",
            "SpawnMode",
            "SubvisorError",
            "Supervisor",
            "SupervisorConfig",
            "WireTap",
            "WorkerExit",
            "WorkerExitedError",
            "WorkerHandle",
            "WorkerRequestError",
        )
    },
}
_ALIASES = {"RequestRefused": "RequestRefusedError"}


def __getattr__(name: str) -> object:
    home = _HOMES.get(_ALIASES.get(name, name))
    if home is None:
        raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), _ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
