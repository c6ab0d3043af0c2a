"""Fleet behaviour: caps, no orphans, no zombies, no leaked fds (DESIGN "Processes and trust")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import trio

from supervisor import (
    FleetCapacityError,
    FleetExhaustedError,
    Supervisor,
    SupervisorConfig,
)
from tests.support.processes import (
    open_fds,
    processes_in_tree,
    wait_until_tree_gone,
    zombie_children,
)


async def test_200_concurrent_spawns_under_a_cap_of_32_all_finish() -> None:
    alive_peak = 0
    finished = 0
    async with Supervisor(SupervisorConfig(max_workers=32)) as sup:

        async def one(i: int) -> None:
            nonlocal alive_peak, finished
            handle = await sup.spawn()
            alive_peak = max(alive_peak, len(sup.workers))
            assert await handle.request("echo", {"value": i}) == i
            exit = await handle.shutdown()
            assert exit.ok, exit.reason
            finished += 1

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(one, i)
    assert finished == 200
    assert alive_peak <= 32


async def test_max_total_workers_fails_further_spawns_clearly() -> None:
    async with Supervisor(SupervisorConfig(max_total_workers=2)) as sup:
        await sup.spawn()
        await sup.spawn()
        with pytest.raises(FleetExhaustedError, match="already started 2 workers"):
            await sup.spawn()


async def test_spawn_waits_for_a_slot_and_times_out_clearly() -> None:
    config = SupervisorConfig(max_workers=1, spawn_timeout_s=0.2)
    async with Supervisor(config) as sup:
        first = await sup.spawn()
        with pytest.raises(FleetCapacityError, match="all 1 worker slots stayed busy"):
            await sup.spawn()
        await first.shutdown()
        second = await sup.spawn()  # the slot came back
        assert await second.request("echo", {"value": 2}) == 2


async def test_no_zombies_and_no_leaked_fds_after_200_spawns() -> None:
    async with Supervisor(SupervisorConfig(max_workers=16)) as sup:
        warm = await sup.spawn()
        await warm.shutdown()
        fds_before = open_fds()

        async def one(i: int) -> None:
            handle = await sup.spawn(mode="exec" if i % 20 == 0 else "zygote")
            await handle.request("echo", {"value": i})
            if i % 2:
                await handle.shutdown()
            else:
                await handle.kill()

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(one, i)
        assert not sup.workers
        assert open_fds() == fds_before
        assert sup.zygote_pid is not None
        assert zombie_children(sup.zygote_pid) == []
        assert zombie_children(os.getpid()) == []


async def test_leaving_the_block_stops_every_worker_and_the_zygote() -> None:
    async with Supervisor() as sup:
        pids = {sup.zygote_pid}
        for mode in ("zygote", "exec", "zygote"):
            pids.add((await sup.spawn(mode=mode)).pid)  # type: ignore[arg-type]
        # ... plus the zygote's pre-forked standbys.
        assert pids <= set(processes_in_tree(sup.tree_id))
    assert processes_in_tree(sup.tree_id) == []


async def test_cancellation_stops_every_worker() -> None:
    tree = ""
    with trio.move_on_after(0.5):
        async with Supervisor() as sup:
            tree = sup.tree_id
            for _ in range(5):
                await sup.spawn()
            await trio.sleep_forever()
    assert tree and processes_in_tree(tree) == []


_SUPERVISOR_SCRIPT = textwrap.dedent(
    """
    import sys, trio
    from supervisor import Supervisor, SupervisorConfig

    async def main():
        async with Supervisor(SupervisorConfig(max_workers=64)) as sup:
            for i in range(int(sys.argv[1])):
                await sup.spawn(mode="exec" if i % 5 == 0 else "zygote")
            print(sup.tree_id, flush=True)
            await trio.sleep_forever()

    trio.run(main)
    """
)


def _start_supervisor_process(workers: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SUPERVISOR_SCRIPT, str(workers)],
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "SUBVISOR_TREE"},
    )
    assert proc.stdout is not None
    tree_id = proc.stdout.readline().strip()
    assert tree_id.startswith("tree_"), tree_id
    # The zygote, the workers and the zygote's standbys.
    assert len(processes_in_tree(tree_id)) >= workers + 1
    return proc, tree_id


def test_supervisor_killed_with_sigkill_leaves_no_process_of_its_tree() -> None:
    """SIGKILL gives the supervisor no chance to clean up: the kernel must do it."""
    proc, tree_id = _start_supervisor_process(20)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_until_tree_gone(tree_id, timeout=2.0) == []


def test_ctrl_c_shuts_the_tree_down_in_order() -> None:
    proc, tree_id = _start_supervisor_process(5)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    assert wait_until_tree_gone(tree_id, timeout=2.0) == []
