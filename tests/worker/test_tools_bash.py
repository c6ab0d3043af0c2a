"""Bash with real processes: output, exit codes, timeouts, cancellation, caps (S-LOCAL-1/2)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from worker.tools import ToolContext, ToolOutput, run_tool
from worker.tools._bash import shell_argv

pytestmark = pytest.mark.machine_may_lack(
    "/proc (Linux), which the process checks read", when=not Path("/proc/self/stat").exists()
)

# Only a guard against a hung test, never a claim about speed.
_GIVE_UP_S = 20
_POLL_S = 0.02
_REPO_ROOT = Path(__file__).resolve().parents[2]


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may contain spaces and parentheses; fields follow the last ")".
    fields = raw.rsplit(")", 1)[1].split()
    return fields[0], int(fields[2])


def is_running(pid: int, pgid: int | None = None) -> bool:
    """Whether ``pid`` is a live process (zombies are dead), optionally in group ``pgid``."""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    state, group = fields
    return state not in ("Z", "X") and (pgid is None or group == pgid)


def group_members(pgid: int) -> list[int]:
    """Live processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and is_running(int(entry.name), pgid):
            members.append(int(entry.name))
    return members


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(int(_GIVE_UP_S / _POLL_S)):
        if condition():
            return
        await trio.sleep(_POLL_S)
    pytest.fail(f"gave up waiting for {what}")


def kill_group_quietly(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def bash(
    cwd: Path, groups: list[int] | None = None, cap: int = 30_000, **raw: Any
) -> ToolOutput:
    ctx = ToolContext(
        cwd=cwd,
        max_output_bytes=cap,
        on_process_group=None if groups is None else groups.append,
    )
    return await run_tool("Bash", raw, ctx)


async def test_output_merges_stdout_and_stderr_in_cwd(tmp_path: Path) -> None:
    """S-LOCAL-1: Bash(command) runs in the context's working directory."""
    out = await bash(tmp_path, command="pwd; echo to-stderr >&2")
    assert not out.is_error
    assert out.text.splitlines() == [str(tmp_path), "to-stderr"]


async def test_nonzero_exit_is_reported(tmp_path: Path) -> None:
    """S-LOCAL-2: a failing command is an error result with its output and exit code."""
    out = await bash(tmp_path, command="echo partial; exit 7")
    assert out.is_error
    assert out.text == "partial\n[exit code 7]"


async def test_no_output_and_stdin_is_empty(tmp_path: Path) -> None:
    out = await bash(tmp_path, command="cat")
    assert not out.is_error
    assert out.text == "(no output)"


async def test_broken_pipe_ends_quietly(tmp_path: Path) -> None:
    """SIGPIPE is back to its default in the command, as in a terminal."""
    out = await bash(tmp_path, command="yes | head -n 2")
    assert out.text == "y\ny"
    assert not out.is_error


async def test_invalid_utf8_output_is_replaced_not_fatal(tmp_path: Path) -> None:
    """S-LOCAL-2: binary output does not crash the tool."""
    out = await bash(tmp_path, command=r"printf 'ok \377\376 done'")
    assert out.text == "ok \ufffd\ufffd done"


async def test_timeout_above_the_maximum_is_rejected(tmp_path: Path) -> None:
    """S-LOCAL-1: timeout is in milliseconds, at most 600000."""
    out = await bash(tmp_path, command="true", timeout=600_001)
    assert out.is_error
    assert "timeout" in out.text and "600000" in out.text


async def test_falls_back_to_sh_without_bash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shell_argv("echo hi") == ["/bin/sh", "-c", "echo hi"]


async def test_timeout_kills_the_whole_group_and_keeps_partial_output(tmp_path: Path) -> None:
    """S-LOCAL-2: timeout with the partial output; background children and grandchildren die."""
    command = textwrap.dedent(
        """\
        sleep 100 & echo "child=$!"
        sh -c 'sleep 100 & echo "grandchild=$!"; wait' &
        echo "shell=$$"
        wait
        """
    )
    groups: list[int] = []
    out = await bash(tmp_path, groups, command=command, timeout=2_000)
    pids = {name: int(pid) for name, pid in re.findall(r"(\w+)=(\d+)", out.text)}
    try:
        assert out.is_error
        assert "timed out after 2000 ms" in out.text
        assert set(pids) == {"child", "grandchild", "shell"}
        assert groups == [pids["shell"]]
        # SIGKILL is delivered asynchronously: give the kernel a moment.
        await wait_until(
            lambda: not any(is_running(pid, groups[0]) for pid in pids.values()),
            "the child, grandchild and shell to die",
        )
        assert group_members(groups[0]) == []
    finally:
        for pgid in groups:
            kill_group_quietly(pgid)


async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    """S-LOCAL-2: cancelling the calling task terminates the command and its children."""
    started = tmp_path / "started"
    groups: list[int] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: bash(tmp_path, groups, command=f"sleep 100 & touch {started}; sleep 100")
            )
            await wait_until(started.exists, "the command to start")
            pgid = groups[0]
            assert len(group_members(pgid)) >= 2
            scope.cancel()
    try:
        assert scope.cancelled_caught
        await wait_until(lambda: group_members(pgid) == [], "the group to die")
    finally:
        kill_group_quietly(pgid)


