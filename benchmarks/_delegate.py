"""Delegation overhead: a root fans out N scripted subagents through the Agent tool.

Each subagent is a real worker process that makes 3 model calls (each with a
scripted latency) and 2 real tool calls (Read, Grep) on a temporary tree. The
Agent calls are all in one root message, run ``concurrency`` at a time
(``max_concurrent_subagents``). The baseline is what the scripted latencies
alone would cost with perfect packing: ``ceil(N / concurrency)`` waves of
``3 x latency``; everything beyond that, spread over the agents, is
subvisor's overhead per subagent: spawn, handshake, pipes, model gateway,
store writes, output files, teardown.

The workflow case (``--workflow-asks N``, 0 skips it) puts an actor's ask
beside a plain subagent, each one model call of ``--latency-ms``, one at a
time: a root delegating N foreground subagents in N turns; a root's
CreateWorkflow whose script asks one actor N times (a warm worker, the
conversation growing); and one whose script asks N actors once each (a
worker each). What each costs beyond its latency, per ask, is the
supervisor's overhead; ``actor_vs_subagent`` is the new-actor figure over
the subagent's, both measured in this run.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from protocol import ResourceLimits
from supervisor import RootSession, Subvisor, SubvisorSettings
from supervisor.workflow import workflow_tools

from . import Report
from ._stats import rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"per_agent_overhead_ms": ("<=", 10.0)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=200, help="subagents to delegate")
    parser.add_argument("--concurrency", type=int, default=50, help="subagents at once")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="per scripted model turn")
    parser.add_argument(
        "--workflow-asks", type=int, default=20, help="asks of the workflow case (0: skip it)"
    )


#: The workflow case's scripts: one actor asked N times, N actors asked once.
_ONE_ACTOR = """
from supervisor.workflow import agent, workflow

@workflow
async def repeat(ctx, asks: int):
    actor = agent("same", system="You answer.")
    return [await actor.ask(f"question {i}") for i in range(asks)]
"""
_MANY_ACTORS = """
from supervisor.workflow import agent, workflow

@workflow
async def spread(ctx, asks: int):
    return [await agent(f"a{i}", system="You answer.").ask("question") for i in range(asks)]
