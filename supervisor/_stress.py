"""``subvisor stress``: many scripted subagents, faults injected, and an audit of what was lost.

A root delegates N scripted subagents in one message (a mix of foreground
and background), each doing real tool calls on a temporary tree; a share of
them crash for real (segfault, exit, oom, hang). Afterwards every launched
agent must have exactly one terminal record, and every background one
exactly one notification: anything else is reported as lost or duplicated,
and the command fails.
"""

from __future__ import annotations

import random
import re
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import psutil
import trio
import yaml

from protocol import ResourceLimits

from ._host import Subvisor
from ._root import RootSession
from ._settings import SubvisorSettings

__all__ = ["FAULTS", "run_stress"]

Fault = Literal["segfault", "exit", "oom", "hang"]
FAULTS: tuple[Fault, ...] = ("segfault", "exit", "oom", "hang")


def _latency(spec: str, rng: random.Random) -> float:
    low, _, high = spec.partition("-")
    return rng.uniform(float(low), float(high)) if high else float(low)


def _scenario(
    agents: int,
    background_ratio: float,
    fault_rate: float,
    faults: tuple[Fault, ...],
    turns: int,
    latency: str,
    rng: random.Random,
) -> tuple[dict[str, Any], dict[str, str | None]]:
    calls: list[dict[str, Any]] = []
    planned: dict[str, str | None] = {}
    scenario: dict[str, Any] = {}
    for i in range(agents):
        name = f"agent {i}"
        background = rng.random() < background_ratio
        fault = rng.choice(faults) if faults and rng.random() < fault_rate else None
        planned[name] = fault
        calls.append(
            {
                "name": "Agent",
                "input": {
                    "description": name,
                    "prompt": f"inspect part {i}",
                    "run_in_background": background,
                },
            }
        )
        steps: list[dict[str, Any]] = []
        for turn in range(turns - 1):
            tool = (
                {"name": "Grep", "input": {"pattern": f"line {turn}", "path": f"f{i % 8}.txt"}}
                if turn % 2
                else {"name": "Read", "input": {"file_path": f"f{i % 8}.txt"}}
            )
            steps.append({"tool_calls": [tool], "latency_ms": _latency(latency, rng)})
        steps.append({"text": f"agent {i} done", "latency_ms": _latency(latency, rng)})
        if fault is not None:
            steps[min(len(steps) - 1, rng.randrange(len(steps)))]["fault"] = fault
        scenario[name] = steps
    root = [{"tool_calls": calls}, {"text": "launched"}] + [{"text": "noted"}] * (agents + 1)
    return {"agents": {"root": root, **scenario}}, planned


async def _drive(
    work: Path, model: str, agents: int, concurrency: int, idle_timeout_s: float
) -> dict[str, Any]:
    settings = SubvisorSettings(
        home=work / "home",
        max_concurrent_subagents=concurrency,
        max_subagents_per_session=max(agents, 1),
        subagent_limits=ResourceLimits(memory_mb=256, idle_timeout_s=idle_timeout_s),
    )
    me = psutil.Process()
    peak_rss = me.memory_info().rss
    peak_workers = 0
    async with Subvisor(settings) as host:
        root = RootSession(host, model=model, cwd=work / "tree")
        started = time.monotonic()
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal peak_rss, peak_workers
                while True:
                    peak_workers = max(peak_workers, len(host.supervisor.workers))
                    peak_rss = max(peak_rss, me.memory_info().rss)
                    await trio.sleep(0.05)

            nursery.start_soon(watch)
            await root.run("stress")
            nursery.cancel_scope.cancel()
        wall = time.monotonic() - started
        records = host.registry.list(root.session_id)
        stored = host.store.tasks_for_session(root.session_id)
        spawn_ms = [
            (run.ready_at - run.started_at) * 1000
            for run in host.runs.values()
            if run.ready_at is not None
        ]
        delivered = root.queue.delivered_at
        notify_ms = [
            (delivered[r.task_id] - r.ended_at) * 1000
            for r in records
            if r.task_id in delivered and r.ended_at is not None
        ]
        notified_ids = [
            task_id
            for message in root.loop.messages
            if message.role == "user"
            for task_id in re.findall(r"<task-id>(.*?)</task-id>", message.content)
        ]
    return {
        "records": records,
        "stored": stored,
        "spawn_ms": spawn_ms,
        "notify_ms": notify_ms,
        "notified_ids": notified_ids,
        "wall_s": wall,
        "peak_workers": peak_workers,
        "peak_rss": peak_rss,
    }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def run_stress(
    *,
    agents: int,
    concurrency: int,
    background_ratio: float = 0.5,
    fault_rate: float = 0.0,
    faults: tuple[Fault, ...] = FAULTS,
    turns: int = 2,
    latency: str = "10",
    seed: int = 0,
    idle_timeout_s: float = 5.0,
) -> dict[str, Any]:
    """Run a stress session; return the report (``lost`` and ``duplicates`` must be 0)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="subvisor-stress-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        tree.mkdir()
        for i in range(8):
            (tree / f"f{i}.txt").write_text("".join(f"line {n}\n" for n in range(20)))
        scenario, planned = _scenario(
            agents, background_ratio, fault_rate, faults, max(1, turns), latency, rng
        )
        (work / "scenario.yaml").write_text(yaml.safe_dump(scenario))
        cpu_before = psutil.Process().cpu_times()
        result = trio.run(
            _drive, work, f"scripted:{work / 'scenario.yaml'}", agents, concurrency, idle_timeout_s
        )
        cpu_after = psutil.Process().cpu_times()
    records = result["records"]
    by_description = {r.description: r for r in records}
    terminal = [r for r in records if r.is_terminal]
    background = [r for r in records if r.background]
    counts = Counter(result["notified_ids"])
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    lost = sorted(
        [name for name in planned if name not in by_description]
        + [r.task_id for r in records if not r.is_terminal]
        + [r.task_id for r in background if counts[r.task_id] != 1]
    )
    stored = {r.task_id: r.status for r in result["stored"]}
    lost += sorted(r.task_id for r in records if stored.get(r.task_id) != r.status)
    failed = Counter(
        (r.worker_exit or r.error or "unknown").split(":")[0]
        for r in terminal
        if r.status != "completed"
    )
    spawn = result["spawn_ms"]
    return {
        "agents": agents,
        "concurrency": concurrency,
        "completed": sum(r.status == "completed" for r in terminal),
        "failed": sum(failed.values()),
        "failed_by_reason": dict(failed),
        "faults_planned": sum(fault is not None for fault in planned.values()),
        "background": len(background),
        "notifications": len(result["notified_ids"]),
        "duplicates": duplicates,
        "lost": len(lost),
        "lost_ids": lost[:20],
        "wall_s": round(result["wall_s"], 3),
        "launch_to_ready_p50_ms": round(_percentile(spawn, 50), 2),
        "launch_to_ready_p99_ms": round(_percentile(spawn, 99), 2),
        "launch_to_ready_mean_ms": round(statistics.fmean(spawn), 2) if spawn else 0.0,
        # From a background agent's end to its notification reaching the root.
        "notification_p50_ms": round(_percentile(result["notify_ms"], 50), 2),
        "notification_p99_ms": round(_percentile(result["notify_ms"], 99), 2),
        "peak_concurrent_workers": result["peak_workers"],
        "supervisor_cpu_s": round(
            (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system), 3
        ),
        "supervisor_peak_rss_mb": round(result["peak_rss"] / 2**20, 1),
        "workers_peak_rss_sum_mb": round(sum(r.usage.peak_rss_bytes for r in records) / 2**20, 1),
    }
