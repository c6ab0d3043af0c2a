"""``WorkerHandle``: the supervisor's view of one live worker.

A handle owns the supervisor's end of the worker's pipes and its protocol
``Connection``. One reader task per worker decodes frames and routes them:
answers to the requests waiting for them, events into a bounded buffer (a
full buffer stops the reader, which fills the pipe, which blocks the worker:
backpressure instead of unbounded memory), worker requests to this
worker's own request handler (whoever drives the worker gave it at spawn),
whose answer must be the result model of the request's method
(``protocol.WORKER_METHODS``). Worker requests get the same backpressure: at
most ``MAX_ANSWERING`` are answered at once, and a request past it stops the
reader, where it is, until one of them has been answered (sent whole).

The cap counts requests, and a request, like its answer, may be a whole frame
(8 MB): so the bytes are capped too. What the supervisor holds for a worker's
requests, the frames of those being answered and of their encoded answers not
yet written, is kept within ``ANSWERING_FRAMES`` frames: a request that would
take it past them stops the reader the same way until answers have been
written, unless nothing is held (a request larger than the budget is then
answered alone, so no legal frame waits for ever). An answer is encoded only
in its turn to be written (``_answer_turn``, one at a time per worker), so at
most one encoded answer waits on a worker that stopped reading; the others
wait as the results their handlers returned (an echo's is its request's own
value). Ordering: only the reader task admits requests (``_dispatch``), and it
checks and charges a request's bytes with no await in between, so the
requests admitted never overshoot the budget; an answer's bytes are charged
without waiting, when it is encoded (it exists by then: waiting would hold it
anyway), and each request's and answer's bytes are released, and the reader
woken, once the answer has been written or could not be. Past the budget the
worker holds at most the budget, one encoded answer, the request the reader
stopped at and the frame it is reading: a few frames, not ``MAX_ANSWERING``
requests and answers.

That budget is per worker; all workers together draw on the supervisor's
``ByteBudget`` (``_byte_budget``, S-SEC-8), whose module holds the fairness
argument. Before the reader (never a requester: ``_read_for`` hands the read
over) reads the body of a frame whose header it has, it takes the frame's size
from it, waiting there with the same backpressure; so a worker past it holds no
decoded request either, only part of one read. The first message completed after
that take is that frame (``_reading_charge``): a worker request keeps the bytes
until its answer is written, anything else gives them back once routed.

A write to the worker that it does not read stays blocked, and the rest of a
frame already begun cannot be cancelled (``worker.PipeStream``): a worker
whose writes make no progress for ``write_stall_s`` is stopped for it by the
watchdog (``overdue``), and ``shutdown`` sends its ``shutdown`` within its
grace, so neither waits on the worker for ever.

Each handle holds the worker's ``EventBudget`` (S-SEC-8): every event frame
is counted on arrival, and whoever records something for the worker charges
it too; once the budget is spent the worker is stopped for it, and events
that arrive meanwhile are dropped.

The worker ends exactly once. Whatever notices first (the reaper's exit
status, EOF, a protocol violation, a cap, a watchdog) only contributes to
the single ``WorkerExit`` built in ``_finish``; the first *reason* to kill it
wins, so a worker killed for its memory cap is reported as such and not as
"killed by SIGKILL".

Reading is a baton, held by one task at a time. The reader task holds it,
except while a requester holds it to read its own answer (``request``): the
requester that gets its answer in the read it was woken for returns in the
same scheduler batch, where a hop through the reader task would cost it
another batch. A requester only takes a free baton, and only routes answers
itself; the first message that is anything else, and every one after it, is
handed over to the reader task, with the baton, in order, and so is a
read's error. The reader takes the baton back whenever it runs and finds it
free, and steps aside (frees it and parks) after a read that woke a
requester that has not run yet: that requester, running next, either takes
it for its next request or wakes the reader (``_give_back_reading``), so
the baton is never left free with nobody bound to run. Race: the reader may
wait in the same read (an event for a full buffer) after it woke one, and
the woken requester then runs first, finds the baton held, and waits for
its next answer; a reader that stepped aside then would wait for it
forever, so it steps aside only while a requester it woke has not yet run
(``_Pending.taken``).

A protocol violation is the worker's only when its frames broke the protocol
(``RemoteProtocolError``). A ``LocalProtocolError`` is ours (an answer that
cannot be framed, a message out of turn): it is never taken for a dead
worker; it ends this worker's supervision, the worker with it, and reaches
the fleet's log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import psutil
import trio
from pydantic import BaseModel, ValidationError

from protocol import (
    PROTOCOL_VERSION,
    WORKER_METHODS,
    Cancel,
    CommandSpec,
    Connection,
    ConnectionClosed,
    ConnectionState,
    ErrorReply,
    Event,
    FrameLimits,
    Heartbeat,
    Hello,
    LocalProtocolError,
    Message,
    Progress,
    ProtocolError,
    RemoteProtocolError,
    ResourceLimits,
    Response,
    Role,
    SandboxReport,
    Shutdown,
    Welcome,
    WorkerRequest,
)
from worker import Outcome

from ._budget import EventBudget, EventBudgetExceededError, EventBudgetLimits
from ._byte_budget import FLEET_ANSWERING_FRAMES, ByteBudget
from ._cgroups import WorkerCgroup
from ._errors import SubvisorError, WorkerExitedError, WorkerRequestError
from ._exit import ExitKind, ProcessStatus, WorkerExit, describe_signal, signal_name
from ._process_groups import WorkerProcessGroups
from ._spawner import SpawnedProcess
from ._tree_caps import TreeUsage, breach, signal_tree

__all__ = ["RequestHandler", "RequestRefusedError", "WireTap", "WorkerHandle"]

_READ_SIZE = 256 * 1024

#: Worker requests answered at once, per worker. Each one holds its request
#: and then its answer frame (each up to a frame, 8 MB) until the worker has
#: read the answer: without a cap a worker that sends requests and stops
#: reading grows the supervisor by ~16 MB a request, up to the protocol's 4096
#: pending ones. Past the cap the reader stops, like for a full event buffer,
#: so the worker's pipe fills and the worker blocks. 32 is far above what an
#: agent runs in parallel (its tool calls, one model call, approvals).
MAX_ANSWERING = 32
#: The bytes a worker's requests may make the supervisor hold, in frames of
#: ``max_frame_size``: the frames of the requests being answered plus those of
#: their answers encoded and not yet written (the module docstring). Without
#: it ``MAX_ANSWERING`` requests of a frame each and their answers are held:
#: 0.5 GB for a worker that asks for 8 MB echoes and stops reading. Two: a
#: request of a whole frame and its answer of a whole frame fit together, so
#: the largest request is answered without waiting on anything else, and an
#: agent's usual requests (KBs; a model call of a long conversation, a few MB)
#: never reach it.
ANSWERING_FRAMES = 2
_EOF_AFTER_EXIT_S = 1.0

_ANSWERS = (Response, ErrorReply)
#: What sending to a worker raises once it is gone (``_send_quietly``).
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, RemoteProtocolError)

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class RequestRefusedError(SubvisorError):
    """Raised by a request handler to answer a worker's request with an error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


