"""``SubagentRun``: one subagent, from launch to its single terminal record.

The order of effects is part of the contract:

1. the child session is persisted, then ``SubagentSpawned`` is emitted on the
   parent session (S-RUN-2: concurrent spawns must all be listed);
2. the task is registered with its output dir and ``metadata.json`` (S-RUN-1);
3. the worker is spawned and the run is ``running`` once its handshake is done
   (a background launch returns to the parent model at this point, S-RUN-4);
4. the agent runs; its transcript and tool events go to the child session;
5. on any end (answer, partial, crash, kill, cancellation) the output files
   and the registry are written once, then ``SubagentStopped`` is emitted and,
   for a background run, exactly one notification is queued (S-NOTE-1..3).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import trio

from protocol import (
    AGENT_RUN,
    AGENT_STEER,
    MAX_JSON_CONTAINERS,
    AgentOutcome,
    AgentRunSpec,
    ChatMessage,
    Event,
    MessageAppended,
    ModelRequest,
    ModelResult,
    ProcessGroupStarted,
    ResourceLimits,
    SandboxPolicy,
    SteerMessage,
    ToolFinished,
    ToolSpec,
    ToolStarted,
    Usage,
    json_containers,
)
from worker.agent import ASK_USER_QUESTION_SPEC, RESPOND_TO_COORDINATOR_SPEC
from worker.tools import LocalToolSet

from ..kernel import (
    EventBudgetExceededError,
    RequestRefusedError,
    SubvisorError,
    Supervisor,
    UnplaceableError,
    WorkerExitedError,
    WorkerHandle,
    WorkerRequestError,
    disk_full_error,
)
from ..policy._approvals import ApprovalOrigin, Requester
from ..policy._policy import ToolPolicy
from ..state._store import SessionStore
from ..state._task_record import TaskRecord, TaskUsage
from ..state._tasks import TaskRegistry
from ._agent_requests import AgentRequestPolicy, AgentRequestServer
from ._launch_order import LaunchOrder
from ._lifecycle import LifecycleFeed
from ._live_text import LiveText
from ._notifications import (
    Command,
    CommandQueue,
    build_task_notification,
    subagent_message_command,
)

__all__ = [
    "BackgroundSpawner",
    "RunServices",
    "RunStarter",
    "SubagentLaunch",
    "SubagentRun",
    "new_agent_id",
]

log = logging.getLogger("subvisor")


_NO_SANDBOX = SandboxPolicy()

#: How long one commit of a worker's event batch may take before the loop
#: runs other tasks (S-SEC-8); a normal batch fits in one.
_RECORD_SLICE_SECONDS = 0.005
#: What one JSON map or array of an event is charged to the worker's budget,
#: in bytes: about what an empty one takes in memory (S-SEC-8).
_CONTAINER_CHARGE = 64


def new_agent_id() -> str:
    """A fresh agentId; the child session id is ``sess_subagent_<agentId>``."""
    return f"agent_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True, slots=True)
class SubagentLaunch:
    """Everything decided about a subagent before it starts."""

    parent_session_id: str
    description: str
    prompt: str
    subagent_type: str
    system: str
    tools: tuple[str, ...]
    model: str
    max_turns: int
    background: bool
    cwd: str
    limits: ResourceLimits
    policy: ToolPolicy
    #: The kernel sandbox its worker applies before it starts (S-SBX-1).
    sandbox: SandboxPolicy = _NO_SANDBOX
    mcp_tools: tuple[ToolSpec, ...] = ()
    tool_use_id: str | None = None
    agent_id: str = field(default_factory=new_agent_id)
    history: tuple[ChatMessage, ...] = ()

    @property
    def child_session_id(self) -> str:
        """The child's session id (S-RUN-2)."""
        return f"sess_subagent_{self.agent_id}"

    @property
    def agent_keys(self) -> tuple[str, ...]:
        """Scenario keys for the scripted provider: description, type, then default."""
        return (self.description, self.subagent_type, "default")


@dataclass(frozen=True, slots=True)
class RunServices:
    """What every subagent run of one ``Subvisor`` uses, each part by name."""

    store: SessionStore
    registry: TaskRegistry
    fleet: Supervisor
    requests: AgentRequestServer
    lifecycle: LifecycleFeed
    #: Why every task is being stopped, once ``stop_all`` began (None before);
    #: a stop records it over its own reason.
    stopping_reason: Callable[[], str | None]


