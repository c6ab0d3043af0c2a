"""Crash detection: ``os.kill(pid, SIGKILL)`` to ``WorkerHandle.wait()`` returning.

Each sample spawns a fresh worker, waits for one ``echo`` (so it is busy in
its normal idle wait, not in start-up), SIGKILLs it from the benchmark, and
times until the supervisor has built the worker's ``WorkerExit``. In zygote
mode the death travels kernel -> SIGCHLD in the zygote -> ``wait4`` -> report
on the control socket -> supervisor; the pipe EOF is the other half the
supervisor waits for. Samples are sequential.
"""

from __future__ import annotations

import argparse
import os
import signal

import trio

from protocol import (
    KERNEL_ECHO,
    EchoParams,
)
from supervisor import ExitKind, SpawnMode, Supervisor, SupervisorConfig

from . import Report
from ._stats import percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"detect_p99_ms": ("<=", 20.0)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=200, help="workers killed (sequentially)")
    parser.add_argument("--warmup", type=int, default=3, help="discarded samples")
    parser.add_argument("--mode", choices=("zygote", "exec"), default="zygote")


async def _measure(mode: SpawnMode, samples: int, warmup: int) -> tuple[list[float], int]:
    detect_ms: list[float] = []
    misreported = 0
    async with Supervisor(SupervisorConfig(max_workers=4, spawn_mode=mode)) as sup:
        for i in range(warmup + samples):
            handle = await sup.spawn()
            await handle.request(KERNEL_ECHO, EchoParams(value=i))
            started = trio.current_time()
            os.kill(handle.pid, signal.SIGKILL)
            exit = await handle.wait()
            elapsed = trio.current_time() - started
            if i < warmup:
                continue
            detect_ms.append(elapsed * 1000)
            if exit.kind is not ExitKind.SIGNALED or exit.signal != "SIGKILL":
                misreported += 1
    return detect_ms, misreported


def run(args: argparse.Namespace) -> Report:
    samples: int = max(1, args.samples)
    detect_ms, misreported = trio.run(_measure, args.mode, samples, max(0, args.warmup))
    return {
        "detect_p50_ms": rounded(percentile(detect_ms, 50)),
        "detect_p99_ms": rounded(percentile(detect_ms, 99)),
        "samples": samples,
        "detect_p95_ms": rounded(percentile(detect_ms, 95)),
        "detect_max_ms": rounded(max(detect_ms)),
        # Exits not reported as "signal" / SIGKILL: should be 0.
        "misreported": misreported,
    }
