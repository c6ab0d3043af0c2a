"""Spawning workers and talking to them (DESIGN "Processes and trust", S-POL-4)."""

from __future__ import annotations

import os
import resource
import signal

import psutil
import pytest
import trio
from pydantic import ValidationError

from protocol import (
    KERNEL_ASK_SUPERVISOR,
    KERNEL_ECHO,
    KERNEL_FLOOD,
    KERNEL_INFO,
    KERNEL_SLEEP,
    EchoParams,
    EchoResult,
    FloodItem,
    FloodParams,
    InfoParams,
    ResourceLimits,
    SleepParams,
    WorkerRequest,
)
from supervisor import (
    NestedSupervisorError,
    RequestRefusedError,
    Supervisor,
    SupervisorConfig,
    WorkerHandle,
    WorkerRequestError,
)
from supervisor.kernel._environment import ENV_ALLOWLIST
from tests.support.processes import processes_in_tree


@pytest.mark.parametrize("mode", ["zygote", "exec"])
async def test_spawned_worker_answers_requests_in_both_modes(sup: Supervisor, mode: str) -> None:
    handle = await sup.spawn(mode=mode)  # type: ignore[arg-type]
    assert handle.hello is not None
    assert handle.hello.spawn_mode == mode
    assert handle.hello.pid == handle.pid
    echoed = await handle.request(KERNEL_ECHO, EchoParams(value={"nested": [1, "two", 3.5, None]}))
    assert echoed == EchoResult(value={"nested": [1, "two", 3.5, None]})
    info = await handle.request(KERNEL_INFO, InfoParams())
    assert info.pid == handle.pid
    # Own process group, so a group kill reaches whatever the worker starts.
    assert info.pgid == handle.pid
    expected_parent = sup.zygote_pid if mode == "zygote" else os.getpid()
    assert info.ppid == expected_parent
    exit = await handle.shutdown()
    assert exit.ok, exit.reason


async def test_worker_environment_is_an_allowlist_without_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No API key reaches a worker: its environment is scrubbed to an allowlist."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("SOME_TOKEN", "t0ken")
    async with Supervisor() as sup:
        for mode in ("zygote", "exec"):
            handle = await sup.spawn(mode=mode)  # type: ignore[arg-type]
            env = (await handle.request(KERNEL_INFO, InfoParams())).env
            assert env["SUBVISOR_TREE"] == sup.tree_id
            assert set(env) <= ENV_ALLOWLIST | {"SUBVISOR_TREE", "PYTHONPATH"}
            assert "sk-" not in repr(env) and "t0ken" not in repr(env)


async def test_resource_limits_are_applied_before_ready(sup: Supervisor) -> None:
    limits = ResourceLimits(cpu_seconds=30, address_space_mb=4096, open_files=256)
    handle = await sup.spawn(limits)
    assert handle.hello is not None
    assert handle.hello.rlimits["RLIMIT_CPU"][0] == 30
    assert handle.hello.rlimits["RLIMIT_NOFILE"] == [256, 256]
    info = await handle.request(KERNEL_INFO, InfoParams())
    assert tuple(info.rlimits["RLIMIT_AS"]) == (4096 * 2**20, 4096 * 2**20)
    assert tuple(info.rlimits["RLIMIT_CORE"]) == (0, 0)
    # Of pipes, the worker holds only its own two ends, and as stdout and
    # stderr the stderr relay's: none of the zygote's or the supervisor's leak in.
    pipes = [fd for fd, target in info.fds.items() if target.startswith("pipe:")]
    assert len(pipes) == 4 and {"1", "2"} <= set(pipes), info.fds
    assert info.fds["1"] == info.fds["2"], info.fds


async def test_worker_can_ask_its_supervisor(sup: Supervisor) -> None:
    handle = await sup.spawn()
    assert (await handle.request(KERNEL_ASK_SUPERVISOR, EchoParams(value=[1, 2]))).value == [1, 2]


async def test_heartbeat_round_trip(sup: Supervisor) -> None:
    handle = await sup.spawn()
    assert await handle.ping() > 0
    assert await handle.ping() > 0


