"""Memory of idle workers: USS (pages only that process holds) via psutil.

USS is what one more worker really costs: pages shared with the zygote
(copy-on-write) or with other processes are not in it. Each worker answers
one ``echo`` first, so it has run a request through its whole stack, and is
then idle. Exec'd workers (a full interpreter each, sharing nothing but the
read-only file mappings) are the comparison.
"""

from __future__ import annotations

import argparse

import psutil
import trio

from protocol import (
    KERNEL_ECHO,
    EchoParams,
)
from supervisor import SpawnMode, Supervisor, SupervisorConfig, WorkerHandle

from . import Report
from ._stats import MIB, percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"idle_worker_uss_mb_p50": ("<=", 10.0)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=50, help="zygote-forked workers")
    parser.add_argument("--exec-n", type=int, default=5, help="exec'd workers for comparison")


class _Memory:
    def __init__(self) -> None:
        self.uss: list[float] = []
        self.pss: list[float] = []
        self.rss: list[float] = []

    def add(self, pid: int) -> None:
        info = psutil.Process(pid).memory_full_info()
        self.uss.append(info.uss / MIB)
        self.pss.append(info.pss / MIB)
        self.rss.append(info.rss / MIB)


async def _idle_workers(sup: Supervisor, mode: SpawnMode, n: int) -> list[WorkerHandle]:
    handles = [await sup.spawn(mode=mode) for _ in range(n)]
    for i, handle in enumerate(handles):
        if (await handle.request(KERNEL_ECHO, EchoParams(value=i))).value != i:
            raise RuntimeError(f"worker {handle.worker_id} answered the echo wrongly")
    return handles


async def _measure(n: int, exec_n: int) -> tuple[_Memory, _Memory, _Memory]:
    zygote, exec_, zygote_process = _Memory(), _Memory(), _Memory()
    async with Supervisor(SupervisorConfig(max_workers=n + exec_n)) as sup:
        forked = await _idle_workers(sup, "zygote", n)
        execd = await _idle_workers(sup, "exec", exec_n)
        # Let the workers settle into their idle wait before reading smaps.
        await trio.sleep(0.2)
        for handle in forked:
            zygote.add(handle.pid)
        for handle in execd:
            exec_.add(handle.pid)
        zygote_pid = sup._spawners["zygote"].pid
        if zygote_pid is not None:
            zygote_process.add(zygote_pid)
    return zygote, exec_, zygote_process


def run(args: argparse.Namespace) -> Report:
    n: int = max(1, args.n)
    exec_n: int = max(1, args.exec_n)
    zygote, exec_, zygote_process = trio.run(_measure, n, exec_n)
    report: Report = {
        "idle_worker_uss_mb_p50": rounded(percentile(zygote.uss, 50)),
        "idle_worker_uss_mb_p95": rounded(percentile(zygote.uss, 95)),
        "workers": n,
        "exec_worker_uss_mb_p50": rounded(percentile(exec_.uss, 50)),
        "exec_workers": exec_n,
        "idle_worker_pss_mb_p50": rounded(percentile(zygote.pss, 50)),
        "idle_worker_rss_mb_p50": rounded(percentile(zygote.rss, 50)),
        "exec_worker_pss_mb_p50": rounded(percentile(exec_.pss, 50)),
        "exec_worker_rss_mb_p50": rounded(percentile(exec_.rss, 50)),
    }
    if zygote_process.uss:
        report["zygote_uss_mb"] = rounded(zygote_process.uss[0])
        report["zygote_rss_mb"] = rounded(zygote_process.rss[0])
    return report
