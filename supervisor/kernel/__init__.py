"""The kernel: a fleet of worker processes, and nothing about agents.

``Supervisor`` spawns workers (through the zygote or by exec), speaks the
protocol with each over its pipes (``WorkerHandle``), caps and watches each
worker's whole process tree, and classifies how each ended (``WorkerExit``).
It knows no profiles, sessions, tasks or models: every request a worker makes
goes to the ``RequestHandler`` it was given.

This is the kernel's public face, like ``trio.lowlevel``: the rooms above it
(policy, profiles, state, delegation, cli) import from here, never from its
private modules. It imports ``protocol``, ``worker`` (to run a worker in
process and to fork the zygote) and ``supervisor.files``, nothing above.
"""

from ._budget import EventBudget, EventBudgetExceededError, EventBudgetLimits, text_size
from ._collector import tune_collector
from ._errors import (
    FleetCapacityError,
    FleetExhaustedError,
    NestedSupervisorError,
    PlacementError,
    SpawnError,
    SubvisorError,
    UnplaceableError,
    WorkerExitedError,
    WorkerRequestError,
    disk_full_error,
    find_exception,
    validation_problems,
)
from ._exit import ExitKind, WorkerExit
from ._handle import RequestHandler, RequestRefusedError, WireTap, WorkerHandle
from ._helper_cgroup import HelperCgroup
from ._planted_repos import CTIME_SLACK_S, disarm_planted, roots_overlap
from ._process_groups import descends_from
from ._sandbox_support import LANDLOCK_ABI_MAX_ENV, landlock_abi_max_from_env, mode_enforcement
from ._spawner import launch_python, reap_child
from ._supervisor import Supervisor, default_request_handler
from ._supervisor_config import Placement, SpawnMode, SupervisorConfig
from ._supervisor_mark import mark_supervisor, supervisor_marked, unmark_supervisor
from ._tcp_peer import LocalServerCheck, socket_holders, tcp_socket
from ._worker_tree import (
    UNSETTLED,
    in_worker_tree,
    inside_worker_tree_reason,
    refuse_inside_worker_tree,
    supervisor_ancestor,
)

__all__ = [
    "CTIME_SLACK_S",
    "LANDLOCK_ABI_MAX_ENV",
    "UNSETTLED",
    "EventBudget",
    "EventBudgetExceededError",
    "EventBudgetLimits",
    "ExitKind",
    "FleetCapacityError",
    "FleetExhaustedError",
    "HelperCgroup",
    "LocalServerCheck",
    "NestedSupervisorError",
    "Placement",
    "PlacementError",
    "RequestHandler",
    "RequestRefusedError",
    "SpawnError",
    "SpawnMode",
    "SubvisorError",
    "Supervisor",
    "SupervisorConfig",
    "UnplaceableError",
    "WireTap",
    "WorkerExit",
    "WorkerExitedError",
    "WorkerHandle",
    "WorkerRequestError",
    "default_request_handler",
    "descends_from",
    "disarm_planted",
    "disk_full_error",
    "find_exception",
    "in_worker_tree",
    "inside_worker_tree_reason",
    "landlock_abi_max_from_env",
    "launch_python",
    "mark_supervisor",
    "mode_enforcement",
    "reap_child",
    "refuse_inside_worker_tree",
    "roots_overlap",
    "socket_holders",
    "supervisor_ancestor",
    "supervisor_marked",
    "tcp_socket",
    "text_size",
    "tune_collector",
    "unmark_supervisor",
    "validation_problems",
]
