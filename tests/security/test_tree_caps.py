"""S-SEC-4: memory, process count, CPU and file size caps count every descendant.

Each cap is broken by what a worker's Bash starts, never by the worker
itself: a child that allocates, a fork loop, busy children that each stay
under the per-process CPU limit. Both mechanisms are run: a cgroup per worker
(where the machine allows, as it does for root here) and tree sampling (the
portable fallback). The exit reason must name the cap, and the record must
say which mechanism held.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import psutil
import pytest
import trio

from protocol import ResourceLimits
from supervisor import Supervisor, SupervisorConfig
from supervisor.kernel._exit import ExitKind
from tests.support.bash_worker import bash_model, run_bash

PY = sys.executable
MECHANISMS = ["auto", "sampling"]


def _marker() -> str:
    """A sleep length no other process on the machine uses: finds our processes."""
    return f"61.{random.randrange(10**6):06d}"


def _alive_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if marker in " ".join(proc.info["cmdline"] or ()):
            found.append(proc.pid)
    return found


async def _until_gone(marker: str, limit_s: float = 20.0) -> list[int]:
    with trio.move_on_after(limit_s):
        while _alive_with(marker):  # noqa: ASYNC110 (other processes: no event to wait on)
            await trio.sleep(0.05)
    return _alive_with(marker)


async def _broken(
    tmp_path: Path, mechanism: str, command: str, limits: ResourceLimits, *, ends: bool = True
) -> tuple:
    config = SupervisorConfig(tree_caps=mechanism, sample_interval_s=0.05, kill_grace_s=0.5)  # type: ignore[arg-type]
    async with Supervisor(config) as sup:
        handle = await sup.spawn(limits=limits, handler=bash_model(command))
        answer = await run_bash(handle, tmp_path)
        if not ends:
            return answer, await handle.shutdown(), handle.tree_caps, sup.tree_caps
        # A cap breached by a child the kernel already killed may end the worker
        # only at the next sample, after the tool's answer: wait for it (bounded,
        # so that a worker no cap ended fails here rather than hangs).
        with trio.move_on_after(60):
            exit = await handle.wait()
            return answer, exit, handle.tree_caps, sup.tree_caps
        raise AssertionError(f"no cap ended the worker; it answered {answer!r}")


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_s_sec_4_a_child_over_the_memory_cap_ends_the_worker_naming_it(
    tmp_path: Path, mechanism: str
) -> None:
    """S-SEC-4: a Bash child allocating 600 MB under a 200 MB cap ends the worker with
    "memory cap exceeded" (its own RSS stays small), and the child does not survive."""
    marker = _marker()
    command = f"{PY} -c \"b = b'x' * (600 << 20); import time; time.sleep({marker})\""
    _, exit, used, fleet = await _broken(
        tmp_path, mechanism, command, ResourceLimits(memory_mb=200)
    )
    assert exit.kind is ExitKind.MEMORY_CAP, exit.reason
    assert "whole process tree" in exit.reason and used in exit.reason
    assert used.startswith("cgroup") == (mechanism == "auto" and fleet.startswith("cgroup"))
    assert await _until_gone(marker) == []


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_s_sec_4_a_fork_loop_hits_the_process_cap_and_nothing_survives(
    tmp_path: Path, mechanism: str
) -> None:
    """S-SEC-4 / S-SEC-5: 300 background sleeps under a 40-process cap end the worker with
    "process cap exceeded"; none of the sleeps outlives it."""
    marker = _marker()
    command = f"for i in $(seq 300); do sleep {marker} & done; wait"
    answer, exit, used, _ = await _broken(
        tmp_path, mechanism, command, ResourceLimits(max_processes=40)
    )
    assert answer is None
    assert exit.kind is ExitKind.PROCESS_CAP, exit.reason
    assert "40 processes" in exit.reason and used in exit.reason
    assert await _until_gone(marker) == []


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("layout", ["at once", "one after another"])
async def test_s_sec_4_cpu_is_counted_over_the_tree(
    tmp_path: Path, mechanism: str, layout: str
) -> None:
    """S-SEC-4: busy children, each under the per-process CPU limit when the tree reaches
    its cap, end the worker with "cpu cap exceeded": four at once (cap 4 s), or eight of
    0.5 s run one after another by Bash (cap 2 s), ended while Bash still runs them.

    Bash reaps each of the latter, so a child's CPU lives on only in Bash's own
    count of its reaped children: a sampler that read that count for the worker
    alone let all eight run and saw the cap only once Bash ended.
    """
    marker, done = _marker(), tmp_path / "done"
    if layout == "at once":
        spin = f"{PY} -c 'import sys; sys.argv.append(\"{marker}\")\nwhile True: pass'"
        command, cap = f"for i in 1 2 3 4; do {spin} & done; wait", 4
    else:
        burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
        spin = f"{PY} -c '{burn}' {marker}"
        command, cap = f"for i in 1 2 3 4 5 6 7 8; do {spin}; echo $i >> {done}; done", 2
    answer, exit, used, _ = await _broken(
        tmp_path, mechanism, command, ResourceLimits(cpu_seconds=cap)
    )
    assert answer is None
    assert exit.kind is ExitKind.CPU_CAP, exit.reason
    assert "whole process tree" in exit.reason and used in exit.reason
    assert await _until_gone(marker) == []
    if layout == "one after another":
        assert len(done.read_text().split()) < 8


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_s_sec_4_threads_count_against_the_process_cap(
    tmp_path: Path, mechanism: str
) -> None:
    """S-SEC-4: one process starting 300 threads under a 40-process cap ends the worker with
    "process cap exceeded" (a cgroup's pids count refuses the 40th; sampling counts them):
    under sampling, one process of 1000 threads passed a 40-process cap (red team Q)."""
    marker = _marker()
    threads = (
        "import threading, time\n"
        "try:\n"
        "    for _ in range(300):\n"
        "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "except RuntimeError: pass  # refused: the cap holds; wait to be ended for it\n"
        f"time.sleep({marker})"
    )
    answer, exit, used, _ = await _broken(
        tmp_path, mechanism, f"{PY} -c '{threads}'", ResourceLimits(max_processes=40)
    )
    assert answer is None
    assert exit.kind is ExitKind.PROCESS_CAP, exit.reason
    assert "40 processes" in exit.reason and used in exit.reason
    assert await _until_gone(marker) == []


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_s_sec_4_cpu_of_children_the_kernel_reaps_itself_counts(
    tmp_path: Path, mechanism: str
) -> None:
    """S-SEC-4: a process that ignores SIGCHLD (so the kernel reaps its children, and their
    CPU reaches nobody's count of reaped children) runs busy children of 0.4 s, two at a
    time (each round waits for its two), ten rounds: the tree's 2 s CPU cap ends the worker
    before the tenth, however loaded the machine.
    Under sampling, such children ran 9.8 s under a 2 s cap (red team Q)."""
    marker, done = _marker(), tmp_path / "done"
    script = tmp_path / "reaped_by_the_kernel.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "def alive(pid):\n"
        "    try: os.kill(pid, 0)\n"
        "    except ProcessLookupError: return False\n"
        "    return True\n"
        "for n in range(10):\n"
        "    children = []\n"
        "    for _ in range(2):\n"
        "        child = os.fork()\n"
        "        if child == 0:\n"
        "            end = time.process_time() + 0.4\n"
        "            while time.process_time() < end: pass\n"
        "            os._exit(0)\n"
        "        children.append(child)\n"
        "    while any(alive(child) for child in children): time.sleep(0.02)\n"
        f"    with open({str(done)!r}, 'a') as f: f.write(f'{{n}}\\n')\n"
    )
    answer, exit, used, _ = await _broken(
        tmp_path, mechanism, f"{PY} {script} {marker}", ResourceLimits(cpu_seconds=2)
    )
    assert answer is None
    assert exit.kind is ExitKind.CPU_CAP, exit.reason
    assert "whole process tree" in exit.reason and used in exit.reason
    assert len(done.read_text().split() if done.exists() else []) < 10
    assert await _until_gone(marker) == []


async def test_s_sec_4_the_file_size_cap_binds_every_descendant(tmp_path: Path) -> None:
    """S-SEC-4: with an 8 MB file size cap, a child writing 20 MB is stopped at 8 MB
    (SIGXFSZ), and it cannot raise its own limit back."""
    command = (
        "head -c 20000000 /dev/zero > big; echo rc=$?; stat -c size=%s big; "
        "ulimit -f unlimited; echo raise=$?"
    )
    answer, exit, _, _ = await _broken(
        tmp_path, "auto", command, ResourceLimits(file_size_mb=8), ends=False
    )
    assert answer is not None, exit.reason
    assert "rc=153" in answer  # 128 + SIGXFSZ
    assert f"size={8 * 1024 * 1024}" in answer
    assert "raise=0" not in answer
    assert (tmp_path / "big").stat().st_size == 8 * 1024 * 1024


def test_s_sec_4_the_mechanism_in_force_is_stated() -> None:
    """S-SEC-4: the kernel says which mechanism holds the caps, never one it could not make."""

    async def main() -> str:
        async with Supervisor(SupervisorConfig()) as sup:
            return sup.tree_caps

    stated = trio.run(main)
    assert stated.startswith(("cgroup v1", "cgroup v2", "sampling ("))


async def test_s_sec_4_a_workers_tree_runs_below_the_supervisor_and_cannot_climb_back(
    tmp_path: Path,
) -> None:
    """S-SEC-4: what a subagent's Bash starts runs at the fleet's nice value (10) above the
    supervisor's, so a busy tree cannot starve the supervisor that serves every agent; it
    cannot lower its nice value again, nor raise the limit that would let it."""
    import os

    from tests.support.attack import bash_attack

    ours = os.getpriority(os.PRIO_PROCESS, 0)
    expected = f"nice {max(SupervisorConfig().worker_nice, ours)}"
    nice = f"{PY} -c \"import os; print('nice', os.getpriority(os.PRIO_PROCESS, 0))\""
    attack = await bash_attack(
        tmp_path,
        [
            nice,
            f"renice -n {ours} -p $$ >/dev/null 2>&1; echo renice=$?",
            f'{PY} -c "import os; os.setpriority(os.PRIO_PROCESS, 0, {ours})" 2>&1 | tail -1',
            f'{PY} -c "import resource as r; r.setrlimit(r.RLIMIT_NICE, (20, 20))" 2>&1 | tail -1',
            nice,
        ],
    )
    assert SupervisorConfig().worker_nice > 0
    assert expected in attack.output(0), attack.output(0)
    assert "renice=0" not in attack.output(1), attack.output(1)
    assert "PermissionError" in attack.output(2), attack.output(2)
    assert "not allowed to raise maximum limit" in attack.output(3), attack.output(3)
    assert expected in attack.output(4), attack.output(4)


_BUSY = "import sys, time; end = time.time() + float(sys.argv[1])\nwhile time.time() < end: pass"


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@pytest.mark.machine_may_lack("a writable cpu cgroup (cgroup v1 here; cpu delegated in v2)")
async def test_s_sec_4_a_tree_that_starts_new_sessions_still_weighs_below_the_supervisor(
    tmp_path: Path,
) -> None:
    """S-SEC-4: eight busy loops a subagent's Bash starts with ``setsid`` (each in a session,
    so a kernel autogroup, of its own, where a nice value alone would not hold them) and a
    busy process in a session of its own as the supervisor's is, all on one CPU: that
    process gets half of it, as the whole fleet weighs one process; the loops' own
    autogroups would leave it a ninth.
    (A CPU-time ratio between processes of the same run, not a wall-clock figure.)"""
    marker = _marker()
    script = tmp_path / "busy.py"
    script.write_text(_BUSY)
    loops = f"setsid taskset -c 0 {PY} {script} 6 {marker}"
    command = f"for i in $(seq 8); do {loops} & done; wait"
    async with Supervisor(SupervisorConfig()) as sup:
        tree = sup._cgroups
        if tree is None or tree.cpu_weight_error:
            why = tree.cpu_weight_error if tree else sup.tree_caps
            pytest.skip(f"no CPU weight for the fleet here: {why}")
        handle = await sup.spawn(handler=bash_model(command))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_bash, handle, tmp_path)
            with trio.fail_after(30):
                while len(pids := _alive_with(marker)) < 8:  # noqa: ASYNC110 (other processes)
                    await trio.sleep(0.05)
            # The loops left the worker's session: the kernel put each in an autogroup.
            assert all(os.getsid(pid) not in (os.getsid(0), os.getsid(handle.pid)) for pid in pids)
            before = _cpu_s(pids)
            ours = await trio.run_process(
                [
                    "taskset",
                    "-c",
                    "0",
                    PY,
                    "-c",
                    _BUSY + "\nimport time; print(time.process_time())",
                    "2",
                ],
                capture_stdout=True,
                # A session of its own, weighing as the supervisor's does: busy
                # processes that share the test's session (CPU burners beside the
                # suite) then take nothing from it.
                start_new_session=True,
            )
            theirs = _cpu_s(pids) - before
            nursery.cancel_scope.cancel()
        await handle.kill("test over")
    mine = float(ours.stdout.decode().split()[-1])
    share = mine / (mine + theirs)
    # Weighed as one process: ~0.5; the eight loops in autogroups of their own: ~0.11.
    assert share > 0.3, (mine, theirs)
    assert await _until_gone(marker) == []


@pytest.mark.machine_may_lack("writable cgroups (root here; a delegated cgroup v2 elsewhere)")
async def test_s_sec_4_a_worker_is_in_its_own_cgroups_before_it_says_hello(
    tmp_path: Path,
) -> None:
    """S-SEC-4: a local worker writes itself into its own cgroups first, before its hello
    (so every process it starts is born inside): at the handshake /proc/PID/cgroup already
    names its cgroup in every hierarchy the fleet uses, and what its Bash starts is there too."""
    async with Supervisor(SupervisorConfig()) as sup:
        if not sup.tree_caps.startswith("cgroup"):
            pytest.skip(f"no writable cgroups here: {sup.tree_caps}")
        handle = await sup.spawn(
            limits=ResourceLimits(memory_mb=300), handler=bash_model("cat /proc/self/cgroup")
        )
        assert handle.cgroup is not None and handle.hello is not None
        assert handle.hello.cgroup_error == ""
        lines = (await trio.Path(f"/proc/{handle.pid}/cgroup").read_text()).splitlines()
        mine = [line for line in lines if handle.worker_id in line]
        assert len(mine) >= len(set(handle.cgroup.dirs.values())), lines
        answer = await run_bash(handle, tmp_path)
        assert answer.count(handle.worker_id) >= len(mine), answer
        await handle.shutdown()


def test_s_sec_4_joining_a_cgroup_that_refuses_says_why(tmp_path: Path) -> None:
    """S-SEC-4: a worker that cannot write itself into a cgroup says why (its hello then
    carries it, and the supervisor samples that tree instead); the fds are closed either way."""
    import os

    from worker._process import join_cgroups

    target = tmp_path / "not-a-cgroup"
    target.write_text("")
    read_only = os.open(target, os.O_RDONLY)
    writable = os.open(tmp_path / "joined", os.O_WRONLY | os.O_CREAT)
    error = join_cgroups([read_only, writable])
    assert "Bad file descriptor" in error
    assert (tmp_path / "joined").read_text() == str(os.getpid())
    for fd in (read_only, writable):
        with pytest.raises(OSError):
            os.fstat(fd)
