"""A worker's life after fork or exec: limits, handshake, then serve requests.

The worker ends when the supervisor says ``shutdown``, when its pipe closes
(EOF: the supervisor is gone, so nobody would read our answers), or when the
connection breaks. It never outlives its parent: the parent-death signal is
armed by whoever started it, and EOF covers the rest.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
import traceback
from typing import Any, Literal, cast

import trio
from pydantic import BaseModel

from protocol import (
    MAX_CONTROL_DATAGRAM,
    PROTOCOL_VERSION,
    Cancel,
    ConnectionClosed,
    ErrorReply,
    Heartbeat,
    Hello,
    Progress,
    RemoteProtocolError,
    ResourceLimits,
    Response,
    SandboxPolicy,
    SandboxReport,
    Shutdown,
    SupervisorRequest,
    Welcome,
    decode_spawn_request,
)

from ._agent_commands import AGENT_COMMANDS
from ._channel import SupervisorError, SupervisorLink
from ._commands import KERNEL_COMMANDS, Command, CommandContext, CommandError
from ._fdpass import FD_SIZE, MAX_SPAWN_FDS, received_fds
from ._privileges import set_child_subreaper, set_dumpable
from ._process import apply_resource_limits, join_cgroups, prefer_for_oom_kill
from ._sandbox import apply_sandbox
from ._subtree import kill_descendants, reap_adopted
from ._workflow_commands import WORKFLOW_COMMANDS
from .tools import command_pids

__all__ = ["run_standby", "run_worker", "serve"]

SpawnMode = Literal["zygote", "exec"]

#: Everything a worker can be asked to do.
WORKER_COMMANDS: dict[str, Command[Any, Any]] = {
    **KERNEL_COMMANDS,
    **AGENT_COMMANDS,
    **WORKFLOW_COMMANDS,
}

EXIT_OK = 0
EXIT_PROTOCOL_ERROR = 65
EXIT_INTERNAL_ERROR = 70


#: Tasks kept waiting to take over reading; more than this exit after their request.
_MAX_IDLE_READERS = 8


class _Session:
    """One worker's request table, and the tasks that read and answer the supervisor.

    Exactly one task reads at a time. When a read ends with a request, that
    task passes the reading on to an idle task (or a new one) and answers the
    request itself: the reply goes out in the same scheduler batch as the
    read, and no task is spawned per request. Requests still run
    concurrently, each in its own task with its own cancel scope.

    A command that cannot wait (a plain-function handler) is answered by the
    reading task without passing the reading on, when its reply fits in the
    pipe at once: it could not have run concurrently with anything anyway,
    and the reader goes straight back to reading, with no task switch. A reply
    that would wait for the pipe passes the reading on first, so that a full
    pipe never stops the worker from reading (a ``cancel`` among others).
    """

    def __init__(self, link: SupervisorLink, commands: dict[str, Command[Any, Any]]) -> None:
        self.link = link
        self.commands = commands
        self.scopes: dict[int, trio.CancelScope] = {}
        self._idle: list[trio.lowlevel.Task] = []

    async def read_and_answer(self, nursery: trio.Nursery) -> None:
        """Read until a request arrives, answer it, then wait to read again; until shutdown."""
        while True:
            request = await self._read_until_request(nursery)
            if request is None:
                return
            command = self.commands.get(request.method)
            if command is not None and not command.waits:
                rest = self.link.send_now(self._answer_now(request, command))
                if not rest:
                    continue  # answered; read on
                self._pass_reading_on(nursery)
                await self.link.write_frame(rest)
            else:
                self._pass_reading_on(nursery)
                await self.run_request(request)
            if len(self._idle) >= _MAX_IDLE_READERS:
                return
            await self._wait_to_read()

    async def _read_until_request(self, nursery: trio.Nursery) -> SupervisorRequest | None:
        """Route messages until a read ends with a request (returned); None after shutdown."""
        link = self.link
        while True:
            messages = await link.receive()
            last = messages[-1]
            for message in messages:
                if isinstance(message, SupervisorRequest):
                    if message is last:
                        return message
                    nursery.start_soon(self.run_request, message)
                elif isinstance(message, _END):
                    link.fail_pending()
                    nursery.cancel_scope.cancel()
                    return None
                elif isinstance(message, Cancel):
                    self.cancel(message.id)
                elif isinstance(message, Heartbeat):
                    await link.send(Heartbeat(seq=message.seq))
                elif isinstance(message, _FOR_OUR_REQUESTS):
                    link.deliver(message)
                elif not isinstance(message, Welcome):
                    raise RemoteProtocolError(f"unexpected {message.type!r} from supervisor")

    def _pass_reading_on(self, nursery: trio.Nursery) -> None:
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop())
        else:
            nursery.start_soon(self.read_and_answer, nursery)

    async def _wait_to_read(self) -> None:
        task = trio.lowlevel.current_task()
        self._idle.append(task)

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def run_request(self, request: SupervisorRequest) -> None:
        """Answer ``request``; a ``cancel`` while its handler waits answers ``cancelled``."""
        command = self.commands.get(request.method)
        reply: Response | ErrorReply
        if command is None or not command.waits:
            # No cancel scope for a command that cannot wait: entering and
            # leaving one costs more than most such commands, and a ``cancel``
            # for it can only be read after it answered (this task holds the loop).
            reply = self._answer_now(request, command)
        else:
            try:
                # The connection validated the params against the method's model.
                scope = self.scopes[request.id] = trio.CancelScope()
                try:
                    with scope:
                        result = await command.handler(
                            request.params, CommandContext(self.link, request.id)
                        )
                finally:
                    del self.scopes[request.id]
                if scope.cancelled_caught:
                    raise CommandError("cancelled", "request cancelled")
                reply = Response.answering(request.id, result)
            except Exception as exc:
                reply = _error_reply(request.id, exc)
        await self.link.send(reply)

    def _answer_now(
        self, request: SupervisorRequest, command: Command[Any, Any] | None
    ) -> Response | ErrorReply:
        """The answer of a command that cannot wait (or of one this worker lacks)."""
        try:
            if command is None:
                # A method of the protocol that this worker was not given
                # (``serve(commands=...)``).
                raise CommandError(
                    "unknown_method",
                    f"this worker does not serve {request.method!r}; "
                    f"it serves: {sorted(self.commands)}",
                )
            # ``waits`` is False: a plain function, whose value is the result model.
            result = command.handler(request.params, CommandContext(self.link, request.id))
            return Response.answering(request.id, cast("BaseModel", result))
        except Exception as exc:
            return _error_reply(request.id, exc)

    def cancel(self, request_id: int) -> None:
        scope = self.scopes.get(request_id)
        # A cancel may cross the reply on the wire; then there is nothing to do.
        if scope is not None:
            scope.cancel()


def _error_reply(request_id: int, exc: Exception) -> ErrorReply:
    """The error answer for a command that raised ``exc``."""
    if isinstance(exc, CommandError):
        return ErrorReply(id=request_id, code=exc.code, message=str(exc))
    if isinstance(exc, SupervisorError):
        # A command that asked the supervisor and was refused: say what it said.
        return ErrorReply(id=request_id, code=exc.code, message=exc.message)
    return ErrorReply(id=request_id, code="internal_error", message=f"{type(exc).__name__}: {exc}")


_END = (ConnectionClosed, Shutdown)
# What answers our own requests to the supervisor (``link.deliver``).
_FOR_OUR_REQUESTS = (Response, ErrorReply, Progress)


async def serve(
    link: SupervisorLink,
    *,
    worker_id: str,
    spawn_mode: SpawnMode,
    rlimits: dict[str, list[int]],
    sandbox: SandboxReport | None = None,
    commands: dict[str, Command[Any, Any]] | None = None,
    cgroup_error: str = "",
) -> int:
    """Handshake with the supervisor and answer its requests until told to stop."""
    await link.send(
        Hello(
            protocol_version=PROTOCOL_VERSION,
            worker_id=worker_id,
            pid=os.getpid(),
            pgid=os.getpgid(0),
            spawn_mode=spawn_mode,
            rlimits=rlimits,
            sandbox=sandbox,
            nice=os.getpriority(os.PRIO_PROCESS, 0),
            cgroup_error=cgroup_error,
        )
    )
    session = _Session(link, commands if commands is not None else WORKER_COMMANDS)
    async with trio.open_nursery() as nursery:
        link.attach(nursery)
        nursery.start_soon(_reap_adopted_orphans)
        # The nursery ends after shutdown or EOF, which cancel everything in it.
        await session.read_and_answer(nursery)
    return EXIT_OK


async def _reap_adopted_orphans() -> None:
    """Reap the orphans this subreaper adopts as they exit (a command's own are left to it)."""
    with trio.open_signal_receiver(signal.SIGCHLD) as signals:
        async for _ in signals:
            reap_adopted(keep=command_pids())


def _confine(
    limits: ResourceLimits, sandbox: SandboxPolicy | None, cgroup_fds: list[int]
) -> tuple[Any, SandboxReport, str]:
    """Everything a worker does to itself before its hello, in order (S-SEC-1, S-SEC-4).

    Into its cgroups first, while it is the only process of its tree; the
    OOM killer's bias while it may still set its floor (``prefer_for_oom_kill``);
    the subreaper next, so that no descendant can ever leave the tree; then the
    rlimits (inherited by every descendant); then mounts, Landlock, the
    privilege drop and the seccomp filter (``apply_sandbox``); then
    non-dumpable, so that what the worker starts cannot read its memory
    (where its conversation lives).
    """
    cgroup_error = join_cgroups(cgroup_fds)
    prefer_for_oom_kill()
    set_child_subreaper()
    rlimits = apply_resource_limits(limits)
    report = apply_sandbox(sandbox, file_size_cap=limits.file_size_mb is not None)
    # Last: a user namespace (in ``apply_sandbox``) needs us dumpable to map uids.
    set_dumpable(False)
    return rlimits, report, cgroup_error


async def _serve_fds(read_fd: int, write_fd: int, **kwargs: Any) -> int:
    link = SupervisorLink(read_fd, write_fd)
    try:
        return await serve(link, **kwargs)
    finally:
        link.close()


def run_worker(
    read_fd: int,
    write_fd: int,
    *,
    worker_id: str,
    limits: ResourceLimits,
    spawn_mode: SpawnMode,
    sandbox: SandboxPolicy | None = None,
    cgroup_fds: list[int] | None = None,
) -> int:
    """Apply ``limits`` and ``sandbox``, then serve the supervisor on the given pipe ends.

    Returns an exit code. It joins the cgroups of ``cgroup_fds`` first; the
    sandbox goes on before the event loop starts, while this is the
    process's only thread (S-SBX-1).
    """
    try:
        rlimits, report, cgroup_error = _confine(limits, sandbox, cgroup_fds or [])
        serve_fds = functools.partial(
            _serve_fds,
            read_fd,
            write_fd,
            worker_id=worker_id,
            spawn_mode=spawn_mode,
            rlimits=rlimits,
            sandbox=report,
            cgroup_error=cgroup_error,
        )
        return trio.run(serve_fds)
    except BaseException as exc:
        return _exit_code_for(exc, worker_id)
    finally:
        # Nothing outlives its worker (S-SEC-5); a worker that is killed
        # instead leaves this to its zygote, the next subreaper up.
        kill_descendants()


def run_standby(assign_fd: int) -> int:
    """A pre-forked worker: start the runtime, wait for an assignment, then serve it.

    The zygote keeps a few of these so that a spawn skips both the fork and
    the event loop's start (page faults, mostly) on its critical path. CPU
    time spent while waiting counts toward RLIMIT_CPU; it is a few ms.
    """
    try:
        return trio.run(_standby, assign_fd)
    except BaseException as exc:
        return _exit_code_for(exc, "standby")
    finally:
        kill_descendants()


async def _standby(assign_fd: int) -> int:
    with socket.socket(fileno=assign_fd) as sock:
        sock.setblocking(False)
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                data, ancdata, _, _ = sock.recvmsg(
                    MAX_CONTROL_DATAGRAM, socket.CMSG_SPACE(MAX_SPAWN_FDS * FD_SIZE)
                )
                break
            except BlockingIOError:
                continue
    fds = received_fds(ancdata)
    request = decode_spawn_request(data) if data else None
    if request is None or len(fds) != 2 + request.cgroups:
        # The zygote let go of us (it is shutting down), or sent nonsense.
        for fd in fds:
            os.close(fd)
        return EXIT_OK if not data else EXIT_PROTOCOL_ERROR
    # Only now is the policy known. The loop has started no thread, so the
    # restriction covers the whole process (``apply_sandbox`` checks).
    rlimits, report, cgroup_error = _confine(request.limits, request.sandbox, fds[2:])
    return await _serve_fds(
        fds[0],
        fds[1],
        worker_id=request.worker_id,
        spawn_mode="zygote",
        rlimits=rlimits,
        sandbox=report,
        cgroup_error=cgroup_error,
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _exit_code_for(exc: BaseException, worker_id: str) -> int:
    leaves = _leaves(exc)
    if all(isinstance(e, trio.BrokenResourceError | trio.ClosedResourceError) for e in leaves):
        # The supervisor closed our pipe while we were writing: it is gone.
        return EXIT_OK
    for leaf in leaves:
        # The supervisor's violation, in one line. Ours (a LocalProtocolError) is a bug:
        # its traceback follows.
        if isinstance(leaf, RemoteProtocolError):
            print(f"subvisor worker {worker_id}: protocol error: {leaf}", file=sys.stderr)
            return EXIT_PROTOCOL_ERROR
    traceback.print_exception(exc)
    return EXIT_INTERNAL_ERROR