#: Answers one worker's requests with the result model of the request's
#: method (``protocol.WORKER_METHODS``); raises ``RequestRefusedError`` to refuse.
RequestHandler = Callable[["WorkerHandle", WorkerRequest], Awaitable[BaseModel]]

#: Sees every frame the supervisor sends to a worker (debugging, and tests
#: proving what never crosses the boundary).
WireTap = Callable[[str, bytes], None]


def _innermost(exc: BaseException) -> BaseException:
    """The first exception inside ``exc``'s groups (``exc`` itself if it is no group)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class _HandedOver:
    """What a requester read but left to the reader task: messages in order, then a failure."""

    __slots__ = ("error", "messages")

    def __init__(self) -> None:
        self.messages: list[Message | ConnectionClosed] = []
        self.error: BaseException | None = None

    def __bool__(self) -> bool:
        return bool(self.messages) or self.error is not None


class _Pending(Outcome[Response | ErrorReply | WorkerExit]):
    # A class, not the alias ``Outcome[...]``: calling an alias tries to set
    # ``__orig_class__`` on the (slotted) instance and swallows the error, per request.
    __slots__ = ("taken",)

    def __init__(self) -> None:
        super().__init__()
        #: Its requester has run since its answer came (see the module on the baton).
        self.taken = False


class WorkerHandle:
    """A running worker: send it requests, read its events, stop it."""

    def __init__(
        self,
        process: SpawnedProcess,
        *,
        mode: str,
        limits: ResourceLimits,
        frame_limits: FrameLimits,
        event_buffer: int,
        kill_grace_s: float,
        request_handler: RequestHandler,
        write_stall_s: float = 30.0,
        wire_tap: WireTap | None = None,
        event_budget: EventBudgetLimits | None = None,
        cgroup: WorkerCgroup | None = None,
        tree_caps: str = "sampling",
        byte_budget: ByteBudget | None = None,
    ) -> None:
        self.worker_id = process.worker_id
        #: What this worker may make the supervisor record (S-SEC-8).
        self.budget = EventBudget(event_budget)
        #: The worker's cgroups, when caps are enforced by cgroup (S-SEC-4).
        self.cgroup = cgroup
        #: How caps over its whole tree are enforced: ``cgroup v1``, ``sampling``...
        self.tree_caps = tree_caps
        self.pid = process.pid
        #: The cluster node the worker runs on (``None``: this machine); its pid is that node's.
        self.node = process.node
        self.mode = mode
        self.limits = limits
        self.hello: Hello | None = None
        self.exit: WorkerExit | None = None
        #: The directories walked for repositories it planted once it ends (S-SEC-3):
        #: the supervisor's policy, never the worker's claim.
        self.swept_roots: tuple[str, ...] = ()
        self.peak_rss_bytes = 0
        self.started_at = trio.current_time()
        self.ready_at: float | None = None
        self.last_activity = self.started_at
        self._process = process
        self._kill_grace_s = kill_grace_s
        self._write_stall_s = write_stall_s
        # Sends begun and not ended, sends ended, and what the watchdog last saw
        # of them: a write stalls while sends are begun and none ends (``overdue``).
        self._sends_begun = 0
        self._sends_ended = 0
        self._stall_seen = (0, self.started_at)
        # A slot per worker request being answered (``MAX_ANSWERING``).
        self._answering = trio.Semaphore(MAX_ANSWERING)
        # The bytes held for them (``ANSWERING_FRAMES``), the reader while it
        # waits for some to be freed, and the turn to encode and write an answer.
        self._answering_budget = ANSWERING_FRAMES * frame_limits.max_frame_size
        self._answering_bytes = 0
        self._answering_freed = trio.lowlevel.ParkingLot()
        self._answer_turn = trio.Lock()
        # What it holds of the fleet's budget (``_byte_budget``), and what of it
        # the frame being read took before its body was read (0: none).
        self._bytes = (
            byte_budget
            or ByteBudget(
                FLEET_ANSWERING_FRAMES * frame_limits.max_frame_size,
                reserve=frame_limits.max_frame_size,
            )
        ).account()
        self._reading_charge = 0
        self._request_handler = request_handler
        self._wire_tap = wire_tap
        self._connection = Connection(Role.SUPERVISOR, limits=frame_limits)
        self._pipe = process.open_stream()
        self._pending: dict[int, _Pending] = {}
        # The reading baton (module docstring): the task holding it, None when free.
        self._reader: trio.lowlevel.Task | None = None
        # The reader task while it waits for the baton.
        self._reader_parked: trio.lowlevel.Task | None = None
        self._handed_over = _HandedOver()
        self._heartbeats: dict[int, trio.Event] = {}
        self._events_in, self._events_out = trio.open_memory_channel[Event](event_buffer)
        self._ready = trio.Event()
        self._eof = trio.Event()
        self._ended = trio.Event()
        self._kill_reason: tuple[ExitKind, str] | None = None
        self._psutil: psutil.Process | None = None
        #: The process groups its commands announced, checked to be its own (``process_group``).
        self.process_groups = WorkerProcessGroups(self.pid, local=self.node is None)

    @property
    def _ps(self) -> psutil.Process | None:
        """psutil's handle on the (local, unreaped) worker, made when first needed."""
        if self._psutil is None and self.node is None and not self._process.reaped.is_set():
            # Unreaped, its pid cannot have been recycled: this is our worker.
            with contextlib.suppress(psutil.NoSuchProcess):
                self._psutil = psutil.Process(self.pid)
        return self._psutil

    # -- public API ---------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """True until the worker has ended."""
        return self.exit is None

    @property
    def sandbox(self) -> SandboxReport | None:
        """The sandbox the worker stated in its hello (None before the handshake)."""
        return self.hello.sandbox if self.hello is not None else None

    async def request(self, method: CommandSpec[P, R], params: P) -> R:
        """Run ``method`` (of ``protocol.SUPERVISOR_METHODS``) in the worker; return its result.

        The worker's answer is validated against the method's result model;
        one that does not fit raises ``WorkerRequestError`` (``bad_result``).
        Raises ``WorkerRequestError`` if the worker answers with an error and
        ``WorkerExitedError`` if it ends first. Cancelling the caller sends the
        worker a ``cancel`` for this request.
        """
        self._raise_if_ended()
        request_id = self._connection.next_request_id()
        pending = self._pending[request_id] = _Pending()
        try:
            self.last_activity = trio.current_time()
            await self._send(method.request_for(request_id, params))
            if self._reader is None and not self._handed_over:
                self._reader = trio.lowlevel.current_task()
                try:
                    await self._read_for(pending)
                finally:
                    # Answered, handed over, or cancelled: the reader task reads on.
                    self._give_back_reading()
            await pending.wait()
        except trio.Cancelled:
            if self.alive:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await self._send_quietly(Cancel(id=request_id))
            raise
        finally:
            self._pending.pop(request_id, None)
            pending.taken = True
            # Woken by the reader task, which stepped aside for us: wake it
            # unless a requester took the baton meanwhile.
            self._give_back_reading()
        outcome = pending.value
        if isinstance(outcome, WorkerExit):
            raise WorkerExitedError(outcome)
        if isinstance(outcome, ErrorReply):
            raise WorkerRequestError(method.name, outcome.code, outcome.message)
        assert isinstance(outcome, Response)
        try:
            return method.parse_result(outcome.result)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "result"
            raise WorkerRequestError(
                method.name,
                "bad_result",
                f"the worker's answer does not fit {method.result.__name__}: "
                f"{where}: {error['msg']}",
            ) from None

    async def receive_event(self) -> Event:
        """The next event from the worker; ``WorkerExitedError`` once it ended and all were read."""
        try:
            return await self._events_out.receive()
        except trio.EndOfChannel:
            await self._ended.wait()
            assert self.exit is not None
            raise WorkerExitedError(self.exit) from None

    async def receive_event_batch(self, max_events: int = 256) -> list[Event]:
        """The next event and any already waiting after it (at most ``max_events``).

        Raises ``WorkerExitedError`` once the worker ended and all were read.
        """
        batch = [await self.receive_event()]
        batch += self.queued_events(max_events - 1)
        return batch

    def queued_events(self, max_events: int = 256) -> list[Event]:
        """The events already read from the worker and not yet taken (at most ``max_events``).

        Every event the worker sent before an answer is queued before that answer
        wakes its requester, so after a request returns this holds all of them.
        """
        batch: list[Event] = []
        while len(batch) < max_events:
            try:
                batch.append(self._events_out.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return batch

    async def events(self) -> AsyncIterator[Event]:
        """Iterate over the worker's events until it ends."""
        async for event in self._events_out:
            yield event

    async def ping(self) -> float:
        """Round-trip a heartbeat; return the seconds it took."""
        self._raise_if_ended()
        seq = len(self._heartbeats) + 1
        while seq in self._heartbeats:
            seq += 1
        answered = self._heartbeats[seq] = trio.Event()
        started = trio.current_time()
        try:
            await self._send(Heartbeat(seq=seq))
            await answered.wait()
        finally:
            del self._heartbeats[seq]
        self._raise_if_ended()
        return trio.current_time() - started

    async def shutdown(self, grace_s: float = 5.0) -> WorkerExit:
        """Ask the worker to exit; kill it if it has not within ``grace_s``."""
        if self.alive:
            # The send counts against the grace too: it waits behind any frame
            # being written, which a worker that stopped reading never lets end.
            with trio.move_on_after(grace_s):
                if self._connection.state is ConnectionState.OPEN:
                    # Else it was asked already (closing), or there is no one to ask (before
                    # the handshake, or after the connection ended): it ends within the
                    # grace, or is killed.
                    await self._send_quietly(Shutdown(reason="supervisor asked the worker to stop"))
                await self._process.reaped.wait()
            if not self._process.reaped.is_set():
                await self.terminate(
                    ExitKind.KILLED, f"did not exit within {grace_s:g} s of shutdown"
                )
        return await self.wait()

    async def kill(self, reason: str = "killed by the supervisor") -> WorkerExit:
        """Stop the worker's whole process group (SIGTERM, grace, SIGKILL); return its exit."""
        await self.terminate(ExitKind.KILLED, reason)
        return await self.wait()

    async def wait(self) -> WorkerExit:
        """Wait until the worker has ended and return how."""
        await self._ended.wait()
        assert self.exit is not None
        return self.exit

    async def wait_ready(self) -> Hello:
        """Wait for the handshake (``hello``/``welcome``) to complete."""
        await self._ready.wait()
        if self.hello is None:
            self._raise_if_ended()
        assert self.hello is not None
        return self.hello

    def sample_rss(self) -> int | None:
        """Read the worker's current RSS in bytes (``None`` if it is gone).

        A worker on another node: as its node host last reported it (about
        every second), ``None`` before its first report.
        """
        if not self.alive:
            return None
        if self._ps is None:
            rss = self._process.reported_rss_bytes
            if rss is None:
                return None
        else:
            try:
                rss = int(self._ps.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                return None
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        return rss

    def owes_answer(self) -> bool:
        """True while the supervisor waits on the worker and the worker waits on nothing.

        Only then is silence suspicious: a worker with nothing to do, or one
        waiting for an approval or a model call, is not hung.
        """
        return bool(self._connection.pending_requests(Role.SUPERVISOR)) and not bool(
            self._connection.pending_requests(Role.WORKER)
        )

    # -- supervision (driven by the Supervisor) -------------------------------------

    async def supervise(self, release: Callable[[], Awaitable[tuple[str, ...]]]) -> None:
        """Run until the worker has ended; build its single ``WorkerExit``.

        ``release`` frees what the worker held (its fleet slot, its temp dir)
        and returns what it disarmed in the worker's writable roots
        (``WorkerExit.disarmed``). It runs before the end is published, so
        whoever ``wait``s sees them already freed and disarmed: a spawn right
        after finds the slot, a check the dir gone.
        """
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_loop, nursery)
                self.budget.on_exhausted = functools.partial(
                    nursery.start_soon, self._enforce_budget
                )
                await self._process.reaped.wait()
                # Frames written just before death are still in the pipe.
                with trio.move_on_after(_EOF_AFTER_EXIT_S):
                    await self._eof.wait()
                nursery.cancel_scope.cancel()
        except Exception as exc:
            # A bug of ours (a LocalProtocolError, say) ends the worker, named as the
            # cause: the worker must not outlive its supervision, nor be blamed. The
            # error propagates to whoever logs it.
            with trio.CancelScope(shield=True):
                cause = _innermost(exc)
                reason = f"killed: the supervisor failed: {type(cause).__name__}: {cause}"
                await self.terminate(ExitKind.KILLED, reason, grace=0)
            raise
        finally:
            with trio.CancelScope(shield=True):
                await self._finish(release)

    @property
    def caps_summary(self) -> str:
        """``memory 2048 MB, 256 processes, file size 4096 MB by cgroup v1 + rlimit`` (S-SEC-4)."""
        limits = self.limits
        parts = [
            f"memory {limits.memory_mb:g} MB" if limits.memory_mb is not None else None,
            f"{limits.max_processes} processes" if limits.max_processes is not None else None,
            f"CPU {limits.cpu_seconds} s" if limits.cpu_seconds is not None else None,
        ]
        tree = ", ".join(p for p in parts if p) or "no tree caps"
        size = limits.file_size_mb
        files = f"; file size {size} MB by rlimit" if size is not None else ""
        if files and (self.sandbox is None or not self.sandbox.reserved_space_capped):
            # RLIMIT_FSIZE alone lets fallocate reserve space past a file's end.
            files += " (space reserved by fallocate NOT capped)"
        elif files:
            files += " + seccomp"
        return f"{tree} over the whole tree by {self.tree_caps}{files}"

    @property
    def reading_paused(self) -> bool:
        """True while its reader waits for one of the worker's requests to be answered.

        ``MAX_ANSWERING`` of them are being answered, or they hold the bytes of
        ``ANSWERING_FRAMES`` frames, or the fleet's ``ByteBudget`` has no room
        for its next frame: the reader reads no more of its pipe until an answer
        has been written (backpressure).
        """
        return (
            self._answering.statistics().tasks_waiting > 0
            or bool(self._answering_freed)
            or self._bytes.waiting
        )

    @property
    def stopping(self) -> bool:
        """True once something decided to stop this worker."""
        return self._kill_reason is not None

    async def terminate(self, kind: ExitKind, reason: str, *, grace: float | None = None) -> None:
        """Stop the worker for ``reason`` (the first reason given wins); wait until it is reaped."""
        if self._kill_reason is None:
            self._kill_reason = (kind, reason)
        grace = self._kill_grace_s if grace is None else grace
        if grace > 0:
            self._signal_group(signal.SIGTERM)
            with trio.move_on_after(grace):
                await self._process.reaped.wait()
        self._signal_group(signal.SIGKILL)
        await self._process.reaped.wait()

    def _signal_group(self, sig: int) -> None:
        # Until the reaper reports the worker it is unreaped and owns its pid
        # and group id, so neither can be recycled under us.
        if self._process.reaped.is_set():
            return
        if self.node is not None:
            self._process.signal_tree(sig)
            return
        signal_tree(self.pid, sig, self.cgroup, self._ps)

    def overdue(self, now: float) -> tuple[ExitKind, str] | None:
        """The watchdog's verdict at ``now``: a wall or idle timeout to stop it for, or None.

        Its fleet asks every worker each round (``Supervisor``), so a timeout
        acts within a round of its deadline. An idle worker that owes no
        answer is not hung: its idle clock starts again. A worker none of
        whose writes ended for ``write_stall_s`` stopped reading its pipe:
        whatever waits to write to it (an answer, its ``shutdown``) would wait
        for ever, shielded where a frame is half written.
        """
        wall, idle = self.limits.wall_timeout_s, self.limits.idle_timeout_s
        if wall is not None and now >= self.started_at + wall:
            return ExitKind.WALL_TIMEOUT, f"wall timeout after {wall:g} s"
        ended, since = self._stall_seen
        if self._sends_begun == self._sends_ended or ended != self._sends_ended:
            # Nothing waits to be written, or a write ended since the last round.
            self._stall_seen = (self._sends_ended, now)
        elif now >= since + self._write_stall_s:
            return ExitKind.KILLED, (
                f"killed: it stopped reading its pipe (a write to it made no progress "
                f"for {self._write_stall_s:g} s)"
            )
        if idle is not None and now >= self.last_activity + idle:
            if self.owes_answer():
                return ExitKind.IDLE_WATCHDOG, (
                    f"idle watchdog: no frame for {idle:g} s while a request was pending"
                )
            self.last_activity = now
        return None

    async def _enforce_budget(self) -> None:
        assert self.budget.reason is not None
        await self.terminate(ExitKind.EVENT_BUDGET, self.budget.reason)

    async def _read_for(self, pending: _Pending) -> None:
        """Holding the baton, read and route answers until ``pending`` has its own.

        Stops early, handing the rest over to the reader task, at the first
        message that is not an answer, or a read that fails. Cancellation can
        only come in ``receive_some``, before anything was read.
        """
        handed_over = self._handed_over
        connection = self._connection
        while pending.value is None:
            if connection.incoming_frame_size and not self._reading_charge:
                # A frame's body to read that the fleet's budget must admit first:
                # the reader task waits for it, not a requester.
                return
            try:
                data = await self._pipe.receive_some(_READ_SIZE)
                messages = connection.receive_data(data)
            except (
                ProtocolError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                OSError,
            ) as exc:
                handed_over.error = exc
                return
            if self._reading_charge and messages and isinstance(messages[0], _ANSWERS):
                # The frame charged before its body was read is this answer.
                self._bytes.release(self._reading_charge)
                self._reading_charge = 0
            now = trio.current_time()
            for i, message in enumerate(messages):
                if not isinstance(message, _ANSWERS):
                    # The charge, if any, stays with messages[0] for the reader task.
                    handed_over.messages.extend(messages[i:])
                    return
                self.last_activity = now
                answered = self._pending.get(message.id)
                if answered is not None:
                    answered.set(message)

    def _give_back_reading(self) -> None:
        """Free the baton if this task holds it; wake the reader task if it waits for a free one."""
        if self._reader is trio.lowlevel.current_task():
            self._reader = None
        if self._reader is None and self._reader_parked is not None:
            trio.lowlevel.reschedule(self._reader_parked)
            self._reader_parked = None

    async def _wait_for_reading(self) -> None:
        """Park the reader task until a requester gives the baton back (or frees it)."""
        task = self._reader_parked = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._reader_parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            if self._reader_parked is task:
                self._reader_parked = None

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        me = trio.lowlevel.current_task()
        handed_over = self._handed_over
        connection = self._connection
        try:
            while True:
                if self._reader is None:
                    self._reader = me
                elif self._reader is not me:
                    await self._wait_for_reading()
                    continue
                if handed_over:
                    messages, handed_over.messages = handed_over.messages, []
                    error, handed_over.error = handed_over.error, None
                else:
                    incoming = connection.incoming_frame_size
                    if incoming and not self._reading_charge:
                        # Its header is read, its body not: the fleet's budget
                        # admits it first (backpressure, ``_byte_budget``).
                        await self._bytes.take(incoming)
                        self._reading_charge = incoming
                    data = await self._pipe.receive_some(_READ_SIZE)
                    messages, error = connection.receive_data(data), None
                now = trio.current_time()
                woken: list[_Pending] = []
                for message in messages:
                    # The first message completed after a charge is the frame it was for.
                    charged, self._reading_charge = self._reading_charge, 0
                    if isinstance(message, ConnectionClosed):
                        self._bytes.release(charged)
                        return
                    self.last_activity = now
                    answered = await self._dispatch(message, nursery, charged)
                    if answered is not None:
                        woken.append(answered)
                if error is not None:
                    raise error
                if not all(pending.taken for pending in woken):
                    # Step aside for a requester just woken that has not run: it
                    # runs next, and takes the baton for its next request or wakes us.
                    self._reader = None
                    await self._wait_for_reading()
        except RemoteProtocolError as exc:
            # Only the worker's violations: a LocalProtocolError (ours, re-raised by the
            # connection it poisoned) propagates, and ``supervise`` stops the worker for it.
            nursery.start_soon(
                self.terminate, ExitKind.PROTOCOL_VIOLATION, f"protocol violation: {exc}"
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            # Held for good: nobody reads after the end of the stream.
            self._reader = me
            self._bytes.release(self._reading_charge)
            self._reading_charge = 0
            self._eof.set()

    async def _dispatch(
        self, message: Message, nursery: trio.Nursery, charged: int = 0
    ) -> _Pending | None:
        """Route one message; the request it answered, when that woke its requester.

        ``charged``: the bytes its frame took of the fleet's budget before it was
        read, released once it is routed, or kept by a worker request until answered.
        """
        if charged and not isinstance(message, WorkerRequest):
            try:
                return await self._dispatch(message, nursery)
            finally:
                self._bytes.release(charged)
        # Most frequent first. The reader yields once per read (in
        # ``receive_some``), not per message: an event only waits when the
        # buffer is full.
        if isinstance(message, Event):
            try:
                self.budget.charge(events=1)
            except EventBudgetExceededError:
                return None  # the worker is being stopped for it; nothing more is kept
            try:
                self._events_in.send_nowait(message)
            except trio.WouldBlock:
                await self._events_in.send(message)
        elif isinstance(message, _ANSWERS):
            pending = self._pending.get(message.id)
            if pending is not None:
                return pending if pending.set(message) else None
        elif isinstance(message, Progress):
            pass  # no method streams progress (``protocol.Progress``); the connection checked it
        elif isinstance(message, WorkerRequest):
            # Past the cap, the reader waits here with the baton, as for a full
            # event buffer (the module docstring's race holds the same way).
            try:
                await self._admit(message, nursery, charged)
            except BaseException:
                self._bytes.release(charged)
                raise
        elif isinstance(message, Heartbeat):
            answered = self._heartbeats.get(message.seq)
            if answered is None:
                raise RemoteProtocolError(f"heartbeat {message.seq} answers no ping")
            answered.set()
        elif isinstance(message, Hello):
            if message.worker_id != self.worker_id or message.pid != self.pid:
                raise RemoteProtocolError(
                    f"hello from worker {message.worker_id!r} (pid {message.pid}) on the pipe "
                    f"of {self.worker_id!r} (pid {self.pid})"
                )
            await self._send(Welcome(protocol_version=PROTOCOL_VERSION, worker_id=self.worker_id))
            self.hello = message
            self.ready_at = trio.current_time()
            self._ready.set()
        return None

    async def _admit(self, request: WorkerRequest, nursery: trio.Nursery, charged: int) -> None:
        """Wait for a slot and the bytes of ``request``, then answer it in ``nursery``.

        ``charged``: what its frame already holds of the fleet's budget (0: it was
        read whole in one read, and takes its bytes here).
        """
        try:
            self._answering.acquire_nowait()
        except trio.WouldBlock:
            await self._answering.acquire()
        size = self._connection.request_size(Role.WORKER, request.id)
        try:
            held = self._answering_bytes
            if held and held + size > self._answering_budget:
                await self._wait_for_answering_bytes(size)
            self._answering_bytes += size
            if not charged:
                try:
                    await self._bytes.take(size)
                except BaseException:
                    self._answering_bytes -= size
                    raise
        except BaseException:
            self._answering.release()
            raise
        nursery.start_soon(self._answer, request, size, charged or size)

    async def _wait_for_answering_bytes(self, size: int) -> None:
        """Wait until a request of ``size`` bytes fits the budget, or nothing is held."""
        while self._answering_bytes and self._answering_bytes + size > self._answering_budget:
            await self._answering_freed.park()

    async def _answer(self, request: WorkerRequest, size: int, charged: int) -> None:
        """Answer one worker request, then free its slot, its ``size`` bytes, and
        the ``charged`` bytes it held of the fleet's budget."""
        try:
            await self._answer_holding_a_slot(request)
        finally:
            self._answering.release()
            self._answering_bytes -= size
            self._bytes.release(charged)
            if self._answering_freed:
                self._answering_freed.unpark_all()

    async def _answer_holding_a_slot(self, request: WorkerRequest) -> None:
        reply: Response | ErrorReply
        try:
            result = await self._request_handler(self, request)
            expected = WORKER_METHODS[request.method].result
            if not isinstance(result, expected):
                raise TypeError(
                    f"the handler answered {type(result).__name__}, not {expected.__name__}"
                )
            reply = Response.answering(request.id, result)
        except RequestRefusedError as exc:
            reply = ErrorReply(id=request.id, code=exc.code, message=str(exc))
        except Exception as exc:
            reply = ErrorReply(
                id=request.id,
                code="supervisor_error",
                message=f"{request.method} failed in the supervisor: {type(exc).__name__}: {exc}",
            )
        self.last_activity = trio.current_time()
        # Encoded in its turn to be written, one at a time (the module docstring).
        turn = self._answer_turn
        try:
            turn.acquire_nowait()
        except trio.WouldBlock:
            await turn.acquire()
        try:
            with contextlib.suppress(*_GONE):
                try:
                    frame = self._frame(reply)
                except LocalProtocolError as exc:
                    if exc.limit is None:
                        raise  # our own bug: see the module's docstring
                    # Too large for one frame (the connection refused it unchanged):
                    # the worker gets an error it can report instead of waiting.
                    frame = self._frame(
                        ErrorReply(
                            id=request.id,
                            code="too_large",
                            message=f"the answer to {request.method} is too large to send: {exc}",
                        )
                    )
                self._answering_bytes += len(frame)
                self._bytes.charge(len(frame))
                try:
                    await self._write(frame)
                finally:
                    self._answering_bytes -= len(frame)
                    self._bytes.release(len(frame))
        finally:
            turn.release()

    async def _send(self, message: Message) -> None:
        await self._write(self._frame(message))

    def _frame(self, message: Message) -> bytes:
        """``message``'s frame, checked against the protocol state (and shown to the wire tap)."""
        frame = self._connection.send(message)
        if self._wire_tap is not None:
            self._wire_tap(self.worker_id, frame)
        return frame

    async def _write(self, frame: bytes) -> None:
        # Counted, not timed: the watchdog compares counts between its rounds.
        self._sends_begun += 1
        try:
            await self._pipe.send_all(frame)
        finally:
            self._sends_ended += 1

    async def _send_quietly(self, message: Message) -> None:
        """Send, ignoring a worker that is already gone (its exit explains it).

        Gone: its pipe broke or closed, or its connection raises a
        ``RemoteProtocolError`` (it closed its end, or broke the protocol). A
        ``LocalProtocolError`` is our own bug and propagates.
        """
        with contextlib.suppress(*_GONE):
            await self._send(message)

    def _raise_if_ended(self) -> None:
        if self.exit is not None:
            raise WorkerExitedError(self.exit)

    async def _finish(self, release: Callable[[], Awaitable[tuple[str, ...]]]) -> None:
        status = self._process.status or ProcessStatus(None, None, 0.0, 0)
        kind, reason = self._classify(status)
        self.exit = WorkerExit(
            worker_id=self.worker_id,
            pid=self.pid,
            kind=kind,
            reason=reason,
            exit_code=status.exit_code,
            signal=signal_name(status.signal),
            peak_rss_bytes=max(self.peak_rss_bytes, status.max_rss_bytes),
            cpu_seconds=status.cpu_seconds,
            wall_seconds=trio.current_time() - self.started_at,
        )
        try:
            disarmed = await release()
            if disarmed:
                self.exit = dataclasses.replace(self.exit, disarmed=disarmed)
        finally:
            self._publish_end()

    def _publish_end(self) -> None:
        assert self.exit is not None
        for pending in self._pending.values():
            pending.set(self.exit)
        # Wake every other wait on the worker; each re-checks ``exit``.
        for answered in self._heartbeats.values():
            answered.set()
        self._ready.set()
        self._events_in.close()
        self._ended.set()
        self._pipe.close()

    def _classify(self, status: ProcessStatus) -> tuple[ExitKind, str]:
        if self._kill_reason is not None:
            return self._kill_reason
        if status.cause is not None:
            # Decided where it ran: its node host stopped it for a cap, or its node was lost.
            return status.cause
        if self.cgroup is not None and status.signal == signal.SIGKILL:
            # The kernel's OOM killer, inside its cgroup, before a sample saw it.
            found = breach(TreeUsage.from_cgroup(self.cgroup.usage(), self.tree_caps), self.limits)
            if found is not None and found[0] is ExitKind.MEMORY_CAP:
                return found
        cap = self.limits.cpu_seconds
        if status.signal == signal.SIGXCPU or (
            status.signal == signal.SIGKILL and cap is not None and status.cpu_seconds >= cap
        ):
            return ExitKind.CPU_CAP, (
                f"cpu cap exceeded: used {status.cpu_seconds:.1f} s of CPU, cap {cap} s"
            )
        if status.signal is not None:
            return ExitKind.SIGNALED, f"killed by signal {describe_signal(status.signal)}"
        if status.exit_code is None:
            return ExitKind.LOST, "lost: its zygote exited and took it down"
        if status.exit_code == 0:
            return ExitKind.EXITED, "exited normally"
        return ExitKind.EXITED, f"exited with code {status.exit_code}"