async def test_worker_command_error_is_a_request_error_and_worker_lives(sup: Supervisor) -> None:
    async def refuse(handle: WorkerHandle, request: WorkerRequest) -> EchoResult:
        raise RequestRefusedError("not_now", "the supervisor says no")

    handle = await sup.spawn(handler=refuse)
    with pytest.raises(WorkerRequestError, match=r"\(not_now\): the supervisor says no"):
        await handle.request(KERNEL_ASK_SUPERVISOR, EchoParams(value=1))
    assert (await handle.request(KERNEL_ECHO, EchoParams(value=7))).value == 7


async def test_bad_params_never_reach_the_worker(sup: Supervisor) -> None:
    """A command's params are its model: a bad one fails where it is built, naming the field."""
    handle = await sup.spawn()
    with pytest.raises(ValidationError, match="seconds"):
        SleepParams(seconds="soon")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sleep takes SleepParams, not EchoParams"):
        await handle.request(KERNEL_SLEEP, EchoParams(value=1))  # type: ignore[arg-type]
    assert (await handle.request(KERNEL_ECHO, EchoParams(value=7))).value == 7


async def test_cancelled_request_is_cancelled_in_the_worker(sup: Supervisor) -> None:
    handle = await sup.spawn()
    with trio.move_on_after(0.2) as scope:
        await handle.request(KERNEL_SLEEP, SleepParams(seconds=30))
    assert scope.cancelled_caught
    # The worker dropped the sleep and still serves requests.
    assert (await handle.request(KERNEL_ECHO, EchoParams(value="after"))).value == "after"
    assert handle.alive


async def test_requests_in_flight_do_not_hold_up_reading(sup: Supervisor) -> None:
    """Long requests run concurrently; the worker keeps reading and cancels each one alone."""
    handle = await sup.spawn()
    outcomes: dict[int, str] = {}
    scopes = [trio.CancelScope() for _ in range(3)]

    async def sleep(i: int) -> None:
        with scopes[i]:
            await handle.request(KERNEL_SLEEP, SleepParams(seconds=3600))
        outcomes[i] = "cancelled" if scopes[i].cancelled_caught else "finished"

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(sleep, i)
        # Sent after the sleeps on the same pipe: answered only if the worker reads on.
        for n in range(20):
            assert (await handle.request(KERNEL_ECHO, EchoParams(value=n))).value == n
        assert await handle.ping() > 0
        scopes[1].cancel()
        assert (await handle.request(KERNEL_ECHO, EchoParams(value="still"))).value == "still"
        assert outcomes == {1: "cancelled"}
        scopes[0].cancel()
        scopes[2].cancel()
    assert outcomes == {0: "cancelled", 1: "cancelled", 2: "cancelled"}
    assert (await handle.request(KERNEL_ECHO, EchoParams(value="after"))).value == "after"


async def test_events_arrive_in_order_with_backpressure(sup: Supervisor) -> None:
    """A flood larger than the event buffer neither loses events nor grows memory unboundedly."""
    handle = await sup.spawn()
    seen: list[int] = []
    async with trio.open_nursery() as nursery:

        async def consume() -> None:
            async for event in handle.events():
                assert isinstance(event.data, FloodItem)
                seen.append(event.data.seq)

        nursery.start_soon(consume)
        assert (await handle.request(KERNEL_FLOOD, FloodParams(count=5000, size=200))).count == 5000
        await handle.shutdown()
    assert seen == list(range(5000))


