"""Fleet scale: N idle zygote workers spawned at once.

Times from starting N concurrent ``spawn`` calls until every handshake is
done, reads the supervisor's own RSS (and the zygote's) at that point,
round-trips one ``echo`` through every worker to show they all work, and
times the clean shutdown of the whole fleet.
"""

from __future__ import annotations

import argparse

import psutil
import trio

from protocol import (
    KERNEL_ECHO,
    EchoParams,
)
from supervisor import Supervisor, SupervisorConfig, WorkerHandle

from . import Report
from ._stats import MIB, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS: dict[str, tuple[str, float]] = {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=500, help="workers to spawn concurrently")


def _rss_mb(pid: int | None = None) -> float:
    return float(psutil.Process(pid).memory_info().rss) / MIB


async def _measure(n: int) -> Report:
    report: Report = {"n": n}
    me = psutil.Process()
    sup = Supervisor(SupervisorConfig(max_workers=n))
    async with sup:
        baseline_mb = _rss_mb()
        handles: list[WorkerHandle] = []

        async def spawn_one() -> None:
            handles.append(await sup.spawn())

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(spawn_one)
        report["all_ready_s"] = rounded(trio.current_time() - started)
        # When the last pid came back from the zygote (its fork loop's pace),
        # and the median worker's own spawn-to-ready under this load.
        report["last_forked_s"] = rounded(max(h.started_at for h in handles) - started)
        ready_s = sorted(h.ready_at - h.started_at for h in handles if h.ready_at is not None)
        report["handshake_p50_s"] = rounded(ready_s[len(ready_s) // 2])
        supervisor_mb = float(me.memory_info().rss) / MIB
        report["supervisor_rss_mb"] = rounded(supervisor_mb, 1)
        report["supervisor_rss_baseline_mb"] = rounded(baseline_mb, 1)
        report["supervisor_kb_per_worker"] = rounded((supervisor_mb - baseline_mb) * 1024 / n, 1)
        zygote_pid = sup._spawners["zygote"].pid
        if zygote_pid is not None:
            report["zygote_rss_mb"] = rounded(_rss_mb(zygote_pid), 1)
        report["alive"] = sum(handle.alive for handle in handles)

        answered = 0

        async def echo(handle: WorkerHandle, value: int) -> None:
            nonlocal answered
            if (await handle.request(KERNEL_ECHO, EchoParams(value=value))).value == value:
                answered += 1

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i, handle in enumerate(handles):
                nursery.start_soon(echo, handle, i)
        report["echo_all_s"] = rounded(trio.current_time() - started)
        report["echoed"] = answered
        closing = trio.current_time()
    report["shutdown_s"] = rounded(trio.current_time() - closing)
    report["left_running"] = len(sup.workers)
    return report


def run(args: argparse.Namespace) -> Report:
    return trio.run(_measure, max(1, args.n))
