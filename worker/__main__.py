"""Exec-mode entry point: ``python -m worker`` runs one worker in a fresh interpreter.

Same protocol as a zygote-forked worker; slower to start (a full interpreter
start and imports), useful for debugging and where fork is unavailable.
"""

from __future__ import annotations

import argparse
import sys

from protocol import WORKER_PROCESS_NAME, ResourceLimits, SandboxPolicy

from ._process import end_tree_with_parent, lower_priority, set_process_name
from ._runtime import run_worker


def main(argv: list[str] | None = None) -> int:
    """Parse the supervisor's arguments and run the worker."""
    parser = argparse.ArgumentParser(prog="python -m worker")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--read-fd", type=int, required=True)
    parser.add_argument("--write-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--limits", default="{}", help="ResourceLimits as JSON")
    parser.add_argument("--sandbox", default="{}", help="SandboxPolicy as JSON")
    parser.add_argument("--nice", type=int, default=0, help="this worker's nice value")
    parser.add_argument(
        "--cgroup-fd", type=int, action="append", default=[], help="a cgroup.procs file to join"
    )
    args = parser.parse_args(argv)
    end_tree_with_parent(args.parent_pid)
    set_process_name(WORKER_PROCESS_NAME)
    lower_priority(args.nice)
    limits = ResourceLimits.model_validate_json(args.limits)
    sandbox = SandboxPolicy.model_validate_json(args.sandbox)
    return run_worker(
        args.read_fd,
        args.write_fd,
        worker_id=args.worker_id,
        limits=limits,
        spawn_mode="exec",
        sandbox=sandbox,
        cgroup_fds=args.cgroup_fd,
    )


if __name__ == "__main__":
    sys.exit(main())
