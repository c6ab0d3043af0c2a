"""Workers on the nodes of a real Ray cluster (S-DIST-1, S-DIST-2).

Three nodes on this machine: every node's processes are visible here, so
the tests can check what runs where, and that nothing is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from protocol import (
    KERNEL_ALLOCATE,
    KERNEL_ASK_SUPERVISOR,
    KERNEL_CRASH,
    KERNEL_ECHO,
    KERNEL_FLOOD,
    KERNEL_INFO,
    KERNEL_SLEEP,
    AllocateParams,
    CrashParams,
    EchoParams,
    FloodItem,
    FloodParams,
    InfoParams,
    SleepParams,
)
from supervisor import ExitKind, Supervisor, SupervisorConfig, WorkerExitedError
from supervisor.kernel._node_link import Heartbeat
from tests.distributed.conftest import NODES, RAY, node_args
from tests.support.benchmark_runs import check_benchmark_report
from tests.support.cli import CHECKOUT, cli_env, run_cli
from tests.support.processes import processes_in_tree, wait_until_tree_gone

pytestmark = [pytest.mark.machine_may_lack(RAY), pytest.mark.slow]


@pytest.fixture
async def remote(ray_cluster: Any) -> AsyncIterator[Supervisor]:
    config = SupervisorConfig(placement="ray", ray_address=ray_cluster.address)
    async with Supervisor(config) as sup:
        yield sup


#: The links' heartbeat where a test waits for it: a ping every 0.5 s, and 4 s of silence
#: (not the default 2 s and 10 s) end a link. The same rounds count the silence.
QUICK_HEARTBEAT = Heartbeat(interval_s=0.5, timeout_s=4.0)


@pytest.fixture
async def remote_quick_heartbeat(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Supervisor]:
    """``remote``, its links on ``QUICK_HEARTBEAT``."""
    from supervisor.kernel import _ray_spawner

    monkeypatch.setattr(_ray_spawner, "Heartbeat", lambda: QUICK_HEARTBEAT)
    config = SupervisorConfig(placement="ray", ray_address=ray_cluster.address)
    async with Supervisor(config) as sup:
        yield sup


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if not _gone(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


async def test_workers_spread_over_every_node_and_answer_S_DIST_1(remote: Supervisor) -> None:
    """S-DIST-1: a host per node; workers spread; the same protocol; the local protections."""
    assert len(remote.remote_nodes) == NODES
    handles = [await remote.spawn() for _ in range(NODES)]
    # Spread by live workers: one per node.
    assert {h.node for h in handles} == set(remote.remote_nodes)
    for index, handle in enumerate(handles):
        assert (await handle.request(KERNEL_ECHO, EchoParams(value=index))).value == index
        assert await handle.ping() > 0
        sandbox = handle.sandbox
        assert sandbox is not None
        # No network on a node (Ray's own services included), Ray's directory out of reach.
        assert sandbox.network_denied
        assert any(path.startswith("/tmp/ray") for path in sandbox.hidden)
        assert sandbox.privileges_dropped
        assert "on node" in handle.caps_summary
        # Its environment is the allowlist: nothing of Ray's, no keys; its pid is its node's.
        info = await handle.request(KERNEL_INFO, InfoParams())
        assert info.pid == handle.pid
        assert not [name for name in info.env if "RAY" in name or "KEY" in name]
        # It asks the supervisor through its node host, as a local worker asks over its pipe.
        assert (await handle.request(KERNEL_ASK_SUPERVISOR, EchoParams(value="up"))).value == "up"
    # The worker is the one its node's zygote forked, in this supervisor's tree.
    tree = set(processes_in_tree(remote.tree_id))
    assert {h.pid for h in handles} <= tree
    for handle in handles:
        exit = await handle.shutdown()
        assert exit.ok


async def test_segfault_on_a_remote_node_is_named_S_DIST_1(remote: Supervisor) -> None:
    handle = await remote.spawn()
    assert handle.node is not None
    with pytest.raises(WorkerExitedError):
        await handle.request(KERNEL_CRASH, CrashParams(how="segfault"))
    exit = await handle.wait()
    assert exit.kind is ExitKind.SIGNALED
    assert exit.signal == "SIGSEGV"
    assert "segmentation fault" in exit.reason.lower()
    assert await handle.wait() is exit
    # The node serves the next worker.
    after = await remote.spawn()
    assert (await after.request(KERNEL_ECHO, EchoParams(value=1))).value == 1
    await after.shutdown()


async def test_a_flood_of_events_is_carried_whole_with_backpressure_S_DIST_1(
    remote: Supervisor,
) -> None:
    """More than a channel's window of events, read slowly: all arrive, in order."""
    handle = await remote.spawn()
    count = 3000
    seen: list[int] = []

    async def read() -> None:
        while len(seen) < count:
            for event in await handle.receive_event_batch():
                assert isinstance(event.data, FloodItem)
                seen.append(event.data.seq)
            await trio.sleep(0.001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        assert (
            await handle.request(KERNEL_FLOOD, FloodParams(count=count, size=2048))
        ).count == count
    assert seen == list(range(count))
    assert (await handle.request(KERNEL_ECHO, EchoParams(value=5))).value == 5
    await handle.shutdown()


async def test_a_cap_breached_on_a_remote_node_is_named_by_its_host_S_DIST_1(
    remote: Supervisor,
) -> None:
    """S-SEC-4 on a node: the node host judges the tree and names the cap."""
    from protocol import ResourceLimits

    handle = await remote.spawn(ResourceLimits(memory_mb=150))
    with pytest.raises(WorkerExitedError):
        await handle.request(
            KERNEL_ALLOCATE, AllocateParams(mb=4000, step_mb=16, step_delay_s=0.005)
        )
    exit = await handle.wait()
    assert exit.kind is ExitKind.MEMORY_CAP
    assert "150 MB cap" in exit.reason


async def test_a_node_removed_mid_run_ends_its_workers_once_as_node_lost_S_DIST_2(
    ray_cluster: Any,
) -> None:
    doomed = ray_cluster.add_node(**node_args())
    ray_cluster.wait_for_nodes()
    try:
        config = SupervisorConfig(placement="ray", ray_address=ray_cluster.address)
        async with Supervisor(config) as sup:
            handles = [await sup.spawn() for _ in range(2 * (NODES + 1))]
            on_doomed = [h for h in handles if h.node == doomed.node_id]
            elsewhere = [h for h in handles if h.node != doomed.node_id]
            assert on_doomed and elsewhere, (doomed.node_id, [h.node for h in handles])
            pids = [h.pid for h in on_doomed]
            outcomes: list[BaseException | Any] = []

            async def waits_on(handle: Any) -> None:
                try:
                    outcomes.append(await handle.request(KERNEL_SLEEP, SleepParams(seconds=600)))
                except WorkerExitedError as exc:
                    outcomes.append(exc)

            async with trio.open_nursery() as nursery:
                for handle in on_doomed:
                    nursery.start_soon(waits_on, handle)
                await trio.sleep(0.2)
                # The raylet and everything of the node killed, not asked to stop.
                await trio.to_thread.run_sync(
                    lambda: ray_cluster.remove_node(doomed, allow_graceful=False)
                )
            exits = [await h.wait() for h in on_doomed]
            assert all(e.kind is ExitKind.NODE_LOST for e in exits), exits
            assert all("node lost" in e.reason for e in exits)
            # Once each: the pending request ended with that same exit, and a second wait too.
            assert all(isinstance(o, WorkerExitedError) for o in outcomes)
            assert sorted(id(o.exit) for o in outcomes) == sorted(id(e) for e in exits)
            assert [await h.wait() for h in on_doomed] == exits
            # Nothing of theirs is left on the node.
            assert await trio.to_thread.run_sync(_wait_gone, pids, 30) == []
            # The other nodes go on; the next spawn lands on a live node.
            for handle in elsewhere:
                assert (await handle.request(KERNEL_ECHO, EchoParams(value=2))).value == 2
            after = await sup.spawn()
            assert after.node != doomed.node_id
            assert (await after.request(KERNEL_ECHO, EchoParams(value=3))).value == 3
    finally:
        if doomed in ray_cluster.worker_nodes:
            ray_cluster.remove_node(doomed, allow_graceful=True)


async def test_a_dead_node_host_is_replaced_S_DIST_2(remote: Supervisor) -> None:
    handle = await remote.spawn()
    welcome = remote.remote_nodes[handle.node or ""]
    os.kill(welcome.host_pid, signal.SIGKILL)
    exit = await handle.wait()
    assert exit.kind is ExitKind.NODE_LOST
    # Its zygote and worker died with it.
    assert await trio.to_thread.run_sync(_wait_gone, [welcome.zygote_pid, handle.pid], 30) == []
    # The next spawns, wherever placed, all work; that node gets a fresh host.
    fresh = [await remote.spawn() for _ in range(NODES)]
    for worker in fresh:
        assert (await worker.request(KERNEL_ECHO, EchoParams(value=4))).value == 4
    assert remote.remote_nodes[handle.node or ""].host_pid != welcome.host_pid


async def test_a_remote_workers_rss_is_reported_by_its_node_host_S_DIST_1(
    remote: Supervisor,
) -> None:
    """``top``/``ps`` read ``sample_rss``: for a remote worker, its host's report, and it rises."""
    handle = await remote.spawn()
    assert handle.node is not None

    async def rss_at_least(floor: int) -> int:
        with trio.fail_after(60):
            while True:
                rss = handle.sample_rss()
                if rss is not None and rss >= floor:
                    return rss
                await trio.sleep(0.1)
        raise AssertionError("unreachable")

    before = await rss_at_least(1)
    held = await handle.request(KERNEL_ALLOCATE, AllocateParams(mb=200, step_mb=16))
    assert held.allocated_mb == 200
    after = await rss_at_least(before + 150 * 2**20)
    # Within what the worker itself reads from /proc (it reports after allocating).
    assert after <= held.rss_mb * 1e6 * 1.5
    assert handle.peak_rss_bytes >= after
    await handle.shutdown()
    assert handle.sample_rss() is None


async def test_a_profiles_cpus_claim_places_it_on_a_node_with_them_free_S_DIST_1(
    ray_cluster: Any,
) -> None:
    """A claim goes only to a node with that many CPUs free, waits while that node is full,
    and a claim larger than every node fails at once, in one line naming it and the largest."""
    from protocol import ResourceLimits
    from supervisor.kernel import UnplaceableError

    big = ray_cluster.add_node(**{**node_args(), "num_cpus": 3})
    ray_cluster.wait_for_nodes()
    try:
        config = SupervisorConfig(placement="ray", ray_address=ray_cluster.address)
        async with Supervisor(config) as sup:
            first = await sup.spawn(ResourceLimits(cpus=2))
            assert first.node == big.node_id
            # One CPU is left there and every other node has one: 1.5 fits nowhere now.
            placed: list[Any] = []

            async def spawn_second() -> None:
                placed.append(await sup.spawn(ResourceLimits(cpus=1.5)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(spawn_second)
                for _ in range(20):
                    await trio.sleep(0.1)
                assert placed == []
                await first.shutdown()
            [second] = placed
            assert second.node == big.node_id
            assert (await second.request(KERNEL_ECHO, EchoParams(value=6))).value == 6
            # Unclaimed workers still go anywhere, beside it.
            assert (await (await sup.spawn()).request(KERNEL_ECHO, EchoParams(value=7))).value == 7
            with pytest.raises(UnplaceableError) as caught:
                await sup.spawn(ResourceLimits(cpus=5))
            message = str(caught.value)
            assert "\n" not in message
            assert "asks for 5 CPUs" in message
            assert f"({big.node_id[:8]}), has 3 CPUs;" in message
            await second.shutdown()
    finally:
        # Gracefully: Ray forgets the node at once (see tests/distributed/conftest.py).
        if big in ray_cluster.worker_nodes:
            ray_cluster.remove_node(big, allow_graceful=True)


async def test_a_profile_too_large_for_every_node_fails_its_agent_call_S_DIST_1(
    ray_cluster: Any, tmp_path: Any
) -> None:
    """Through the Agent tool: the error names the profile, its claim and the largest node."""
    from supervisor import RootSession
    from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "wide.md").write_text("---\nname: wide\ndescription: d\ncpus: 8\n---\nGo.\n")
    (agents / "narrow.md").write_text("---\nname: narrow\ndescription: d\ncpus: 1\n---\nGo.\n")
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("fits", "go", subagent_type="narrow"),
                        agent_call("too wide", "go", subagent_type="wide"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "fits": [{"text": "narrow done"}],
        },
    )
    async with subvisor(
        home_for(tmp_path), placement="ray", ray_address=ray_cluster.address
    ) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        runs = {run.launch.subagent_type: run for run in host.runs.values()}
    assert "narrow done" in outcome.text
    narrow = runs["narrow"].handle
    assert narrow is not None and narrow.node is not None
    error = runs["wide"].launch_error
    assert error is not None and "\n" not in error
    assert error.startswith("profile 'wide': it asks for 8 CPUs and the largest node")
    assert "), has 1 CPUs;" in error


async def test_a_stopped_node_host_is_lost_by_heartbeat_S_DIST_2(
    remote_quick_heartbeat: Supervisor,
) -> None:
    """SIGSTOP: its kernel still ACKs, so TCP sees nothing; the heartbeat ends its workers."""
    remote = remote_quick_heartbeat
    handle = await remote.spawn()
    welcome = remote.remote_nodes[handle.node or ""]
    os.kill(welcome.host_pid, signal.SIGSTOP)
    try:
        with pytest.raises(WorkerExitedError):
            await handle.request(KERNEL_SLEEP, SleepParams(seconds=600))
        exit = await handle.wait()
        assert exit.kind is ExitKind.NODE_LOST
        assert "heartbeat" in exit.reason
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(welcome.host_pid, signal.SIGCONT)
    # The stopped host was killed, and its zygote and worker with it.
    assert await trio.to_thread.run_sync(_wait_gone, [welcome.host_pid], 60) == []
    assert await trio.to_thread.run_sync(_wait_gone, [welcome.zygote_pid, handle.pid], 30) == []
    # That node gets a fresh host.
    fresh = [await remote.spawn() for _ in range(NODES)]
    for worker in fresh:
        assert (await worker.request(KERNEL_ECHO, EchoParams(value=8))).value == 8
    assert remote.remote_nodes[handle.node or ""].host_pid != welcome.host_pid


def test_the_supervisor_killed_takes_every_remote_worker_with_it_S_DIST_2(
    ray_cluster: Any, tmp_path: Any
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.remote_fleet", ray_cluster.address, str(2 * NODES)],
        cwd=CHECKOUT,
        env=cli_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        report = json.loads(child.stdout.readline())
        pids = [worker["pid"] for worker in report["workers"]]
        assert len({worker["node"] for worker in report["workers"]}) == NODES
        assert set(pids) <= set(processes_in_tree(report["tree_id"]))
        child.kill()
        child.wait(timeout=30)
        # No orphans on any node: workers, zygotes and node hosts all gone.
        assert wait_until_tree_gone(report["tree_id"], timeout=60) == []
        assert _wait_gone(report["hosts"] + report["zygotes"] + pids, 60) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_stress_across_three_nodes_loses_nothing_S_DIST_2(ray_cluster: Any, tmp_path: Any) -> None:
    """``subvisor stress --ray``: delegation through the whole stack, workers on every node."""
    agents = 1000
    result = run_cli(
        tmp_path / "home",
        "stress",
        "--ray",
        ray_cluster.address,
        "--agents",
        str(agents),
        "--concurrency",
        "60",
        "--json",
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["placement"] == "ray"
    assert summary["lost"] == 0, summary["lost_ids"]
    assert summary["duplicates"] == 0
    assert summary["completed"] == agents
    assert len(summary["workers_per_node"]) == NODES
    assert sum(summary["workers_per_node"].values()) == agents


def test_the_ray_benchmark_reports_its_figures_on_the_cluster(ray_cluster: Any) -> None:
    """``python -m benchmarks ray --address``: every figure of its report, on the shared cluster."""
    check_benchmark_report("ray", "--address", ray_cluster.address)


def test_ray_flag_without_a_cluster_is_one_clear_line(tmp_path: Any) -> None:
    """A bad ``--ray`` address: one line saying what to do, no traceback."""
    result = run_cli(
        tmp_path / "home",
        "stress",
        "--ray",
        "127.0.0.1:1",
        "--agents",
        "1",
        "--json",
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "Ray cluster" in result.stderr
