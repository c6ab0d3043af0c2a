"""Starting worker processes: through the zygote (fast) or by exec (plain).

A spawner hands back a ``SpawnedProcess``: the pid, the supervisor's ends of
the two pipes, and an event set once the process has been reaped, with its
wait status and resource usage. Reaping belongs to whoever is the parent: the
zygote for forked workers (it reports over the control socket), the
supervisor itself for exec'd ones (it waits on a pidfd). A worker on another
machine (``_ray_spawner``) is a ``SpawnedProcess`` too, whose stream and
signals go through its node's host; above the spawner only its ``node`` says so.
"""

from __future__ import annotations

import array
import contextlib
import errno
import functools
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio

from protocol import (
    MAX_CONTROL_DATAGRAM,
    RemoteProtocolError,
    ResourceLimits,
    SandboxPolicy,
    SpawnFailed,
    SpawnWorker,
    WorkerExited,
    WorkerSpawned,
    ZygoteReady,
    decode_zygote_report,
    encode_control,
)
from worker import PipeStream

from ._errors import SpawnError
from ._exit import ProcessStatus
from ._stderr_relay import StderrRelay, stop_relays

__all__ = [
    "ExecSpawner",
    "SpawnedProcess",
    "Spawner",
    "WorkerStream",
    "ZygoteSpawner",
    "launch_python",
    "reap_child",
]