async def test_term_ignoring_command_is_killed_after_the_grace(tmp_path: Path) -> None:
    """S-LOCAL-2: SIGTERM first, then SIGKILL for a command that ignores it."""
    groups: list[int] = []
    out = await bash(tmp_path, groups, command="trap '' TERM; echo armed; sleep 100", timeout=1_000)
    try:
        assert out.is_error and out.text.startswith("armed\n")
        await wait_until(lambda: group_members(groups[0]) == [], "the group to die")
    finally:
        kill_group_quietly(groups[0])


async def test_background_job_does_not_hold_the_call_open(tmp_path: Path) -> None:
    """A command that leaves a background job returns when the shell exits, not at timeout."""
    groups: list[int] = []
    out = await bash(tmp_path, groups, command="sleep 100 & echo launched", timeout=60_000)
    try:
        assert not out.is_error
        assert out.text == "launched"
        # Still there, for the owner of the worker to clean up by group id.
        assert group_members(groups[0])
    finally:
        kill_group_quietly(groups[0])


async def test_megabytes_of_output_are_capped_while_reading(tmp_path: Path) -> None:
    """S-LOCAL-2: head and tail kept, middle counted, memory bounded while reading."""
    count = 1_000_000
    expected = "".join(f"{n}\n" for n in range(1, count + 1)).encode()
    tracemalloc.start()
    try:
        out = await bash(tmp_path, command=f"seq 1 {count}", cap=20_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(expected) > 6_000_000
    assert peak < 2_000_000
    assert len(out.text.encode()) <= 20_000
    match = re.search(r"\n\[\.\.\. (\d+) bytes \((\d+) newlines\) omitted", out.text)
    assert match is not None
    head = out.text[: match.start()]
    tail = out.text[out.text.index("]\n", match.end()) + 2 :]
    assert head.startswith("1\n2\n3\n")
    assert tail.endswith(f"{count - 1}\n{count}")
    # The tool strips the final newline after rendering, so the tail lacks one byte.
    assert int(match.group(1)) == len(expected) - len(head.encode()) - len(tail.encode()) - 1


_ORPHAN_SCRIPT = """\
import sys, trio
from pathlib import Path
from worker.tools import ToolContext, run_tool

async def main() -> None:
    pidfile = sys.argv[1]
    await run_tool(
        "Bash",
        {"command": f"echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; sleep 100"},
        ToolContext(cwd=Path.cwd()),
    )

trio.run(main)
"""


async def test_command_dies_with_the_worker(tmp_path: Path) -> None:
    """No orphans: SIGKILL of the worker process takes its Bash command down too."""
    pidfile = tmp_path / "shell.pid"
    env = {**os.environ, "PYTHONPATH": str(_REPO_ROOT)}
    worker = await trio.lowlevel.open_process(
        [sys.executable, "-c", _ORPHAN_SCRIPT, str(pidfile)], cwd=tmp_path, env=env
    )
    shell_pid = 0
    try:
        await wait_until(pidfile.exists, "the command to start")
        shell_pid = int(pidfile.read_text())
        assert is_running(shell_pid)
        worker.kill()
        await worker.wait()
        await wait_until(lambda: not is_running(shell_pid), "the command to die")
    finally:
        if worker.returncode is None:
            worker.kill()
            with trio.CancelScope(shield=True):
                await worker.wait()
        if shell_pid:
            kill_group_quietly(shell_pid)


async def test_long_command_outlives_idle_trio_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent-death signal must be tied to the event-loop thread, not to a worker thread.

    Linux sends it when the *thread* that forked the child exits; trio retires
    idle pool threads after ``IDLE_TIMEOUT`` (10 s; 0.5 s here), so spawning
    from one would kill this command, which outlives that four times over.
    """
    monkeypatch.setattr(trio._core._thread_cache, "IDLE_TIMEOUT", 0.5)
    await trio.to_thread.run_sync(lambda: None)  # put a thread in trio's pool
    out = await bash(tmp_path, command="sleep 2; echo survived", timeout=60_000)
    assert out == ToolOutput("survived")
