"""``Subvisor``: the library entry point that delegation runs on.

It owns one ``Supervisor`` (worker processes), one ``ModelGateway`` (every
model call of every agent, with the API keys), the SQLite ``SessionStore``,
the ``TaskRegistry`` and one ``CommandQueue`` per parent session. Subagent
runs live in its nursery, not in the tool call that launched them, so a
background run outlives the parent's turn and a foreground one can later be
moved to the background without restarting it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import trio
from pydantic import ValidationError

from protocol import ModelRequest, WorkerRequest

from ..kernel import (
    EventBudget,
    EventBudgetExceededError,
    RequestHandler,
    RequestRefusedError,
    Supervisor,
    SupervisorConfig,
    WireTap,
    WorkerHandle,
    default_request_handler,
    text_size,
)
from ..policy._approvals import (
    ApprovalHandler,
    ApprovalRequest,
    QuestionHandler,
    QuestionRequest,
    Requester,
)
from ..policy._policy import PolicyDecision, PolicyHolder
from ..providers import ModelError, ModelGateway
from ..state._paths import agent_output_dir, database_path
from ..state._recovery import recover_dead_runs
from ..state._store import SessionStore
from ..state._tasks import TaskError, TaskRegistry
from ._launch_order import LaunchOrder
from ._lifecycle import LifecycleFeed
from ._mcp import McpHub
from ._notifications import CommandQueue, subagent_message_command
from ._settings import SubvisorSettings
from ._subagents import SubagentLaunch, SubagentRun

__all__ = ["Subvisor"]

#: Worker requests that make the supervisor record or queue something; each
#: is one event of the worker's budget (S-SEC-8).
_RECORDING_METHODS = frozenset(
    {"permission.check", "coordinator.message", "mcp.call_tool", "user.question"}
)


class Subvisor:
    """Supervisor + gateway + store: everything a parent agent needs to delegate.

    ``async with Subvisor(settings) as sv:`` then use ``sv.open_root_session``
    (a whole root agent) or ``sv.agent_tool`` (just the Agent tool, for a
    harness that brings its own parent loop).
    """

    def __init__(
        self,
        settings: SubvisorSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        wire_tap: WireTap | None = None,
        approval_handler: ApprovalHandler | None = None,
        question_handler: QuestionHandler | None = None,
    ) -> None:
        self.settings = settings or SubvisorSettings()
        self.home = self.settings.home
        self.home.mkdir(parents=True, exist_ok=True)
        self.store = SessionStore(database_path(self.home))
        # S-SEC-6: what a dead supervisor left running is ended before anything starts.
        recover_dead_runs(self.store, self.home)
        self.registry = TaskRegistry(self.store, self.home)
        self.gateway = ModelGateway(self.settings.gateway, transport=transport)
        self.supervisor = Supervisor(
            SupervisorConfig(
                max_workers=self.settings.max_concurrent_subagents,
                # Keys in its config, every session's transcripts (S-SEC-1).
                hidden_paths=(str(self.home),),
                event_budget=self.settings.event_budget,
            ),
            request_handler=self._serve_worker,
            wire_tap=wire_tap,
        )
        #: Answers every ``ask`` of the root and its subagents (S-APR-1); None:
        #: nobody can approve, so an ask is refused with the rule that would allow it.
        self.approval_handler = approval_handler
        #: Answers AskUserQuestion from any agent; None: nobody can answer.
        self.question_handler = question_handler
        self.mcp = McpHub(self.settings.mcp_servers)
        self.runs: dict[str, SubagentRun] = {}
        #: Subagent lifecycle events for live watchers (the control channel, S-OBS-1).
        self.lifecycle = LifecycleFeed()
        # Per parent session: one session's launch held back (by an approval,
        # say) must not hold back another session's.
        self._launch_orders: dict[str, LaunchOrder] = {}
        self._by_worker: dict[str, SubagentRun] = {}
        #: Workers that no SubagentRun drives (a workflow's actors) answer here.
        self._worker_servers: dict[str, RequestHandler] = {}
        self._queues: dict[str, CommandQueue] = {}
        self._stack = contextlib.AsyncExitStack()
        self._nursery: trio.Nursery | None = None
        #: Why every task is being stopped (``stop_all``); each stop then records it.
        self.stopping_reason: str | None = None

    async def __aenter__(self) -> Self:
        try:
            await self._stack.enter_async_context(self.gateway)
            await self._stack.enter_async_context(self.supervisor)
            self._nursery = await self._stack.enter_async_context(trio.open_nursery())
            # The startup snapshot: what every agent of this supervisor may borrow.
            await self.mcp.start(self._nursery)
        except BaseException:
            await self._stack.aclose()
            self.store.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for run in list(self.runs.values()):
                    if not run.done.is_set():
                        nursery.start_soon(run.stop, "the supervisor shut down")
        try:
            with trio.CancelScope(shield=True):
                await self.mcp.aclose()
            await self._stack.aclose()
        finally:
            try:
                # A session nobody ended (an interactive root, a run cut short)
                # must not read as running once its supervisor is gone.
                self.store.interrupt_created_sessions(
                    "its supervisor shut down before the session ended"
                )
            finally:
                self.store.close()

    # -- subagents ------------------------------------------------------------------

    def output_dir(self, parent_session_id: str, agent_id: str) -> Path:
        """Where a subagent's ``metadata.json``, ``output.txt`` and ``task.output`` go."""
        return agent_output_dir(self.home, parent_session_id, agent_id)

    def command_queue(self, session_id: str) -> CommandQueue:
        """The command queue of a parent session (notifications, messages)."""
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = CommandQueue()
        return queue

    def launch_order(self, parent_session_id: str) -> LaunchOrder:
        """The order in which a session's launches queue for worker slots."""
        order = self._launch_orders.get(parent_session_id)
        if order is None:
            order = self._launch_orders[parent_session_id] = LaunchOrder()
        return order

    def start(self, launch: SubagentLaunch, *, ticket: int | None = None) -> SubagentRun:
        """Register and start a subagent; it runs in the host's nursery.

        ``ticket`` is its place in line for a worker slot, taken earlier from
        ``launch_order(parent)`` (default: behind every launch so far).
        """
        if self._nursery is None:
            raise RuntimeError("Subvisor is not running: use `async with Subvisor()`")
        run = SubagentRun(self, launch, ticket)
        try:
            run.register()
            self.runs[run.task_id] = run
            self._nursery.start_soon(run.run)
        except BaseException:
            run.launch_order.pass_turn(run.ticket)  # it will never queue
            raise
        return run

    async def stop_all(self, reason: str) -> None:
        """Stop every running task of this supervisor, subagents and background commands.

        Each ends ``killed`` with ``reason`` as its error (S-RUN-8), also one
        that something else stops meanwhile (a foreground child whose parent
        turn is cancelled with it); returns once all have ended.
        """
        # Set before the first checkpoint: a parent cancelled together with
        # this call cannot stop its children for another reason first.
        self.stopping_reason = reason

        async def stop(task_id: str) -> None:
            with contextlib.suppress(TaskError):  # it ended meanwhile
                await self.registry.stop(task_id, reason)

        async with trio.open_nursery() as nursery:
            for record in self.registry.running():
                nursery.start_soon(stop, record.task_id)

    def spawn_background(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``fn(*args)`` in the host's nursery (it outlives the calling turn)."""
        if self._nursery is None:
            raise RuntimeError("Subvisor is not running: use `async with Subvisor()`")
        self._nursery.start_soon(fn, *args)

    def running_background(self, parent_session_id: str) -> list[SubagentRun]:
        """Background runs of a session that have not ended."""
        return [
            run
            for run in self.runs.values()
            if run.launch.parent_session_id == parent_session_id
            and run.background
            and not run.done.is_set()
        ]

    def move_to_background(self, task_id: str) -> bool:
        """Move a running foreground subagent to the background (S-RUN-5)."""
        run = self.runs.get(task_id)
        return run is not None and run.move_to_background()

    def bind_worker(self, worker_id: str, run: SubagentRun) -> None:
        """Route a worker's requests to the run it serves."""
        self._by_worker[worker_id] = run

    def unbind_worker(self, worker_id: str) -> None:
        """Forget a worker that has ended."""
        self._by_worker.pop(worker_id, None)

    def serve_worker_with(self, worker_id: str, server: RequestHandler | None) -> None:
        """Route every request of a worker that runs no subagent to ``server`` (None: stop)."""
        if server is None:
            self._worker_servers.pop(worker_id, None)
        else:
            self._worker_servers[worker_id] = server

    async def _serve_worker(self, handle: WorkerHandle, request: WorkerRequest) -> Any:
        try:
            if request.method in _RECORDING_METHODS:
                # S-SEC-8: each of these records or queues something for the worker.
                handle.budget.charge(events=1)
            return await self._route_worker_request(handle, request)
        except EventBudgetExceededError as exc:
            # The worker's handle stops it; until then it is told why.
            raise RequestRefusedError("event_budget", str(exc)) from None

    async def _route_worker_request(self, handle: WorkerHandle, request: WorkerRequest) -> Any:
        server = self._worker_servers.get(handle.worker_id)
        if server is not None:
            return await server(handle, request)
        if request.method not in (
            "model.call",
            "permission.check",
            "coordinator.message",
            "mcp.call_tool",
            "user.question",
        ):
            return await default_request_handler(handle, request)
        run = self._by_worker.get(handle.worker_id)
        if run is None:
            raise RequestRefusedError(
                "no_task", f"this worker runs no subagent; {request.method} refused"
            )
        if request.method == "permission.check":
            return await self._check_permission(run, request.params)
        if request.method == "coordinator.message":
            return self._queue_coordinator_message(run, handle.budget, request.params)
        if request.method == "mcp.call_tool":
            return await self._call_mcp(run, request.params)
        if request.method == "user.question":
            return await self.ask_question(request.params, run.requester)
        try:
            asked = ModelRequest.model_validate(request.params)
        except ValidationError as exc:
            raise RequestRefusedError("bad_request", f"invalid model request: {exc}") from None
        # The worker is untrusted: the model, the scenario keys and the call
        # index are the supervisor's, whatever the worker put there.
        call = asked.model_copy(
            update={
                "model": run.launch.model,
                "tools": run.tool_specs,
                "agent_keys": run.launch.agent_keys,
                "call_index": run.next_call_index,
            }
        )
        try:
            result = await self.gateway.call(call)
        except ModelError as exc:
            raise RequestRefusedError("model_error", str(exc)) from None
        run.count_model_call(result.usage)
        return result.model_dump(mode="python")

    async def _call_mcp(self, run: SubagentRun, params: dict[str, Any]) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise RequestRefusedError(
                "bad_request", "mcp.call_tool needs a tool name and arguments"
            )
        if name not in {spec.name for spec in run.launch.mcp_tools}:
            raise RequestRefusedError("not_lent", f"{name} was not lent to this subagent")
        session = run.launch.child_session_id
        budget = run.handle.budget if run.handle is not None else None

        async def progress(done: float, total: float | None, message: str | None) -> None:
            # Progress notifications of the parent's session become the child's events.
            with contextlib.suppress(EventBudgetExceededError):  # its worker is being stopped
                self.store.append_event(
                    session,
                    "mcp.progress",
                    {"tool": name, "progress": done, "total": total},
                    budget=budget,
                )

        result = await self.mcp.call(name, arguments, on_progress=progress)
        return {"text": result.text, "is_error": result.is_error}

    def _queue_coordinator_message(
        self, run: SubagentRun, budget: EventBudget, params: dict[str, Any]
    ) -> bool:
        # S-MSG-2: into the parent's command queue with priority `next`:
        # between steps of its running turn, or a new turn when it is idle.
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RequestRefusedError("bad_request", "coordinator.message needs a non-empty text")
        # The text waits in memory, then joins the parent's transcript (S-SEC-8).
        budget.charge(size=text_size(text))
        queue = self.command_queue(run.launch.parent_session_id)
        queue.enqueue(subagent_message_command(run.task_id, text))
        return True

    async def _check_permission(self, run: SubagentRun, params: dict[str, Any]) -> dict[str, Any]:
        tool, tool_input = params.get("tool"), params.get("input")
        if not isinstance(tool, str) or not isinstance(tool_input, dict):
            raise RequestRefusedError(
                "bad_request", "permission.check needs a tool name and its input"
            )
        decision = await self.authorize_call(run, tool, tool_input, run.requester)
        return {"allowed": decision.action == "allow", "reason": decision.reason}

    async def authorize_call(
        self,
        agent: PolicyHolder,
        tool: str,
        tool_input: dict[str, Any],
        requester: Requester,
    ) -> PolicyDecision:
        """Decide one tool call by ``agent``'s rules, asking the approval handler on ``ask``.

        Permission events go to the requester's event sessions (the child's
        and, mirrored, its parent's: S-APR-2), each naming the origin.
        """
        decision = agent.policy.check(tool, tool_input)
        if decision.action == "ask" and self.approval_handler is None:
            decision = agent.policy.authorize_headless(tool, tool_input)
        event: dict[str, Any] = {
            "tool": tool,
            "agentId": requester.origin.agent_id,
            "origin": requester.origin.kind,
        }
        if decision.action == "ask":
            assert self.approval_handler is not None
            self._record(
                requester,
                "PermissionRequested",
                {**event, "reason": decision.reason},
            )
            answer = await self.approval_handler(
                ApprovalRequest(
                    session_id=requester.root_session_id,
                    origin=requester.origin,
                    tool=tool,
                    tool_input=tool_input,
                    reason=decision.reason,
                    description=requester.description,
                )
            )
            if answer == "deny":
                decision = PolicyDecision("deny", f"{tool} was not approved ({decision.reason})")
            else:
                if answer == "allow_always":
                    agent.policy = agent.policy.remembering(tool, tool_input)
                self._record(requester, "PermissionResolved", {**event, "decision": answer})
                return PolicyDecision("allow")
        if decision.action == "deny":
            self._record(requester, "PermissionDenied", {**event, "reason": decision.reason})
        return decision

    async def ask_question(self, params: dict[str, Any], requester: Requester) -> dict[str, Any]:
        """Put an agent's AskUserQuestion to the question handler (S-APR-1)."""
        question, options = params.get("question"), params.get("options") or []
        if not isinstance(question, str) or not question.strip():
            return {"reason": "AskUserQuestion needs a non-empty 'question'"}
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            return {"reason": "'options' must be a list of strings"}
        if self.question_handler is None:
            return {
                "reason": "nobody can answer questions in this session; decide for yourself "
                "and say in your answer what you assumed"
            }
        event = {
            "agentId": requester.origin.agent_id,
            "origin": requester.origin.kind,
            "question": question,
        }
        self._record(requester, "QuestionAsked", event)
        answer = await self.question_handler(
            QuestionRequest(
                session_id=requester.root_session_id,
                origin=requester.origin,
                question=question,
                options=tuple(options),
                description=requester.description,
            )
        )
        self._record(requester, "QuestionAnswered", {**event, "answer": answer})
        return {"answer": answer}

    def _record(self, requester: Requester, name: str, data: dict[str, Any]) -> None:
        for session in requester.event_sessions:
            self.store.append_event(session, name, data, budget=requester.budget)