class WorkerStream(Protocol):
    """The supervisor's byte stream to one worker: its pipes, or a node link's channel."""

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` bytes; ``b""`` at EOF.

        Any task may call it, one at a time, and a cancelled call has taken
        no bytes (the handle's reading baton relies on both).
        """
        ...

    async def send_all(self, data: bytes) -> None:
        """Write one whole frame, after any frame already being written."""
        ...

    def close(self) -> None:
        """Close the stream, waking any task parked on it."""
        ...


@dataclass(eq=False)
class SpawnedProcess:
    """A worker process as its spawner sees it."""

    worker_id: str
    pid: int
    read_fd: int
    write_fd: int
    reaped: trio.Event = field(default_factory=trio.Event)
    status: ProcessStatus | None = None
    #: The cluster node it runs on; None: this machine (its pid is ours to signal).
    node: str | None = None
    #: How caps over its tree are enforced where it runs (remote workers only).
    tree_caps: str | None = None
    #: Its RSS in bytes as its node host last reported it (remote workers only).
    reported_rss_bytes: int | None = None

    def set_status(self, status: ProcessStatus) -> None:
        """Record the wait status and wake everyone waiting for the exit."""
        self.status = status
        self.reaped.set()

    def open_stream(self) -> WorkerStream:
        """The supervisor's stream to the worker (its pipes); called once, by its handle."""
        return PipeStream(self.read_fd, self.write_fd)

    def signal_tree(self, sig: int) -> None:
        """Signal the tree of a worker on another node (a local one is signalled by its handle)."""
        raise NotImplementedError("a local worker is signalled by its handle")


class Spawner(Protocol):
    """Starts worker processes and learns how they end."""

    pid: int | None
    #: True when its workers run on other machines (their pids are not ours).
    remote: bool
    #: True when it makes each worker's temp dir itself (the supervisor only
    #: names it): the zygote, refusing a path that is anything but its own
    #: new or existing directory. Remote workers get theirs on their node.
    makes_temp_dirs: bool

    async def spawn(
        self,
        worker_id: str,
        limits: ResourceLimits,
        sandbox: SandboxPolicy,
        *,
        cgroups: Sequence[int] = (),
    ) -> SpawnedProcess:
        """Start a worker; return once its pid is known (before its handshake).

        The worker writes itself into the ``cgroup.procs`` files ``cgroups``
        holds first (the caller keeps and closes its own fds), then applies
        ``sandbox`` itself, before its handshake.
        """
        ...

    async def aclose(self) -> None:
        """Stop spawning; make sure no worker outlives the spawner."""
        ...


def _pipe_pair() -> tuple[int, int, int, int]:
    """(worker reads, supervisor writes, supervisor reads, worker writes)."""
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    return down_r, down_w, up_r, up_w


def launch_python(
    module: str,
    args: list[str],
    env: dict[str, str],
    inherit: list[int],
    *,
    output_fd: int | None = None,
) -> int:
    """posix_spawn ``python -m module``, passing the ``inherit`` fds; return its pid.

    posix_spawn (not fork) because the supervisor runs trio and may have
    threads; the child is put in its own process group so a terminal's
    Ctrl-C reaches only the supervisor, which then shuts the tree down in
    order. Only the ``inherit`` fds cross: everything else Python opens is
    close-on-exec. ``output_fd``: the child's stdout and stderr, in place of
    ours, and a session of its own, so that it holds no terminal
    (``StderrRelay``); without it, stdout goes to our stderr.

    ``-P``: ``python -m`` would first look for ``module`` in the current
    directory, the project a workspace-write subagent may write; a
    ``supervisor/`` it planted there would then run in place of ours, in a
    gateway process with the keys (S-SEC-1).
    """
    for fd in inherit:
        os.set_inheritable(fd, True)
    # No stdin, and stdout goes to stderr: whatever a worker prints must not
    # mix into the supervisor's output (``run --json``).
    file_actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
    ]
    if output_fd is None:
        file_actions.append((os.POSIX_SPAWN_DUP2, 2, 1))
    else:
        file_actions += [(os.POSIX_SPAWN_DUP2, output_fd, 1), (os.POSIX_SPAWN_DUP2, output_fd, 2)]
    try:
        return os.posix_spawn(
            sys.executable,
            [sys.executable, "-P", "-m", module, *args],
            env,
            file_actions=file_actions,
            setsigdef=(signal.SIGINT, signal.SIGTERM, signal.SIGPIPE),
            # A new session is a new process group too, with no terminal.
            **({"setpgroup": 0} if output_fd is None else {"setsid": True}),
        )
    finally:
        for fd in inherit:
            os.set_inheritable(fd, False)


async def reap_child(pid: int, pidfd: int) -> ProcessStatus:
    """Wait for our child ``pid`` to exit (without blocking trio), then reap it."""
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    # The pidfd is readable: the child has exited and wait4 returns at once.
    _, status, usage = os.wait4(pid, 0)  # noqa: ASYNC222
    return ProcessStatus(
        exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        max_rss_bytes=usage.ru_maxrss * 1024,
    )


class ExecSpawner:
    """One fresh ``python -m worker`` per worker; the supervisor reaps it."""

    remote = False
    makes_temp_dirs = False

    def __init__(self, env: dict[str, str], nursery: trio.Nursery, *, nice: int = 0) -> None:
        self.pid: int | None = os.getpid()
        self._env = env
        self._nice = nice
        self._nursery = nursery
        self._live: dict[int, SpawnedProcess] = {}
        self._relay = StderrRelay()
        nursery.start_soon(self._relay.run)

    async def spawn(
        self,
        worker_id: str,
        limits: ResourceLimits,
        sandbox: SandboxPolicy,
        *,
        cgroups: Sequence[int] = (),
    ) -> SpawnedProcess:
        down_r, down_w, up_r, up_w = _pipe_pair()
        try:
            pid = launch_python(
                "worker",
                [
                    f"--worker-id={worker_id}",
                    f"--read-fd={down_r}",
                    f"--write-fd={up_w}",
                    f"--parent-pid={os.getpid()}",
                    f"--limits={limits.model_dump_json()}",
                    f"--sandbox={sandbox.model_dump_json()}",
                    f"--nice={self._nice}",
                    *(f"--cgroup-fd={fd}" for fd in cgroups),
                ],
                self._env,
                [down_r, up_w, *cgroups],
                output_fd=self._relay.write_fd,
            )
        except OSError as exc:
            for fd in (down_r, down_w, up_r, up_w):
                os.close(fd)
            raise SpawnError(f"could not start a worker process: {exc}") from exc
        os.close(down_r)
        os.close(up_w)
        # The child is unreaped until we wait for it, so its pid cannot be
        # recycled before pidfd_open takes hold of it.
        pidfd = os.pidfd_open(pid)
        process = SpawnedProcess(worker_id, pid, read_fd=up_r, write_fd=down_w)
        self._live[pid] = process
        self._nursery.start_soon(self._reap, process, pidfd)
        return process

    async def _reap(self, process: SpawnedProcess, pidfd: int) -> None:
        with trio.CancelScope(shield=True):
            status = await reap_child(process.pid, pidfd)
        del self._live[process.pid]
        process.set_status(status)

    async def aclose(self) -> None:
        for process in list(self._live.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in list(self._live.values()):
            await process.reaped.wait()
        await stop_relays([self._relay])


#: ``sendmsg`` errors that mean the control socket is gone: the zygote's end,
#: or ours, closed by the reader that found the zygote dead (EBADF).
_CONTROL_GONE = frozenset(
    {errno.EPIPE, errno.ECONNRESET, errno.ECONNREFUSED, errno.ENOTCONN, errno.EBADF}
)


class _ZygoteLost(SpawnFailed):
    """A spawn that failed because its zygote exited; the next zygote may serve it."""


class ZygoteSpawner:
    """Forks workers from a pre-imported zygote process over a control socket.

    The zygote is started lazily and restarted if it dies; workers of a dead
    zygote die with it (parent-death signal) and are reported as lost.
    """

    remote = False
    makes_temp_dirs = True

    def __init__(
        self,
        env: dict[str, str],
        nursery: trio.Nursery,
        *,
        start_timeout: float,
        stop_grace: float = 5.0,
        standby: int = 0,
        hidden: tuple[str, ...] = (),
        nice: int = 0,
    ) -> None:
        self.pid: int | None = None
        self._standby = standby
        self._nice = nice
        self._hidden = hidden
        self.boot_ms: float | None = None
        self._env = env
        self._nursery = nursery
        self._start_timeout = start_timeout
        self._stop_grace = stop_grace
        self._control: trio.socket.SocketType | None = None
        self._start_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._waiting: dict[str, trio.MemorySendChannel[SpawnedProcess | SpawnFailed]] = {}
        self._live: dict[int, SpawnedProcess] = {}
        self._pending_fds: dict[str, tuple[int, int]] = {}
        self._zygote_exited = trio.Event()
        # Per zygote started: set once its reports have ended (``_zygote_lost``).
        self._lost_events: dict[trio.socket.SocketType, trio.Event] = {}
        self._closing = False
        #: One per zygote started: its and its workers' stderr.
        self._relays: list[StderrRelay] = []

    async def start(self) -> trio.socket.SocketType:
        """Start the zygote unless it runs; return its control socket."""
        async with self._start_lock:
            if self._control is not None:
                return self._control
            if self._closing:
                raise SpawnError("the supervisor is shutting down; it starts no more workers")
            launched = trio.current_time()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            relay = StderrRelay()
            try:
                pid = launch_python(
                    "worker.zygote",
                    [
                        f"--control-fd={theirs.fileno()}",
                        f"--parent-pid={os.getpid()}",
                        f"--standby={self._standby}",
                        f"--nice={self._nice}",
                        *(f"--hide={path}" for path in self._hidden),
                    ],
                    self._env,
                    [theirs.fileno()],
                    output_fd=relay.write_fd,
                )
            except OSError as exc:
                ours.close()
                raise SpawnError(f"could not start the zygote: {exc}") from exc
            finally:
                theirs.close()
                relay.close_write_end()
                self._relays.append(relay)
                self._nursery.start_soon(relay.run)
            control = trio.socket.from_stdlib_socket(ours)
            pidfd = os.pidfd_open(pid)
            exited = self._zygote_exited = trio.Event()
            self._nursery.start_soon(self._watch_zygote, pid, pidfd, exited)
            ready = None
            try:
                with trio.move_on_after(self._start_timeout):
                    ready = await self._receive_report(control)
            finally:
                if not isinstance(ready, ZygoteReady):
                    # Timed out, failed or cancelled while it boots. Nothing
                    # else knows this zygote, and its watcher, shielded, waits
                    # until it is gone: kill it here.
                    os.kill(pid, signal.SIGKILL)
                    control.close()
            if not isinstance(ready, ZygoteReady):
                raise SpawnError(
                    "the zygote did not start (no ready report within "
                    f"{self._start_timeout} s); run `subvisor doctor` to see why"
                )
            self.pid = pid
            self.boot_ms = (trio.current_time() - launched) * 1000
            self._control = control
            self._lost_events[control] = trio.Event()
            self._nursery.start_soon(self._read_reports, control)
            return control

    async def _receive_report(
        self, control: trio.socket.SocketType
    ) -> ZygoteReady | WorkerSpawned | SpawnFailed | WorkerExited | None:
        data = await control.recv(MAX_CONTROL_DATAGRAM)
        if not data:
            return None
        return decode_zygote_report(data)

    async def _watch_zygote(self, pid: int, pidfd: int, exited: trio.Event) -> None:
        with trio.CancelScope(shield=True):
            await reap_child(pid, pidfd)
        exited.set()

    async def _read_reports(self, control: trio.socket.SocketType) -> None:
        try:
            while True:
                try:
                    report = await self._receive_report(control)
                except (OSError, RemoteProtocolError):
                    report = None
                if report is None:
                    break
                if isinstance(report, WorkerSpawned | SpawnFailed):
                    waiter = self._waiting.pop(report.worker_id, None)
                    outcome: SpawnedProcess | SpawnFailed
                    if isinstance(report, WorkerSpawned):
                        # Registered here, in report order, so an ``exited``
                        # right behind ``spawned`` finds the record.
                        outcome = self._live[report.pid] = self._new_process(report)
                    else:
                        outcome = report
                    if waiter is not None:
                        try:
                            waiter.send_nowait(outcome)
                        except trio.BrokenResourceError:
                            self._discard(outcome)  # its spawn was cancelled
                elif isinstance(report, WorkerExited):
                    process = self._live.pop(report.pid, None)
                    if process is not None:
                        process.set_status(
                            ProcessStatus(
                                exit_code=report.exit_code,
                                signal=report.signal,
                                cpu_seconds=report.cpu_seconds,
                                max_rss_bytes=report.max_rss_kb * 1024,
                            )
                        )
        finally:
            self._zygote_lost(control)

    def _new_process(self, report: WorkerSpawned) -> SpawnedProcess:
        read_fd, write_fd = self._pending_fds.pop(report.worker_id)
        return SpawnedProcess(report.worker_id, report.pid, read_fd=read_fd, write_fd=write_fd)

    def _zygote_lost(self, control: trio.socket.SocketType) -> None:
        """The zygote is gone: its workers died with it; nobody will report them."""
        if self._control is control:
            self._control = None
        control.close()
        lost = self._lost_events.pop(control, None)
        if lost is not None:
            lost.set()
        for worker_id, waiter in list(self._waiting.items()):
            failed = _ZygoteLost(worker_id=worker_id, error="the zygote exited")
            try:
                waiter.send_nowait(failed)
            except trio.BrokenResourceError:
                self._discard(failed)
        self._waiting.clear()
        for process in self._live.values():
            process.set_status(
                ProcessStatus(exit_code=None, signal=None, cpu_seconds=0.0, max_rss_bytes=0)
            )
        self._live.clear()

    async def spawn(
        self,
        worker_id: str,
        limits: ResourceLimits,
        sandbox: SandboxPolicy,
        *,
        cgroups: Sequence[int] = (),
    ) -> SpawnedProcess:
        # A zygote that exits with our request unanswered leaves nothing of it
        # running (its children die with it), so the request goes once more,
        # to the zygote that replaces it. Only once: one that keeps dying has
        # a reason ``subvisor doctor`` can show.
        ask = functools.partial(
            self._request_worker,
            worker_id=worker_id,
            limits=limits,
            sandbox=sandbox,
            cgroups=cgroups,
        )
        outcome = await ask(await self.start())
        if isinstance(outcome, _ZygoteLost):
            self._discard(outcome)
            outcome = await ask(await self.start())
        if isinstance(outcome, SpawnFailed):
            self._discard(outcome)
            raise SpawnError(f"the zygote could not fork worker {worker_id}: {outcome.error}")
        return outcome

    async def _request_worker(
        self,
        control: trio.socket.SocketType,
        *,
        worker_id: str,
        limits: ResourceLimits,
        sandbox: SandboxPolicy,
        cgroups: Sequence[int],
    ) -> SpawnedProcess | SpawnFailed:
        """Ask the zygote behind ``control`` for the worker; what it (or its end) answered."""
        down_r, down_w, up_r, up_w = _pipe_pair()
        send, receive = trio.open_memory_channel[SpawnedProcess | SpawnFailed](1)
        self._waiting[worker_id] = send
        self._pending_fds[worker_id] = (up_r, down_w)
        try:
            fds = array.array("i", [down_r, up_w, *cgroups])
            request = SpawnWorker(
                worker_id=worker_id, limits=limits, sandbox=sandbox, cgroups=len(cgroups)
            )
            async with self._send_lock:
                await control.sendmsg(
                    [encode_control(request)],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())],
                )
        except BaseException as exc:
            # Not sent (trio sends nothing when it raises Cancelled), so no
            # report will come.
            self._waiting.pop(worker_id, None)
            self._discard(SpawnFailed(worker_id=worker_id, error="not sent"))
            if isinstance(exc, OSError | trio.ClosedResourceError):
                gone = not isinstance(exc, OSError) or exc.errno in _CONTROL_GONE
                if gone and await self._lost(control):
                    return _ZygoteLost(worker_id=worker_id, error=f"the zygote exited ({exc})")
                raise SpawnError(f"could not reach the zygote: {exc}") from exc
            raise
        finally:
            # The zygote holds its own copies now (or never will).
            os.close(down_r)
            os.close(up_w)
        try:
            return await receive.receive()
        except BaseException:
            # Cancelled after the request went out: the zygote forks the
            # worker anyway, and nothing would ever talk to it or stop it.
            with contextlib.suppress(trio.WouldBlock):
                self._discard(receive.receive_nowait())
            # A report still to come finds the channel closed (see _read_reports).
            receive.close()
            raise

    async def _lost(self, control: trio.socket.SocketType) -> bool:
        """Wait until the reports from the zygote behind ``control`` ended; False if they go on.

        Its last reports (workers' exits) may still be queued behind the end
        of the socket: the reader takes them first, then forgets the zygote.
        """
        lost = self._lost_events.get(control)
        if lost is not None:
            with trio.move_on_after(self._start_timeout):
                await lost.wait()
        return control not in self._lost_events

    def _discard(self, outcome: SpawnedProcess | SpawnFailed) -> None:
        """Let go of a worker no spawn will return: kill it, close our pipe ends."""
        if isinstance(outcome, SpawnFailed):
            fds = self._pending_fds.pop(outcome.worker_id, ())
        else:
            # Fresh from the fork, it has started nothing, so killing the pid
            # is enough. It stays in ``_live`` until the zygote reports its exit.
            with contextlib.suppress(ProcessLookupError):
                os.kill(outcome.pid, signal.SIGKILL)
            fds = (outcome.read_fd, outcome.write_fd)
        for fd in fds:
            os.close(fd)

    async def aclose(self) -> None:
        try:
            await self._stop_zygote()
        finally:
            await stop_relays(self._relays)

    async def _stop_zygote(self) -> None:
        self._closing = True
        control, self._control = self._control, None
        if control is None:
            return
        # EOF on the control socket tells the zygote to kill its workers and exit.
        control.shutdown(socket.SHUT_RDWR)
        with trio.move_on_after(self._stop_grace):
            await self._zygote_exited.wait()
        if not self._zygote_exited.is_set() and self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            await self._zygote_exited.wait()
