"""Running a command in its own process group, and killing the whole group.

Why not ``trio.run_process``: trio calls ``subprocess.Popen`` in a worker
thread, and Linux's parent-death signal (``PR_SET_PDEATHSIG``) fires when the
*thread* that forked the child exits, not the process. trio retires idle
cache threads after a few seconds, which would kill a long command that is
still wanted. So we fork from the thread that runs trio, which lives as long
as the worker's event loop.

Why not ``preexec_fn`` to call ``prctl``: the worker has other threads (the
file tools run in trio's thread pool), and running Python code between fork
and exec in a multi-threaded process can deadlock on a lock some other
thread held at fork time; it also rules out CPython's fast vfork path.
Instead the child execs a tiny Python wrapper (``-I -S``: no site, no
environment, a few ms) that sets the parent-death signal, checks the parent
did not die in between, restores default signal dispositions and execs the
shell. The signal survives that exec, so the shell dies with the worker.
It covers the shell only (the kernel clears it on fork); the rest of the
group is reached by ``kill_process_group`` or by whoever got the group id.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from ._truncate import HeadTailBuffer

__all__ = [
    "TERM_GRACE_S",
    "CommandResult",
    "command_pids",
    "command_signals_scoped",
    "kill_process_group",
    "run_in_process_group",
    "scope_command_signals",
    "with_parent_death_signal",
]

TERM_GRACE_S = 0.5
# After the command exits (or is killed), how long to keep reading output
# that background jobs still holding the pipe may write.
_DRAIN_AFTER_EXIT_S = 0.2
_READ_CHUNK_BYTES = 65_536
# Commands started here and not yet reaped by their ``Popen``: the worker's
# own children, which its reaper of adopted orphans must leave alone.
_COMMANDS: dict[int, subprocess.Popen[bytes]] = {}


def command_pids() -> frozenset[int]:
    """Pids of the commands this process started and has not reaped yet."""
    return frozenset(_COMMANDS)


# Python ignores SIGPIPE and SIGXFSZ at startup, a worker the stop signals
# (``worker._process.end_tree_with_parent``), and ignored signals stay ignored
# across exec, so they are reset here; otherwise `yes | head` would print
# "Broken pipe" errors instead of ending quietly.
#
# With "scoped", the command also gets a Landlock domain of its own that scopes
# its signals (landlock_create_ruleset, 444, with only LANDLOCK_SCOPE_SIGNAL;
# landlock_restrict_self, 446: the same numbers on every architecture): nothing
# it starts can signal its worker, which it shares a domain with otherwise. A
# tree that SIGKILLed its worker the moment the zygote died (watching it through
# a pidfd) left the worker no time to end that tree, which outlived them all
# (red team T). It can still signal what it started itself.
_PDEATHSIG_WRAPPER = """\
import os, signal, sys
for name in ("SIGPIPE", "SIGXFSZ", "SIGTSTP", "SIGTTIN", "SIGTTOU"):
    signal.signal(getattr(signal, name), signal.SIG_DFL)
if sys.platform.startswith("linux"):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if sys.argv[2] == "scoped":
        attr = (ctypes.c_uint64 * 3)(0, 0, 2)  # fs, net, scoped: LANDLOCK_SCOPE_SIGNAL
        domain = libc.syscall(444, attr, ctypes.c_size_t(24), 0)
        if domain < 0 or libc.syscall(446, domain, 0) != 0:
            why = os.strerror(ctypes.get_errno())
            os.write(2, f"subvisor: cannot scope this command's signals: {why}\\n".encode())
            os._exit(126)
        os.close(domain)
if os.getppid() != int(sys.argv[1]):
    os._exit(137)  # the worker died before prctl took effect
os.execv(sys.argv[3], sys.argv[3:])
"""


#: Set by the worker's sandbox once its Landlock domain scopes signals: from then
#: on the kernel knows signal scopes, and Bash gives each command one of its own.
_command_signals_scoped = False


def scope_command_signals() -> None:
    """Give every command Bash starts from now on a signal scope of its own (see above)."""
    global _command_signals_scoped
    _command_signals_scoped = True


def command_signals_scoped() -> bool:
    """Whether Bash gives each command a signal scope of its own (``scope_command_signals``)."""
    return _command_signals_scoped


def with_parent_death_signal(argv: Sequence[str], *, own_signal_scope: bool = False) -> list[str]:
    """``argv`` wrapped so that its process is SIGKILLed when this process dies.

    ``own_signal_scope``: it and all it starts may signal only each other (a
    Landlock domain of its own; the kernel must know signal scopes, ABI 6).
    Must be spawned from the thread that runs the event loop (see module doc).
    Without a Python executable to run the wrapper, ``argv`` is returned as is.
    """
    if not sys.executable:
        return list(argv)
    scope = "scoped" if own_signal_scope else "-"
    return [sys.executable, "-I", "-S", "-c", _PDEATHSIG_WRAPPER, str(os.getpid()), scope, *argv]


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How a command ended: its exit status (negative: killed by that signal)."""

    returncode: int
    timed_out: bool