"""


def _workflow_scenarios(asks: int, latency_ms: float) -> dict[str, dict[str, Any]]:
    turn = {"text": "answer", "latency_ms": latency_ms}
    subagents: dict[str, Any] = {
        "root": [
            {"tool_calls": [{"name": "Agent", "input": {"description": f"sub {i}", "prompt": "q"}}]}
            for i in range(asks)
        ]
        + [{"text": "done"}]
    }
    subagents.update({f"sub {i}": [turn] for i in range(asks)})

    def created(script: str) -> list[dict[str, Any]]:
        call = {"script": script, "description": "bench", "inputs": {"asks": asks}}
        return [
            {"tool_calls": [{"name": "CreateWorkflow", "input": call}]},
            {"text": "started"},
            {"text": "done"},
        ]

    one = {"root": created(_ONE_ACTOR), "same": [turn] * asks}
    many: dict[str, Any] = {"root": created(_MANY_ACTORS)}
    many.update({f"a{i}": [turn] for i in range(asks)})
    return {"subagents": {"agents": subagents}, "one": {"agents": one}, "many": {"agents": many}}


async def _timed_root(work: Path, scenario: str, asks: int) -> float:
    settings = SubvisorSettings(
        home=work / "home",
        subagent_limits=ResourceLimits(memory_mb=1024, idle_timeout_s=120),
        root_max_turns=10_000,
        # Each actor keeps its worker for the run, and the script has one.
        max_concurrent_subagents=asks + 2,
    )
    async with Subvisor(settings) as host:
        root = RootSession(
            host,
            model=f"scripted:{work / scenario}",
            cwd=work / "tree",
            extra_tools=workflow_tools(host),
        )
        started = time.perf_counter()
        await root.run("go")
        wall = time.perf_counter() - started
        failed = [r for r in host.registry.list(root.session_id) if r.status != "completed"]
        if failed:
            raise RuntimeError(
                f"{scenario}: {failed[0].task_id} {failed[0].status}: {failed[0].error}"
            )
    return wall


def _workflow_case(work: Path, asks: int, latency_ms: float) -> dict[str, Any]:
    for name, scenario in _workflow_scenarios(asks, latency_ms).items():
        (work / f"{name}.json").write_text(json.dumps(scenario))
    latency_s = asks * latency_ms / 1000

    def overhead_ms(name: str) -> float:
        wall = trio.run(_timed_root, work, f"{name}.json", asks)
        return max(0.0, wall - latency_s) / asks * 1000

    subagent = overhead_ms("subagents")
    same_actor = overhead_ms("one")
    new_actor = overhead_ms("many")
    return {
        "workflow_asks": asks,
        "per_subagent_overhead_ms": rounded(subagent),
        "per_ask_same_actor_overhead_ms": rounded(same_actor),
        "per_ask_new_actor_overhead_ms": rounded(new_actor),
        "actor_vs_subagent": rounded(new_actor / subagent) if subagent else 0.0,
    }


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


@dataclass
class _Delegated:
    wall_s: float
    completed: int
    worker_cpu_s: float
    #: The supervisor's CPU to start (Subvisor and root, before the first
    #: model call) and to stop (after the root's answer): inside the measured
    #: run, and reported apart too, as a cost paid once per run, not per agent.
    start_cpu_s: float = 0.0
    stop_cpu_s: float = 0.0


async def _delegate(work: Path, agents: int, concurrency: int) -> _Delegated:
    settings = SubvisorSettings(
        home=work / "home",
        max_concurrent_subagents=concurrency,
        # Every agent asked for runs: above the default session cap (200) the
        # rest would be refused, and the per-agent figures divided by agents
        # that never ran.
        max_subagents_per_session=agents,
        subagent_limits=ResourceLimits(memory_mb=1024, idle_timeout_s=120),
    )
    cpu_before = _cpu_seconds(resource.RUSAGE_SELF)
    async with Subvisor(settings) as host:
        root = RootSession(host, model=f"scripted:{work / 'scenario.json'}", cwd=work / "tree")
        started = time.perf_counter()
        start_cpu = _cpu_seconds(resource.RUSAGE_SELF) - cpu_before
        await root.run("delegate")
        wall = time.perf_counter() - started
        records = host.registry.list(root.session_id)
        completed = sum(r.status == "completed" for r in records)
        worker_cpu = sum(r.usage.cpu_seconds for r in records)
        cpu_before = _cpu_seconds(resource.RUSAGE_SELF)
    stop_cpu = _cpu_seconds(resource.RUSAGE_SELF) - cpu_before
    return _Delegated(wall, completed, worker_cpu, start_cpu, stop_cpu)


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
        own_before = resource.getrusage(resource.RUSAGE_SELF)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run = trio.run(_delegate, work, agents, concurrency)
        wall, completed, worker_cpu = run.wall_s, run.completed, run.worker_cpu_s
        own = resource.getrusage(resource.RUSAGE_SELF)
        supervisor_user = own.ru_utime - own_before.ru_utime
        supervisor_sys = own.ru_stime - own_before.ru_stime
        supervisor_cpu = supervisor_user + supervisor_sys
        # The zygote is reaped when the host closes, and with it every worker it reaped.
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        children_user = children.ru_utime - children_before.ru_utime
        children_sys = children.ru_stime - children_before.ru_stime
        children_cpu = children_user + children_sys
        children_faults = children.ru_minflt - children_before.ru_minflt
        workflow = (
            _workflow_case(work, args.workflow_asks, latency_ms) if args.workflow_asks > 0 else {}
        )
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
        # Its two parts. The kernel's includes creating each task's dir and
        # files (five inodes; the zygote makes the worker's temp dir): on ext4
        # without a journal up to about 1 ms each while their block group
        # holds inodes freed in the last few minutes (an earlier run's
        # cleanup), tens of us in a fresh group.
        "supervisor_user_cpu_per_agent_ms": rounded(supervisor_user / agents * 1000),
        "supervisor_sys_cpu_per_agent_ms": rounded(supervisor_sys / agents * 1000),
        # Both are inside supervisor_cpu_s as well: paid once per run, not per agent.
        "supervisor_start_cpu_ms": rounded(run.start_cpu_s * 1000),
        "supervisor_stop_cpu_ms": rounded(run.stop_cpu_s * 1000),
        "worker_cpu_per_agent_ms": rounded(worker_cpu / agents * 1000),
        # The zygote's forks and reaping, and the standby workers it kept.
        "zygote_cpu_per_agent_ms": rounded(max(0.0, children_cpu - worker_cpu) / agents * 1000),
        # The zygote's and its workers' CPU split: the kernel's part is mostly
        # copying the zygote's pages a worker writes to (its page faults) and
        # tearing down a worker's memory when it exits.
        "children_user_cpu_per_agent_ms": rounded(children_user / agents * 1000),
        "children_sys_cpu_per_agent_ms": rounded(children_sys / agents * 1000),
        # On 2 cores the wall time cannot go below half of this per agent.
        "total_cpu_per_agent_ms": rounded((supervisor_cpu + children_cpu) / agents * 1000),
        # The zygote's and its workers' minor page faults: mostly copies of the
        # zygote's pages that a worker writes to (a few microseconds each).
        "child_page_faults_per_agent": round(children_faults / agents),
        **workflow,
    }


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime
