"""Workers on a Ray cluster: subvisor's node hosts against local workers and plain Ray actors.

All in one run, on one cluster (started here with ``ray.cluster_utils``,
three nodes on this machine, unless ``--address`` names one):

- spawn-to-ready: ``Supervisor.spawn`` with ``placement = "ray"`` (a worker
  forked by its node's zygote, its handshake through the node host) against
  the local zygote, and against a Ray actor from ``.remote()`` to its first
  reply: cold (a fresh worker process each: a runtime env of its own) and
  warm (Ray's prestarted worker processes);
- round trip: an ``echo`` request through the node host, against a local
  worker's pipe and against a Ray actor method call;
- idle worker USS on a node against a local one (the nodes are on this
  machine, so their processes can be read here);
- throughput: N agents (spawn, one request, shutdown; ``--concurrency`` at a
  time) spread over the nodes, against the same on the local zygote: agents
  per second, and the supervisor process's CPU per agent.

Ray's driver-side measurements come first, then the supervisors', since each
remote supervisor connects to Ray and leaves it when it closes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import psutil
import trio

from protocol import (
    KERNEL_ECHO,
    EchoParams,
)
from supervisor import Supervisor, SupervisorConfig

from . import Report
from ._stats import MIB, percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {
    "remote_spawn_speedup_vs_cold_actor": (">=", 10.0),
    "remote_idle_uss_ratio_vs_local": ("<=", 1.2),
}

_OBJECT_STORE_BYTES = 80 * MIB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", help="an existing cluster (default: start 3 nodes here)")
    parser.add_argument("--nodes", type=int, default=3, help="nodes of the cluster started here")
    parser.add_argument("--samples", type=int, default=30, help="timed spawns and round trips")
    parser.add_argument("--cold-samples", type=int, default=5, help="cold Ray actors timed")
    parser.add_argument("--idle", type=int, default=6, help="idle workers whose USS is read")
    parser.add_argument("--agents", type=int, default=120, help="agents of the throughput run")
    parser.add_argument("--concurrency", type=int, default=24, help="agents alive at once")


@contextlib.contextmanager
def _cluster(address: str | None, nodes: int) -> Iterator[str]:
    if address is not None:
        yield address
        return
    from ray.cluster_utils import Cluster

    args: dict[str, Any] = {"num_cpus": 1, "object_store_memory": _OBJECT_STORE_BYTES}
    # Ray's own annotations are partial: its objects are used as Any here.
    cluster: Any = Cluster(initialize_head=True, head_node_args=args)
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**args)
        cluster.wait_for_nodes()
        yield str(cluster.address)
    finally:
        cluster.shutdown()


class _Echo:
    """The plain Ray actor compared against: one method, answering at once."""

    def echo(self, value: Any) -> Any:
        return value


def _ray_actor_samples(address: str, samples: int, cold: int) -> dict[str, list[float]]:
    import ray

    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        actor_class: Any = ray.remote(num_cpus=0)(_Echo)
        out: dict[str, list[float]] = {"cold": [], "warm": [], "call": []}
        for index in range(cold):
            started = time.perf_counter()
            # A runtime env of its own: Ray must start a fresh worker process.
            actor = actor_class.options(
                runtime_env={"env_vars": {"SUBVISOR_BENCH_COLD": str(index)}}
            ).remote()
            ray.get(actor.echo.remote(index))
            out["cold"].append((time.perf_counter() - started) * 1000)
            ray.kill(actor)
        for index in range(samples):
            started = time.perf_counter()
            actor = actor_class.remote()
            ray.get(actor.echo.remote(index))
            out["warm"].append((time.perf_counter() - started) * 1000)
            ray.kill(actor)
        actor = actor_class.remote()
        ray.get(actor.echo.remote(0))
        for index in range(samples * 10):
            started = time.perf_counter()
            ray.get(actor.echo.remote(index))
            out["call"].append((time.perf_counter() - started) * 1e6)
        ray.kill(actor)
        return out
    finally:
        ray.shutdown()


async def _supervisor_samples(config: SupervisorConfig, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"spawn": [], "round": [], "uss": []}
    async with Supervisor(config) as sup:
        for _ in range(3):  # warm-up: every node host and zygote started and paged in
            await (await sup.spawn()).shutdown()
        for _ in range(args.samples):
            started = time.perf_counter()
            handle = await sup.spawn()
            out["spawn"].append((time.perf_counter() - started) * 1000)
            await handle.shutdown()
        handle = await sup.spawn()
        for index in range(args.samples * 10):
            started = time.perf_counter()
            await handle.request(KERNEL_ECHO, EchoParams(value=index))
            out["round"].append((time.perf_counter() - started) * 1e6)
        await handle.shutdown()
        idle = [await sup.spawn() for _ in range(args.idle)]
        for index, worker in enumerate(idle):
            await worker.request(KERNEL_ECHO, EchoParams(value=index))
        await trio.sleep(0.2)
        out["uss"] = [psutil.Process(w.pid).memory_full_info().uss / MIB for w in idle]
        out["nodes"] = len({w.node for w in idle})
        for worker in idle:
            await worker.shutdown()
        # The whole process's CPU (Ray's driver threads too), to the nanosecond.
        cpu_before = time.process_time()
        started = time.perf_counter()
        limit = trio.CapacityLimiter(args.concurrency)

        async def agent(index: int) -> None:
            async with limit:
                worker = await sup.spawn()
                await worker.request(KERNEL_ECHO, EchoParams(value=index))
                await worker.shutdown()

        async with trio.open_nursery() as nursery:
            for index in range(args.agents):
                nursery.start_soon(agent, index)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        out["agents_per_s"] = args.agents / wall
        out["cpu_ms_per_agent"] = cpu * 1000 / args.agents
    return out


def run(args: argparse.Namespace) -> Report:
    with _cluster(args.address, max(1, args.nodes)) as address:
        actor = _ray_actor_samples(address, max(1, args.samples), max(1, args.cold_samples))
        workers = max(args.concurrency, args.idle) + 2
        local = trio.run(_supervisor_samples, SupervisorConfig(max_workers=workers), args)
        remote_config = SupervisorConfig(max_workers=workers, placement="ray", ray_address=address)
        remote = trio.run(_supervisor_samples, remote_config, args)
    remote_p50 = percentile(remote["spawn"], 50)
    report: Report = {
        "remote_spawn_p50_ms": rounded(remote_p50),
        "remote_spawn_p99_ms": rounded(percentile(remote["spawn"], 99)),
        "local_spawn_p50_ms": rounded(percentile(local["spawn"], 50)),
        "local_spawn_p99_ms": rounded(percentile(local["spawn"], 99)),
        "cold_actor_p50_ms": rounded(percentile(actor["cold"], 50)),
        "warm_actor_p50_ms": rounded(percentile(actor["warm"], 50)),
        "warm_actor_p99_ms": rounded(percentile(actor["warm"], 99)),
        "remote_spawn_speedup_vs_cold_actor": rounded(percentile(actor["cold"], 50) / remote_p50),
        "remote_spawn_speedup_vs_warm_actor": rounded(percentile(actor["warm"], 50) / remote_p50),
        "remote_round_trip_p50_us": rounded(percentile(remote["round"], 50)),
        "remote_round_trip_p99_us": rounded(percentile(remote["round"], 99)),
        "local_round_trip_p50_us": rounded(percentile(local["round"], 50)),
        "actor_call_p50_us": rounded(percentile(actor["call"], 50)),
        "actor_call_p99_us": rounded(percentile(actor["call"], 99)),
        "remote_idle_uss_mb_p50": rounded(percentile(remote["uss"], 50)),
        "local_idle_uss_mb_p50": rounded(percentile(local["uss"], 50)),
        "remote_idle_uss_ratio_vs_local": rounded(
            percentile(remote["uss"], 50) / percentile(local["uss"], 50)
        ),
        "remote_agents_per_s": rounded(remote["agents_per_s"]),
        "local_agents_per_s": rounded(local["agents_per_s"]),
        "remote_supervisor_cpu_ms_per_agent": rounded(remote["cpu_ms_per_agent"]),
        "local_supervisor_cpu_ms_per_agent": rounded(local["cpu_ms_per_agent"]),
        "nodes_used": remote["nodes"],
        "agents": args.agents,
        "samples": args.samples,
    }
    return report
