"""The names (``comm``) subvisor's processes give themselves: the worker-tree marker (S-SEC-7).

The zygote and every worker set their ``comm`` with ``PR_SET_NAME`` before
they run anything of a model's. A process cannot change another process's
``comm``, and a worker's descendants stay beneath it (the worker is a child
subreaper), so "an ancestor is named ``subvisor-worker``" holds for every
process a worker ever starts, whatever it does to its own environment,
session or name. Depth (S-POL-4) and the control channel's peer check rest
on this, not on an environment variable.
"""

from __future__ import annotations

__all__ = ["WORKER_PROCESS_NAME", "ZYGOTE_PROCESS_NAME"]

#: ``comm`` of every worker (at most 15 bytes: the kernel's TASK_COMM_LEN - 1).
WORKER_PROCESS_NAME = "subvisor-worker"
#: ``comm`` of the fork server.
ZYGOTE_PROCESS_NAME = "subvisor-zygote"