def _spawn(argv: Sequence[str], cwd: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``argv`` as leader of a new session; return it and the read end of its output."""
    read_fd, write_fd = os.pipe()
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=cwd,
            start_new_session=True,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        # Only the child may hold the write end, or we would never see EOF.
        os.close(write_fd)
    _COMMANDS[popen.pid] = popen
    return popen, read_fd


def _block_until_exited(pid: int) -> None:
    # WNOWAIT: look, but leave the zombie (and so its pid and group id) alone.
    with contextlib.suppress(ChildProcessError):  # already reaped
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


async def _wait_exited(popen: subprocess.Popen[bytes]) -> None:
    """Wait until the process has exited, without reaping it."""
    if popen.returncode is not None:
        return
    pidfd_open: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    pidfd = -1
    if pidfd_open is not None:
        try:
            pidfd = pidfd_open(popen.pid)
        except OSError:
            pidfd = -1  # kernel before 5.3, or a seccomp filter
    if pidfd < 0:
        # The thread stays blocked until the process exits, even if we stop
        # waiting; every path that gives up also kills the process.
        await trio.to_thread.run_sync(_block_until_exited, popen.pid, abandon_on_cancel=True)
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        trio.lowlevel.notify_closing(pidfd)
        os.close(pidfd)


def _reap(popen: subprocess.Popen[bytes]) -> int:
    """Reap an exited command (it has exited: this does not block)."""
    try:
        return popen.wait()
    finally:
        _COMMANDS.pop(popen.pid, None)


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the whole group is gone already
    except PermissionError:
        pass  # a member switched user (setuid); nothing more we can do


async def kill_process_group(popen: subprocess.Popen[bytes], grace_s: float = TERM_GRACE_S) -> int:
    """SIGTERM the process group led by ``popen``, SIGKILL it after ``grace_s``, reap the leader.

    The leader is reaped last on purpose: while it is an unreaped zombie its
    pid cannot be reused, so the group id still names only our processes.
    Returns the leader's exit status. Call it shielded from cancellation.
    """
    pgid = popen.pid
    _signal_group(pgid, signal.SIGTERM)
    with trio.move_on_after(grace_s):
        await _wait_exited(popen)
    _signal_group(pgid, signal.SIGKILL)
    await _wait_exited(popen)
    return _reap(popen)


async def _pump(stream: trio.lowlevel.FdStream, output: HeadTailBuffer, eof: trio.Event) -> None:
    while data := await stream.receive_some(_READ_CHUNK_BYTES):
        output.feed(data)
    eof.set()


async def _collect(
    popen: subprocess.Popen[bytes], stream: trio.lowlevel.FdStream, output: HeadTailBuffer
) -> int:
    """Read output until the leader has exited and the pipe is drained; reap the leader."""
    eof = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, stream, output, eof)
        await _wait_exited(popen)
        with trio.move_on_after(_DRAIN_AFTER_EXIT_S):
            await eof.wait()
        nursery.cancel_scope.cancel()
    return _reap(popen)


async def run_in_process_group(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    output: HeadTailBuffer,
    on_process_group: Callable[[int], None] | None = None,
) -> CommandResult:
    """Run ``argv`` in a new process group, feeding its stdout+stderr into ``output``.

    stdin is ``/dev/null``. On timeout the group is terminated (SIGTERM,
    grace, SIGKILL) and the result says ``timed_out``; if the calling task
    is cancelled the group is terminated the same way before the
    cancellation goes on. Jobs the command left running in the background
    after it exited normally are not touched: ``on_process_group`` got
    their group id. Raises ``OSError`` if the command cannot be started.
    """
    popen, read_fd = _spawn(argv, cwd)
    stream = trio.lowlevel.FdStream(read_fd)
    try:
        if on_process_group is not None:
            on_process_group(popen.pid)
        with trio.move_on_after(timeout_s) as deadline:
            returncode = await _collect(popen, stream, output)
        if not deadline.cancelled_caught:
            return CommandResult(returncode=returncode, timed_out=False)
        with trio.CancelScope(shield=True):
            returncode = await kill_process_group(popen)
            # Keep what was still in the pipe: the last lines before a hang
            # are often the ones that explain it.
            with trio.move_on_after(_DRAIN_AFTER_EXIT_S):
                await _pump(stream, output, trio.Event())
        return CommandResult(returncode=returncode, timed_out=True)
    finally:
        if popen.returncode is None:
            # Cancelled (or failed) while the command ran: take it down
            # before the cancellation propagates, even though we are cancelled.
            with trio.CancelScope(shield=True):
                await kill_process_group(popen)
        stream.close()
