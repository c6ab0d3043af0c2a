"""The names (``comm``) subvisor's processes give themselves: the worker-tree marker (S-SEC-7).

The zygote and every worker set their ``comm`` with ``PR_SET_NAME`` before
they run anything of a model's. A process cannot change another process's
``comm``, and a worker's descendants stay beneath it (the worker is a child
subreaper), so "an ancestor is named ``subvisor-worker``" holds for every
process a worker ever starts, whatever it does to its own environment,
session or name. Depth (S-POL-4) and the control channel's peer check rest
on this, not on an environment variable.

A supervisor names itself ``subvisor-sup`` while it runs (S-SEC-2): what it
starts outside every worker tree (the MCP servers it lends, its gateway, a
root agent's tools) acts for a model, and the control channel and
``subvisor mcp --http`` refuse a peer with such an ancestor. Nothing below a
supervisor can rename it: ``/proc/PID/comm`` is writable only from within
its own thread group, and a supervisor is not dumpable (no ptrace).
"""

from __future__ import annotations

__all__ = ["SUPERVISOR_PROCESS_NAME", "WORKER_PROCESS_NAME", "ZYGOTE_PROCESS_NAME"]

#: ``comm`` of every worker (at most 15 bytes: the kernel's TASK_COMM_LEN - 1).
WORKER_PROCESS_NAME = "subvisor-worker"
#: ``comm`` of the fork server.
ZYGOTE_PROCESS_NAME = "subvisor-zygote"
#: ``comm`` of a process while it acts as a supervisor (CLI or library).
SUPERVISOR_PROCESS_NAME = "subvisor-sup"