async def test_requesters_reading_their_answers_keep_events_in_order() -> None:
    """Answers read by their requesters and events read by the reader task interleave.

    Echoes from several tasks run while a flood streams events: whichever task
    holds the reading baton, no event is lost or reordered and every answer
    reaches its requester; one cancelled while it waits reads nothing more.
    """
    seen: list[int] = []
    answered: list[int] = []

    async def consume() -> None:
        async for event in handle.events():
            assert isinstance(event.data, FloodItem)
            seen.append(event.data.seq)
            if len(seen) % 100 == 0:
                await trio.sleep(0.001)  # a slow consumer: the buffer fills, the reader waits

    async def echo(task: int) -> None:
        for n in range(50):
            value = task * 1000 + n
            assert (await handle.request(KERNEL_ECHO, EchoParams(value=value))).value == value
            answered.append(value)

    config = SupervisorConfig(event_buffer=8, kill_grace_s=1.0)
    async with Supervisor(config) as sup, trio.open_nursery() as nursery:
        handle = await sup.spawn()
        nursery.start_soon(consume)
        async with trio.open_nursery() as requests:
            requests.start_soon(handle.request, KERNEL_FLOOD, FloodParams(count=3000, size=50))
            for task in range(3):
                requests.start_soon(echo, task)
            with trio.move_on_after(0.05):
                await handle.request(KERNEL_SLEEP, SleepParams(seconds=30))
        assert (await handle.request(KERNEL_ECHO, EchoParams(value="after"))).value == "after"
        await handle.shutdown()
    assert seen == list(range(3000))
    assert sorted(answered) == sorted(t * 1000 + n for t in range(3) for n in range(50))


async def test_supervisor_refuses_to_start_inside_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """S-POL-4: one level of delegation holds at the OS boundary."""
    monkeypatch.setenv("SUBVISOR_TREE", "tree_parent")
    with pytest.raises(NestedSupervisorError, match="one level"):
        async with Supervisor():
            pass


async def test_supervisor_raises_its_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    async with Supervisor(SupervisorConfig(spawn_mode="exec")):
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= min(hard, 1 << 16) or soft == hard


@pytest.mark.parametrize("standby", [0, 3])
async def test_spawn_with_and_without_zygote_standbys(standby: int) -> None:
    """Standbys (pre-forked, runtime started) and plain forks serve spawns alike."""
    async with Supervisor(SupervisorConfig(zygote_standby=standby)) as sup:
        handles = [await sup.spawn() for _ in range(5)]
        for i, handle in enumerate(handles):
            assert (await handle.request(KERNEL_ECHO, EchoParams(value=i))).value == i
            info = await handle.request(KERNEL_INFO, InfoParams())
            assert info.pgid == handle.pid and info.ppid == sup.zygote_pid


async def test_a_standby_that_dies_unassigned_is_replaced() -> None:
    async with Supervisor(SupervisorConfig(zygote_standby=2)) as sup:
        first = await sup.spawn()
        await trio.sleep(0.3)  # let the zygote refill its standbys
        standbys = set(processes_in_tree(sup.tree_id)) - {sup.zygote_pid, first.pid}
        assert len(standbys) == 2
        victims = [psutil.Process(pid) for pid in standbys]
        for pid in standbys:
            os.kill(pid, signal.SIGKILL)
        # Reaped by the zygote, not just signalled: a process that dies while
        # it is being assigned fails that spawn like any worker dying at start.
        # Gone from ``processes_in_tree`` is not enough: a dying process loses
        # its environment (so its tree id) before it closes its sockets.
        with trio.fail_after(30):
            while any(victim.is_running() for victim in victims):  # noqa: ASYNC110 (polling /proc)
                await trio.sleep(0.01)
        handles = [await sup.spawn() for _ in range(3)]
        for handle in handles:
            assert handle.pid not in standbys
            assert (await handle.request(KERNEL_ECHO, EchoParams(value="ok"))).value == "ok"


@pytest.mark.parametrize("worker_nice", [0, 3, 10])
async def test_the_zygote_runs_between_the_supervisor_and_its_workers(worker_nice: int) -> None:
    """A launch is mostly the supervisor's work: the zygote yields to it (up to five nice
    levels) and never goes below its workers; with workers as the supervisor's equals
    (``worker_nice`` 0) it is one too."""
    from worker.zygote import ZYGOTE_NICE_STEP

    ours = os.getpriority(os.PRIO_PROCESS, 0)
    async with Supervisor(SupervisorConfig(worker_nice=worker_nice)) as sup:
        handle = await sup.spawn()
        assert sup.zygote_pid is not None
        zygote = os.getpriority(os.PRIO_PROCESS, sup.zygote_pid)
        worker = os.getpriority(os.PRIO_PROCESS, handle.pid)
    assert zygote == min(19, ours + min(ZYGOTE_NICE_STEP, worker_nice))
    assert worker == max(worker_nice, zygote)
