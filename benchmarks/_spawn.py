"""Spawn-to-ready latency: zygote vs exec, and multiprocessing as the reference.

- zygote / exec: from calling ``Supervisor.spawn`` to it returning the
  handle, i.e. with the hello/welcome handshake done. The zygote's one-time
  boot happens in ``Supervisor.__aenter__`` and is not a sample; each mode
  also gets a few discarded warm-up spawns.
- zygote_sandboxed: the same zygote spawn with a read-only, network-deny
  Landlock sandbox (S-SBX-1): the supervisor makes the worker's temp dir,
  the worker builds and applies the ruleset before its hello. The
  difference to ``zygote`` is the per-spawn cost of the sandbox. Left out
  on a kernel without Landlock network rules (ABI < 4).
- mp_forkserver / mp_spawn: from ``Process.start()`` to receiving ``ready``
  from the child over a ``multiprocessing.Pipe``; the child imports the same
  stack as a worker (``benchmarks._mp_child``). The forkserver preloads that
  module, which makes it the closest ``multiprocessing`` analogue of the
  zygote (fork of a process that already holds the imports).

Every sample's process is killed and reaped before the next sample starts,
so the fleet never grows and samples do not compete for the CPU.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from multiprocessing.context import ForkServerContext, SpawnContext

import trio

from protocol import NETWORK_ABI, SandboxPolicy
from supervisor import SpawnMode, Supervisor, SupervisorConfig
from worker import landlock_abi

from . import Report, _mp_child
from ._stats import percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"zygote_p50_ms": ("<=", 5.0), "zygote_speedup_vs_exec": (">=", 20.0)}

_MP_METHODS = ("forkserver", "spawn")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=50, help="timed spawns per mode")
    parser.add_argument("--warmup", type=int, default=3, help="discarded spawns per mode")


class _ModeSamples:
    """Per-spawn timings of one supervisor mode, split at the spawner's return."""

    def __init__(self) -> None:
        self.total_ms: list[float] = []
        self.pid_known_ms: list[float] = []
        self.handshake_ms: list[float] = []


async def _spawn_samples(
    sup: Supervisor,
    mode: SpawnMode,
    samples: int,
    warmup: int,
    sandbox: SandboxPolicy | None = None,
) -> _ModeSamples:
    out = _ModeSamples()
    for i in range(warmup + samples):
        started = trio.current_time()
        handle = await sup.spawn(mode=mode, sandbox=sandbox)
        done = trio.current_time()
        await handle.kill("benchmark sample done")
        if i < warmup:
            continue
        assert handle.ready_at is not None
        out.total_ms.append((done - started) * 1000)
        # ``started_at`` is stamped when the handle is built, right after the
        # spawner returned the pid: the split between fork/exec and handshake.
        out.pid_known_ms.append((handle.started_at - started) * 1000)
        out.handshake_ms.append((handle.ready_at - handle.started_at) * 1000)
    return out


async def _measure_supervisor(samples: int, warmup: int) -> dict[str, _ModeSamples]:
    config = SupervisorConfig(max_workers=4, spawn_mode="zygote")
    sandbox = SandboxPolicy(mode="read-only", network="deny")
    async with Supervisor(config) as sup:
        measured = {"zygote": await _spawn_samples(sup, "zygote", samples, warmup)}
        if landlock_abi() >= NETWORK_ABI:
            measured["zygote_sandboxed"] = await _spawn_samples(
                sup, "zygote", samples, warmup, sandbox
            )
        measured["exec"] = await _spawn_samples(sup, "exec", samples, warmup)
        return measured


def _measure_mp(method: str, samples: int, warmup: int) -> list[float]:
    ctx: ForkServerContext | SpawnContext
    if method == "forkserver":
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([_mp_child.__name__])
    else:
        ctx = multiprocessing.get_context("spawn")
    out: list[float] = []
    for i in range(warmup + samples):
        parent_conn, child_conn = ctx.Pipe()
        process = ctx.Process(target=_mp_child.signal_ready, args=(child_conn,), daemon=True)
        started = time.perf_counter()
        process.start()
        message = parent_conn.recv_bytes()
        elapsed = time.perf_counter() - started
        if message != _mp_child.READY:
            raise RuntimeError(f"{method} child said {message!r}, not {_mp_child.READY!r}")
        child_conn.close()
        process.kill()
        process.join()
        process.close()
        parent_conn.close()
        if i >= warmup:
            out.append(elapsed * 1000)
    return out


def run(args: argparse.Namespace) -> Report:
    samples: int = max(1, args.samples)
    warmup: int = max(0, args.warmup)
    modes = trio.run(_measure_supervisor, samples, warmup)
    mp = {method: _measure_mp(method, samples, warmup) for method in _MP_METHODS}
    report: Report = {}
    for mode, timings in modes.items():
        report[f"{mode}_p50_ms"] = rounded(percentile(timings.total_ms, 50))
        report[f"{mode}_p95_ms"] = rounded(percentile(timings.total_ms, 95))
    for method, timings_ms in mp.items():
        report[f"mp_{method}_p50_ms"] = rounded(percentile(timings_ms, 50))
        report[f"mp_{method}_p95_ms"] = rounded(percentile(timings_ms, 95))
    report["zygote_speedup_vs_exec"] = rounded(
        percentile(modes["exec"].total_ms, 50) / percentile(modes["zygote"].total_ms, 50), 1
    )
    report["samples"] = samples
    # Where a supervisor spawn's time goes: until the spawner returned a pid
    # (zygote: fork + control-socket report; exec: posix_spawn), then the handshake.
    for mode, timings in modes.items():
        report[f"{mode}_pid_known_p50_ms"] = rounded(percentile(timings.pid_known_ms, 50))
        report[f"{mode}_handshake_p50_ms"] = rounded(percentile(timings.handshake_ms, 50))
    return report
