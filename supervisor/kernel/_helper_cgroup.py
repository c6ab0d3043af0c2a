"""``HelperCgroup``: a CPU weight of its own for the supervisor's helpers, which are no workers.

The gateway's processes read every model stream of the fleet. Their work is
latency: a chunk that waits for a core waits in every live view and every
read-idle deadline. A nice value cannot put them ahead of a launch storm:
the fleet's cgroup weighs one process at nice 0 (``_cgroups``), and so does
the supervisor's whole session (its autogroup), where a gateway process
shared its weight with the supervisor and the zygote. In the relay
benchmark at 500 agents on 2 cores, a cgroup weighing four processes at
nice 0 (``HELPER_SHARES_V1``) took the chunk lag's p99 from 67-148 ms to
55-71 ms (three interleaved pairs); the part of the lag spent in gateway
processes, its p99 from 55-133 ms to 37-40 ms. Sixteen did no better: the
rest waits for the supervisor's own loop.

The weight is a share, not a cap: idle helpers leave every CPU to the
fleet, and a helper's CPU is bounded by the model traffic it relays, which
no worker chooses (providers come from the trusted config).

Invariants: only processes the supervisor started itself, never a worker
or a worker's descendant, are moved in; the cgroup is named like the
fleet's (``subvisor-<pid>-...``) below the supervisor's own cgroup, so a
supervisor that died without removing it has it swept by the next
(``_sweep_stale``). Where no ``cpu`` controller can be used, ``create``
says why and the helpers keep the supervisor's weight.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from ._cgroups import _ROOT, _own_paths, _read_text, _remove_tree, _sweep_stale, _write

__all__ = ["HELPER_SHARES_V1", "HELPER_WEIGHT_V2", "HelperCgroup"]

#: The helpers' CPU weight: four processes at nice 0 (v1 ``cpu.shares``; v2 ``cpu.weight``).
HELPER_SHARES_V1 = 4096
HELPER_WEIGHT_V2 = 400


class HelperCgroup:
    """A ``cpu`` cgroup weighing ``HELPER_SHARES_V1`` for processes the supervisor started."""

    def __init__(self, path: Path) -> None:
        #: Its directory.
        self.path = path

    @classmethod
    def create(cls, role: str) -> tuple[HelperCgroup | None, str]:
        """A new helper cgroup named for ``role``, or None and why none can be made here.

        Each call makes one of its own: removing it kills what is in it, so
        two gateways in one process must not share one.
        """
        own = _own_paths()
        name = f"subvisor-{os.getpid()}-{role}-{secrets.token_hex(4)}"
        if "cpu" in own:
            base = _ROOT / "cpu" / own["cpu"].lstrip("/")
            weight = ("cpu.shares", str(HELPER_SHARES_V1))
        elif "" in own:
            base = _ROOT / own[""].lstrip("/")
            weight = ("cpu.weight", str(HELPER_WEIGHT_V2))
            if "cpu" not in _read_text(base / "cgroup.subtree_control").split():
                return None, f"the cgroup v2 cpu controller is not delegated to {base}"
        else:
            return None, "no cgroup cpu hierarchy is mounted"
        path = base / name
        try:
            _sweep_stale(base)
            path.mkdir()
        except OSError as exc:
            return None, f"cannot make a cgroup under {base}: {exc.strerror or exc}"
        try:
            _write(str(path / weight[0]), weight[1])
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None, f"cannot weigh {path}: {exc.strerror or exc}"
        return cls(path), ""

    def add(self, pid: int) -> str:
        """Move ``pid`` in; "" when it is in, else why not (it keeps its weight then)."""
        try:
            _write(str(self.path / "cgroup.procs"), str(pid))
        except OSError as exc:
            return f"cannot move process {pid} into {self.path}: {exc.strerror or exc}"
        return ""

    def remove(self, *, deadline_s: float = 1.0) -> None:
        """Remove the cgroup, killing whatever is still in it (blocking: its helpers are done)."""
        _remove_tree(self.path, deadline_s=deadline_s)