class RunStarter(Protocol):
    """Registers a subagent and starts it in the ``Subvisor``'s nursery (``Subvisor.start``).

    ``ticket`` is its place in its parent's line for a worker slot (default:
    behind every launch so far).
    """

    def __call__(self, launch: SubagentLaunch, *, ticket: int | None = None) -> SubagentRun: ...


class BackgroundSpawner(Protocol):
    """Runs ``fn(*args)`` in the ``Subvisor``'s nursery, so that it outlives the calling
    turn (``Subvisor.spawn_background``)."""

    def __call__(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None: ...


class SubagentRun:
    """A launched subagent; its ``Subvisor`` drives ``run`` in its nursery.

    ``launch_order`` is its parent session's line for worker slots (``ticket``
    its place in it, default: last); ``parent_queue`` the parent's command
    queue, for its messages and its notification; ``output_dir`` where its
    output files go.
    """

    def __init__(
        self,
        launch: SubagentLaunch,
        services: RunServices,
        *,
        launch_order: LaunchOrder,
        parent_queue: CommandQueue,
        output_dir: Path,
        ticket: int | None = None,
    ) -> None:
        self.launch = launch
        self.task_id = launch.agent_id
        self._services = services
        self._store = services.store
        self._registry = services.registry
        self._parent_queue = parent_queue
        self._output_dir = output_dir
        self.launch_order = launch_order
        self.ticket = ticket if ticket is not None else launch_order.ticket()
        self.handle: WorkerHandle | None = None
        self.ready = trio.Event()
        self.done = trio.Event()
        self.outcome: AgentOutcome | None = None
        self.model_calls = 0
        # A resumed run continues its conversation, and the scripted
        # provider's turn numbering with it.
        self._earlier_calls = sum(1 for m in launch.history if m.role == "assistant")
        self.tool_calls = 0
        self.usage = Usage()
        self.record: TaskRecord | None = None
        self.launch_error: str | None = None
        #: What the model is offered: exactly the tools this run was given.
        self.tool_specs = (
            *LocalToolSet(launch.tools).specs,
            RESPOND_TO_COORDINATOR_SPEC,
            ASK_USER_QUESTION_SPEC,
            *launch.mcp_tools,
        )
        #: The rules this agent's calls are checked against; "allow always" grows them.
        self.policy = launch.policy
        #: Steering messages to deliver when the agent starts (S-MSG-1 ``queued``).
        self.pending_messages: list[str] = []
        #: Set when a foreground run is moved to the background (S-RUN-5).
        self.backgrounded = trio.Event()
        #: Set once its parent stops waiting for it: it ended, or went to the background.
        self.left_foreground = trio.Event()
        self._cancel_scope = trio.CancelScope()
        self._stop_reason: str | None = None
        self._started = time.monotonic()
        #: When the worker was ready (monotonic), for spawn-latency figures.
        self.ready_at: float | None = None
        #: The answer streaming now, coalesced for live watchers (S-OBS-2).
        self.live_text = LiveText(self._publish_text)
        #: Whether a model call of it waits for a gateway slot right now.
        self.waiting_for_model = False
        #: Whether a model call of it is in flight (it may have one at a time).
        self._calling = False

    # -- lifecycle ------------------------------------------------------------------

    def register(self) -> TaskRecord:
        """Persist the child session, announce it, register the task (steps 1-2)."""
        launch, store = self.launch, self._store
        # One transaction: the child session, SubagentSpawned and the task are
        # visible together or not at all (S-RUN-2), for one commit instead of several.
        with store.batch():
            store.create_session(
                launch.child_session_id,
                parent_id=launch.parent_session_id,
                task_type="subagent_child",
                agent_type=launch.subagent_type,
                description=launch.description,
                model=launch.model,
                cwd=launch.cwd,
            )
            store.append_event(
                launch.parent_session_id,
                "SubagentSpawned",
                {
                    "agentId": self.task_id,
                    "child_session_id": launch.child_session_id,
                    "description": launch.description,
                    "subagent_type": launch.subagent_type,
                    "background": launch.background,
                    "model": launch.model,
                },
            )
            for message in launch.history:
                store.append_message(launch.child_session_id, message)
            output_dir = self._output_dir
            self.record = self._registry.register(
                TaskRecord(
                    task_id=self.task_id,
                    kind="local_agent",
                    parent_session_id=launch.parent_session_id,
                    child_session_id=launch.child_session_id,
                    description=launch.description,
                    subagent_type=launch.subagent_type,
                    prompt=launch.prompt,
                    model=launch.model,
                    status="pending",
                    background=launch.background,
                    tool_use_id=launch.tool_use_id,
                    output_dir=str(output_dir),
                    output_file=str(output_dir / "output.txt"),
                    result=None,
                    error=None,
                    usage=TaskUsage(),
                    created_at=time.time(),
                    ended_at=None,
                )
            )
        self._registry.set_stopper(self.task_id, self.stop)
        self._publish("task.registered", status="pending")
        return self.record

    async def run(self) -> None:
        """Spawn, run the agent, record the end. Never raises (its Subvisor's nursery must live)."""
        status: Literal["completed", "failed", "killed"] = "failed"
        result: str | None = None
        error: str | None = None
        worker_exit: str | None = None
        try:
            with self._cancel_scope:
                # Launches queue for worker slots in launch order.
                await self.launch_order.wait_turn(self.ticket)
                self.handle = await self._services.fleet.spawn(
                    self.launch.limits,
                    sandbox=self.launch.sandbox,
                    handler=self._services.requests.handler(self._request_policy()),
                    on_queue=self._pass_turn,
                )
                # S-SBX-1: the record states the sandbox the worker reported.
                self._registry.update(
                    self.task_id,
                    status="running",
                    sandbox=self.handle.sandbox,
                    caps=self.handle.caps_summary,
                    swept_roots=self.handle.swept_roots,
                )
                self._publish("task.started", status="running", pid=self.handle.pid)
                self.ready_at = time.monotonic()
                self.ready.set()
                self.outcome = await self._run_agent(self.handle)
                status, result = "completed", self.outcome.text
            if self._cancel_scope.cancelled_caught:
                status, error = "killed", self._stop_reason or "stopped"
        except WorkerExitedError as exc:
            worker_exit = exc.exit.reason
            error = f"the subagent's worker process ended: {exc.exit.reason}"
        except WorkerRequestError as exc:
            error = f"{exc.code}: {exc.message}"
        except UnplaceableError as exc:
            # What it claims comes from its profile: name it, so its author knows what to fix.
            error = f"profile {self.launch.subagent_type!r}: {exc}"
            self.launch_error = error
        except SubvisorError as exc:
            error = str(exc)
            self.launch_error = error
        except Exception as exc:  # a bug here must not kill the Subvisor
            full = disk_full_error(exc)
            if full is None:
                log.exception("subagent %s failed unexpectedly", self.task_id)
                error = f"internal error: {type(exc).__name__}: {exc}"
            else:
                # Not a bug: what it ran may have filled the disk. One line.
                log.error("subagent %s failed: the disk is full (%s)", self.task_id, full)
                error = f"the disk that holds subvisor's state is full ({full})"
        finally:
            self._pass_turn()  # a run stopped or failed before it queued
            with trio.CancelScope(shield=True):
                try:
                    exit = await self._release_worker()
                    if worker_exit is None and exit is not None and not exit.ok:
                        worker_exit = exit.reason
                    self._finish(status, result, error, worker_exit, exit)
                except Exception as exc:
                    # Recording the end failed (a full disk, say): the run
                    # still ends, and its waiters must not hang.
                    full = disk_full_error(exc)
                    if full is None:
                        log.exception("could not record the end of subagent %s", self.task_id)
                    else:
                        log.error("could not record the end of subagent %s: %s", self.task_id, full)
                finally:
                    self.ready.set()
                    self.done.set()
                    self.left_foreground.set()

    def _pass_turn(self) -> None:
        self.launch_order.pass_turn(self.ticket)

    def _request_policy(self) -> AgentRequestPolicy:
        """How its worker's requests are answered: its rules, its MCP loans, its parent."""
        launch = self.launch
        return AgentRequestPolicy(
            holder=self,
            # The asking worker's budget is set per request by the server (S-SEC-8).
            requester=Requester(
                root_session_id=launch.parent_session_id,
                origin=ApprovalOrigin(
                    kind="subagent",
                    agent_id=self.task_id,
                    session_id=launch.child_session_id,
                    parent_tool_call_id=launch.tool_use_id,
                ),
                description=launch.description,
                event_sessions=(launch.child_session_id, launch.parent_session_id),
            ),
            prepare_model_call=self._prepare_model_call,
            record_model_result=self._record_model_result,
            mcp_tools=frozenset(spec.name for spec in launch.mcp_tools),
            mcp_progress_session=launch.child_session_id,
            coordinator=self._message_parent,
            on_model_text=self.live_text.add,
            on_model_wait=self._model_wait,
        )

    def _prepare_model_call(self, asked: ModelRequest, scope: trio.CancelScope) -> ModelRequest:
        # S-PROF-7: the supervisor keeps the turn limit, whatever the worker
        # does; a call counts as it starts, and an agent makes one at a time.
        if self._calling:
            raise RequestRefusedError(
                "model_call_in_flight", "this agent's previous model call has not ended"
            )
        if self.model_calls >= self.launch.max_turns:
            raise RequestRefusedError(
                "max_turns",
                f"this agent has made its {self.launch.max_turns} model turns (maxTurns)",
            )
        # The worker is untrusted: the model, tools, scenario keys and call
        # index are the launch's, whatever the worker put there.
        call = asked.model_copy(
            update={
                "model": self.launch.model,
                "tools": self.tool_specs,
                "agent_keys": self.launch.agent_keys,
                "call_index": self.next_call_index,
            }
        )
        self._calling = True
        self.model_calls += 1
        self.live_text.start()
        return call

    def _record_model_result(self, asked: ModelRequest, result: ModelResult | None) -> None:
        self._calling = False
        self.live_text.finish()
        self.count_model_call(result.usage if result is not None else Usage())

    def _publish_text(self, text: str, offset: int) -> None:
        self._publish("text.streamed", text=text, offset=offset)

    def _model_wait(self, waiting: bool) -> None:
        self.waiting_for_model = waiting
        self._publish("model.waiting", waiting=waiting)

    @property
    def activity(self) -> str | None:
        """What the live run is doing, for ``top`` and ``ps``; None when nothing to say."""
        if self.done.is_set():
            return None
        if self.waiting_for_model:
            return "waiting for a model slot"
        if self.live_text.chars:
            return f"streaming ({self.live_text.chars} chars): ...{self.live_text.tail}"
        return None

    def _message_parent(self, text: str) -> None:
        # S-MSG-2: into the parent's command queue with priority `next`:
        # between steps of its running turn, or a new turn when it is idle.
        self._parent_queue.enqueue(subagent_message_command(self.task_id, text))

    @property
    def started_at(self) -> float:
        """When the run was launched (monotonic)."""
        return self._started

    @property
    def worker_started_at(self) -> float | None:
        """When its worker started (trio clock); None until it has one."""
        return self.handle.started_at if self.handle is not None else None

    @property
    def worker_node(self) -> str | None:
        """The cluster node its worker runs on; None on this machine, or with no worker yet."""
        return self.handle.node if self.handle is not None else None

    @property
    def worker_wall_seconds(self) -> float | None:
        """How long its worker lived, once it has ended; None before."""
        end = self.handle.exit if self.handle is not None else None
        return end.wall_seconds if end is not None else None

    @property
    def background(self) -> bool:
        """Whether the run is (now) a background one."""
        return self.launch.background or self.backgrounded.is_set()

    def move_to_background(self) -> bool:
        """Detach a running foreground run from its parent's turn (S-RUN-5).

        Its parent stops waiting and gets ``async_launched``; its end becomes
        a notification. False when it is already in the background or ended.
        """
        if self.background or self.done.is_set():
            return False
        self._registry.update(self.task_id, background=True)
        self._store.append_event(
            self.launch.parent_session_id, "SubagentBackgrounded", {"agentId": self.task_id}
        )
        self.backgrounded.set()
        self.left_foreground.set()
        self._publish("task.backgrounded")
        return True

    async def steer(self, text: str) -> Literal["delivered", "queued", "undelivered", "ended"]:
        """Deliver a parent's message into the running agent's turn (S-MSG-1).

        Not started yet: ``queued``, and given to the agent at its first
        step. Running: inserted between its steps; while the worker reports
        no active turn (a turn is just starting or ending) it is retried
        every 10 ms, 21 tries in all, then ``undelivered``: its turn is
        ending, and the caller queues the message for a new turn once this
        one has ended. ``ended`` when the run is already over.
        """
        if self.done.is_set():
            return "ended"
        handle = self.handle
        if handle is None or not self.ready.is_set():
            self.pending_messages.append(text)
            return "queued"
        for _ in range(21):
            try:
                receipt = await handle.request(AGENT_STEER, SteerMessage(text=text))
            except SubvisorError:
                break
            if receipt.delivered:
                self._store.append_event(
                    self.launch.child_session_id, "SteerDelivered", {"text": text}
                )
                return "delivered"
            await trio.sleep(0.01)
        return "ended" if self.done.is_set() else "undelivered"

    async def stop(self, reason: str = "stopped by request") -> None:
        """Stop the run (S-RUN-6 stop); returns once it has ended.

        The first reason given wins, and ``RunServices.stopping_reason``
        (everything is being stopped) over any.
        """
        if self._stop_reason is None:
            self._stop_reason = self._services.stopping_reason() or reason
        self._cancel_scope.cancel()
        await self.done.wait()

    # -- the agent ------------------------------------------------------------------

    async def _run_agent(self, handle: WorkerHandle) -> AgentOutcome:
        launch = self.launch
        spec = AgentRunSpec(
            agent_id=self.task_id,
            system=launch.system,
            prompt=launch.prompt,
            history=launch.history,
            pending_messages=tuple(self.pending_messages),
            tools=launch.tools,
            mcp_tools=launch.mcp_tools,
            preapproved_tools=tuple(t for t in launch.tools if launch.policy.always_allows(t)),
            max_turns=launch.max_turns,
            cwd=launch.cwd,
            model=launch.model,
        )
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._record_events, handle)
            try:
                outcome = await handle.request(AGENT_RUN, spec)
            except Exception as exc:
                # Raised outside the nursery, so callers see it unwrapped.
                failure = exc
            nursery.cancel_scope.cancel()
        # The race: the answer can wake this task before the recorder has taken
        # the events the worker sent ahead of it (its last tool call, say). They
        # are all queued by now (``WorkerHandle.queued_events``): record them,
        # so the record's usage and transcript hold every one.
        while batch := handle.queued_events():
            await self._record_batch(batch, handle)
        if failure is not None:
            raise failure
        return outcome

    async def _record_events(self, handle: WorkerHandle) -> None:
        while True:
            try:
                batch = await handle.receive_event_batch()
            except WorkerExitedError:
                return
            await self._record_batch(batch, handle)

    async def _record_batch(self, batch: list[Event], handle: WorkerHandle) -> None:
        # Shielded: a batch taken off the queue is recorded whole, even when the
        # recorder is cancelled between its slices (the run's end cancels it).
        with trio.CancelScope(shield=True):
            done = 0
            while done < len(batch) and handle.budget.reason is None:
                if done:
                    # S-SEC-8: a long batch gives the loop back between its slices.
                    await trio.lowlevel.checkpoint()
                done = self._record_slice(batch, done, handle)
            # With the budget spent, the rest is dropped: the handle is stopping the worker.

    def _record_slice(self, batch: list[Event], start: int, handle: WorkerHandle) -> int:
        """Record ``batch[start:]`` in one commit, or as much of it as fits in one slice.

        Returns where the next slice starts. A slice ends after
        ``_RECORD_SLICE_SECONDS``, so other tasks run between the slices of a
        long batch (the transaction is closed first: a task that writes
        meanwhile must not join, and be undone with, this one).
        """
        deadline = time.perf_counter() + _RECORD_SLICE_SECONDS
        with self._store.batch():
            for index in range(start, len(batch)):
                try:
                    self._record_event(batch[index], handle)
                except EventBudgetExceededError:
                    return len(batch)  # what was recorded before it stays
                if time.perf_counter() > deadline:
                    return index + 1
        return len(batch)

    def _record_event(self, event: Event, handle: WorkerHandle) -> None:
        store, registry, budget = self._store, self._registry, handle.budget
        session = self.launch.child_session_id
        # The connection validated the data against the event's model.
        data = event.data
        if isinstance(data, MessageAppended):
            seq = store.append_message(session, data.message, budget=budget)
            self._publish("message.appended", seq=seq)
        elif isinstance(data, ProcessGroupStarted):
            handle.process_groups.add(data.pgid)
        else:
            if isinstance(data, ToolStarted):
                # S-SEC-8: a map or array costs the supervisor far more than
                # its JSON bytes (an empty list is two): each is charged as
                # what it holds in memory.
                containers = json_containers(data.input, MAX_JSON_CONTAINERS)
                budget.charge(size=containers * _CONTAINER_CHARGE)
            # The model's fields as validated (plain values: a tool's input is
            # kept as decoded), without a walk through model_dump.
            fields = dict(data.__dict__)
            store.append_event(session, event.name, fields, budget=budget)
            if isinstance(data, ToolStarted | ToolFinished):
                # S-APR-2: the parent's timeline shows the child's tool activity
                # (never its text), under an id that names the child.
                store.append_event(
                    self.launch.parent_session_id,
                    event.name,
                    {
                        **fields,
                        "call_id": f"tool_subagent_{self.task_id}_{data.call_id}",
                        "source": "subagent",
                        "agentId": self.task_id,
                    },
                    budget=budget,
                )
            if isinstance(data, ToolStarted):
                registry.append_output(self.task_id, f"[tool] {data.name} {_brief(data.input)}\n")
            elif isinstance(data, ToolFinished):
                self.tool_calls += 1
                self._publish("tool.finished", tool=data.name)

    def count_model_call(self, usage: Usage) -> None:
        """Account what one model call of this run cost (it was counted as it started)."""
        self.usage = self.usage + usage
        self._publish("turn.finished", model_calls=self.model_calls)

    def live_usage(self) -> TaskUsage:
        """What the run has consumed so far (its final usage is in its record once it ends)."""
        handle = self.handle
        return self._usage_so_far(
            cpu_seconds=0.0, peak_rss_bytes=handle.peak_rss_bytes if handle is not None else 0
        )

    def _usage_so_far(self, *, cpu_seconds: float, peak_rss_bytes: int) -> TaskUsage:
        return TaskUsage(
            input_tokens=self.usage.input_tokens,
            output_tokens=self.usage.output_tokens,
            cache_read_tokens=self.usage.cache_read_tokens,
            cache_write_tokens=self.usage.cache_write_tokens,
            model_calls=self.model_calls,
            tool_calls=self.tool_calls,
            duration_ms=int((time.monotonic() - self._started) * 1000),
            cpu_seconds=cpu_seconds,
            peak_rss_bytes=peak_rss_bytes,
        )

    def _publish(self, event: str, **data: Any) -> None:
        self._services.lifecycle.publish(event, self.launch.parent_session_id, self.task_id, **data)

    @property
    def next_call_index(self) -> int:
        """The index of this agent's next model call over its whole conversation."""
        return self._earlier_calls + self.model_calls

    # -- the end --------------------------------------------------------------------

    async def _release_worker(self) -> Any:
        handle = self.handle
        if handle is None:
            return None
        exit = await handle.shutdown(grace_s=2.0) if handle.alive else await handle.wait()
        # Commands the agent started in their own process groups (Bash) die
        # with it; a background job left behind is killed here.
        handle.process_groups.kill()
        return exit

    def _finish(
        self,
        status: Literal["completed", "failed", "killed"],
        result: str | None,
        error: str | None,
        worker_exit: str | None,
        exit: Any,
    ) -> None:
        usage = self._usage_so_far(
            cpu_seconds=exit.cpu_seconds if exit is not None else 0.0,
            peak_rss_bytes=exit.peak_rss_bytes if exit is not None else 0,
        )
        disarmed = list(exit.disarmed) if exit is not None else []
        if disarmed:
            # The parent must know: its next git command there would have run them.
            notice = _disarmed_notice(disarmed)
            if result is not None or error is None:
                result = f"{result or ''}\n\n{notice}".lstrip()
            else:
                error = f"{error}\n\n{notice}"
        store, launch = self._store, self.launch
        with store.batch():
            self.record = self._registry.finish(
                self.task_id,
                status,
                result=result,
                error=error,
                usage=usage,
                worker_exit=worker_exit,
            )
            store.set_session_status(launch.child_session_id, status)
            store.record_usage(launch.child_session_id, self.record.usage)
            store.append_event(
                launch.parent_session_id,
                "SubagentStopped",
                {"agentId": self.task_id, "status": status, "error": error}
                | ({"disarmed": disarmed} if disarmed else {}),
            )
        self._publish("task.ended", status=status)
        if self.record.background and self._registry.mark_notified(self.task_id):
            self._parent_queue.enqueue(
                Command(
                    kind="task-notification",
                    priority="next",
                    text=build_task_notification(self.record),
                    task_id=self.task_id,
                )
            )


def _disarmed_notice(lines: list[str]) -> str:
    """What the parent is told when repositories the subagent planted were disarmed (S-SEC-3)."""
    return (
        "[subvisor] This subagent wrote git hooks or config that git would run outside "
        "the sandbox; they were disarmed (originals kept with a .subvisor-disarmed "
        "suffix for review):\n" + "\n".join(f"- {line}" for line in lines)
    )


def _brief(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
