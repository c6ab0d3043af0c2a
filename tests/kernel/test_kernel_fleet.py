"""Fleet behaviour: caps, no orphans, no zombies, no leaked fds (DESIGN "Processes and trust")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable

import pytest
import trio

from protocol import KERNEL_ECHO, EchoParams
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
            assert (await handle.request(KERNEL_ECHO, EchoParams(value=i))).value == i
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
        assert (await second.request(KERNEL_ECHO, EchoParams(value=2))).value == 2


async def test_no_zombies_and_no_leaked_fds_after_200_spawns() -> None:
    async with Supervisor(SupervisorConfig(max_workers=16)) as sup:
        warm = await sup.spawn()
        await warm.shutdown()
        fds_before = open_fds()

        async def one(i: int) -> None:
            handle = await sup.spawn(mode="exec" if i % 20 == 0 else "zygote")
            await handle.request(KERNEL_ECHO, EchoParams(value=i))
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


async def test_spawns_cancelled_at_any_point_leave_no_worker_and_no_fd() -> None:
    """DESIGN "Processes and trust": a spawn cancelled after it asked the zygote
    for a worker kills that worker and closes its pipes; nothing piles up."""
    async with Supervisor() as sup:
        await (await sup.spawn()).shutdown()
        # The zygote and its pre-forked standbys, once it has refilled them.
        settled = 1 + sup.config.zygote_standby
        fds_before = open_fds()
        cancelled = 0
        for i in range(40):
            # From before the request is sent to after the worker is forked.
            with trio.move_on_after(i * 0.0001) as scope:
                handle = await sup.spawn()
            if scope.cancelled_caught:
                cancelled += 1
            else:
                await handle.shutdown()
        assert cancelled and not sup.workers

        def settled_state() -> tuple[int, set[int]]:
            return len(processes_in_tree(sup.tree_id)), open_fds()

        # Requests already sent are still forked, then killed, by the zygote:
        # on a loaded machine that takes a while.
        with trio.move_on_after(120):
            while settled_state() != (settled, fds_before):  # noqa: ASYNC110 (polling /proc)
                await trio.sleep(0.05)
        assert settled_state() == (settled, fds_before)


async def test_leaving_the_block_stops_every_worker_and_the_zygote() -> None:
    async with Supervisor() as sup:
        pids = {sup.zygote_pid}
        for mode in ("zygote", "exec", "zygote"):
            pids.add((await sup.spawn(mode=mode)).pid)  # type: ignore[arg-type]
        # ... plus the zygote's pre-forked standbys.
        assert pids <= set(processes_in_tree(sup.tree_id))
    assert processes_in_tree(sup.tree_id) == []


async def test_cancellation_stops_every_worker() -> None:
    # On a loaded machine the cancel may land before the zygote is up: the
    # tree must be empty afterwards all the same.
    sup = Supervisor()
    with trio.move_on_after(0.5):
        async with sup:
            for _ in range(5):
                await sup.spawn()
            await trio.sleep_forever()
    assert processes_in_tree(sup.tree_id) == []


_SUPERVISOR_SCRIPT = textwrap.dedent(
    """
    import signal, sys, trio
    from supervisor import Supervisor, SupervisorConfig

    # A shell's background job starts with SIGINT ignored, and Python keeps it
    # so; this test is about what a Ctrl-C does, so the child takes it.
    signal.signal(signal.SIGINT, signal.default_int_handler)

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


async def _cancel_once_a_new_zygote_boots(
    sup: Supervisor, old_zygote: int | None, scope: trio.CancelScope
) -> None:
    # The zygote takes hundreds of ms to import the worker stack, so a cancel
    # sent as soon as its process shows up lands while it boots.
    while not set(processes_in_tree(sup.tree_id)) - {old_zygote}:  # noqa: ASYNC110 (polling /proc)
        await trio.sleep(0.001)
    scope.cancel()


async def _ends_leaving_nothing(body: Callable[[Supervisor], Awaitable[None]]) -> bool:
    """Run ``body`` with a new supervisor; True if it ended by itself and left no process.

    If it still runs after 60 s (a shielded wait for a process no one will
    stop), kill the tree's processes so that the test fails instead of hanging.
    """
    sup = Supervisor()
    rescued = False

    async def watchdog() -> None:
        nonlocal rescued
        await trio.sleep(60)
        rescued = True
        for pid in processes_in_tree(sup.tree_id):
            os.kill(pid, signal.SIGKILL)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog)
        await body(sup)
        nursery.cancel_scope.cancel()
    return not rescued and processes_in_tree(sup.tree_id) == []


async def test_cancelled_while_the_zygote_boots_leaves_nothing_and_does_not_hang() -> None:
    """DESIGN "Processes and trust": a supervisor cancelled during its start kills
    the half-started zygote (its close used to wait for that zygote forever)."""

    async def body(sup: Supervisor) -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_once_a_new_zygote_boots, sup, None, scope)
                async with sup:
                    await trio.sleep_forever()

    assert await _ends_leaving_nothing(body)


async def test_a_spawn_cancelled_while_the_zygote_restarts_leaves_nothing() -> None:
    """A spawn cancelled while it restarts a dead zygote kills that zygote; the
    next spawn starts another."""

    async def body(sup: Supervisor) -> None:
        async with sup:
            await sup.spawn()
            old = sup.zygote_pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            while old in processes_in_tree(sup.tree_id):  # noqa: ASYNC110 (polling /proc)
                await trio.sleep(0.01)
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_cancel_once_a_new_zygote_boots, sup, old, scope)
                    await sup.spawn()
            assert scope.cancelled_caught
            # Nothing of the cancelled start is left running.
            with trio.move_on_after(10):
                while processes_in_tree(sup.tree_id):  # noqa: ASYNC110 (polling /proc)
                    await trio.sleep(0.01)
            assert processes_in_tree(sup.tree_id) == []
            handle = await sup.spawn()
            assert (await handle.request(KERNEL_ECHO, EchoParams(value=1))).value == 1

    assert await _ends_leaving_nothing(body)


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
