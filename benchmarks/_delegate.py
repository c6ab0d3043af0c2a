"""Delegation overhead: a root fans out N scripted subagents through the Agent tool.

Each subagent is a real worker process that makes 3 model calls (each with a
scripted latency) and 2 real tool calls (Read, Grep) on a temporary tree. The
Agent calls are all in one root message, run ``concurrency`` at a time
(``max_concurrent_subagents``). The baseline is what the scripted latencies
alone would cost with perfect packing: ``ceil(N / concurrency)`` waves of
``3 x latency``; everything beyond that, spread over the agents, is
subvisor's overhead per subagent: spawn, handshake, pipes, model gateway,
store writes, output files, teardown.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from protocol import ResourceLimits
from supervisor import RootSession, Subvisor, SubvisorSettings

from . import Report
from ._stats import rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"per_agent_overhead_ms": ("<=", 10.0)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=200, help="subagents to delegate")
    parser.add_argument("--concurrency", type=int, default=50, help="subagents at once")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="per scripted model turn")


def _scenario(agents: int, latency_ms: float) -> dict[str, Any]:
    calls = [
        {
            "name": "Agent",
            "input": {"description": f"agent {i}", "prompt": f"inspect file_{i % 10}.txt"},
        }
        for i in range(agents)
    ]
    scenario: dict[str, Any] = {"root": [{"tool_calls": calls}, {"text": "done"}]}
    for i in range(agents):
        name = f"file_{i % 10}.txt"
        scenario[f"agent {i}"] = [
            {
                "tool_calls": [{"name": "Read", "input": {"file_path": name}}],
                "latency_ms": latency_ms,
            },
            {
                "tool_calls": [{"name": "Grep", "input": {"pattern": "needle", "path": name}}],
                "latency_ms": latency_ms,
            },
            {"text": "found: {{tool_result}}", "latency_ms": latency_ms},
        ]
    return {"agents": scenario}


async def _delegate(work: Path, agents: int, concurrency: int) -> tuple[float, int, float]:
    settings = SubvisorSettings(
        home=work / "home",
        max_concurrent_subagents=concurrency,
        subagent_limits=ResourceLimits(memory_mb=1024, idle_timeout_s=120),
    )
    async with Subvisor(settings) as host:
        root = RootSession(host, model=f"scripted:{work / 'scenario.json'}", cwd=work / "tree")
        started = time.perf_counter()
        await root.run("delegate")
        wall = time.perf_counter() - started
        records = host.registry.list(root.session_id)
        completed = sum(r.status == "completed" for r in records)
        worker_cpu = sum(r.usage.cpu_seconds for r in records)
    return wall, completed, worker_cpu


def run(args: argparse.Namespace) -> Report:
    agents, concurrency = max(1, args.agents), max(1, args.concurrency)
    latency_ms = max(0.0, args.latency_ms)
    with tempfile.TemporaryDirectory(prefix="subvisor-delegate-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        tree.mkdir()
        for i in range(10):
            (tree / f"file_{i}.txt").write_text(f"line one\nthe needle {i}\nline three\n")
        # JSON, not YAML: parsing a 200-agent YAML script takes PyYAML ~0.3 s,
        # which is the fixture's cost, not subvisor's.
        (work / "scenario.json").write_text(json.dumps(_scenario(agents, latency_ms)))
        cpu_before = _cpu_seconds(resource.RUSAGE_SELF)
        children_before = _cpu_seconds(resource.RUSAGE_CHILDREN)
        wall, completed, worker_cpu = trio.run(_delegate, work, agents, concurrency)
        supervisor_cpu = _cpu_seconds(resource.RUSAGE_SELF) - cpu_before
        # The zygote is reaped when the host closes, and with it every worker it reaped.
        children_cpu = _cpu_seconds(resource.RUSAGE_CHILDREN) - children_before
    scripted_s = math.ceil(agents / concurrency) * 3 * latency_ms / 1000
    return {
        "agents": agents,
        "completed": completed,
        "concurrency": concurrency,
        "wall_s": rounded(wall),
        "scripted_latency_s": rounded(scripted_s),
        "per_agent_overhead_ms": rounded(max(0.0, wall - scripted_s) / agents * 1000),
        "supervisor_cpu_s": rounded(supervisor_cpu),
        "supervisor_cpu_per_agent_ms": rounded(supervisor_cpu / agents * 1000),
        "worker_cpu_per_agent_ms": rounded(worker_cpu / agents * 1000),
        # The zygote's forks and reaping, and the standby workers it kept.
        "zygote_cpu_per_agent_ms": rounded(max(0.0, children_cpu - worker_cpu) / agents * 1000),
        # On 2 cores the wall time cannot go below half of this per agent.
        "total_cpu_per_agent_ms": rounded((supervisor_cpu + children_cpu) / agents * 1000),
    }


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime
