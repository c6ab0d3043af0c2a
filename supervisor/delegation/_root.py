"""``RootSession``: the top-level agent, run in the supervisor process with direct ports."""

from __future__ import annotations

import resource
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psutil
from pydantic import BaseModel, ValidationError

from protocol import (
    AgentOutcome,
    EventSpec,
    MessageAppended,
    ModelRequest,
    ModelResult,
    PermissionVerdict,
    ToolCall,
    ToolSpec,
    UserQuestion,
)
from worker.agent import ASK_USER_QUESTION_SPEC, AgentLoop, HostTool, Toolbox
from worker.tools import LOCAL_TOOL_NAMES, LocalToolSet, ToolContext, ToolOutput

from ..kernel import SubvisorError
from ..policy._approval_desk import ApprovalDesk
from ..policy._approvals import ApprovalOrigin, Requester
from ..policy._permission_derivation import agent_tool_enabled
from ..policy._policy import ToolPolicy
from ..profiles._profile_catalog import ProfileCatalog
from ..providers import ModelGateway
from ..state._store import SessionStore
from ..state._task_record import TaskUsage
from ._agent_tool import AgentTool
from ._mcp import McpHubTool
from ._messaging import SendMessageTool
from ._notifications import Command, format_command_turn
from ._shells import BashWithBackground, TaskListTool, TaskOutputTool, TaskStopTool
from ._subvisor import Subvisor

__all__ = ["ROOT_SYSTEM_PROMPT", "RootSession", "RootToolFactory", "root_usage"]

ROOT_SYSTEM_PROMPT = (
    "You are the main agent of a subvisor session. Do the user's task. Delegate independent "
    "pieces of work to subagents with the Agent tool (several calls in one message run "
    "concurrently); each subagent starts fresh, so give it a self-contained prompt. "
    "Background agents notify you when they finish."
)

EventObserver = Callable[[str, str, dict[str, Any]], None]
D = TypeVar("D", bound=BaseModel)
#: Tools a higher room offers the root alone (the workflow tools); never a subagent's.
RootToolFactory = Callable[["RootSession"], Sequence[HostTool]]


class DirectModelPort:
    """The root's model port: straight to the gateway, in this process."""

    def __init__(self, gateway: ModelGateway) -> None:
        self._gateway = gateway

    async def call(self, request: ModelRequest) -> ModelResult:
        """Call the gateway; a scripted fault is refused (the root is the supervisor)."""
        result = await self._gateway.call(request)
        if result.fault is not None:
            raise SubvisorError(
                f"the scenario orders a {result.fault!r} fault for the root agent; faults are "
                "for subagents only (the root runs inside the supervisor)"
            )
        return result


class PolicyApprovals:
    """The root's approval port: its rules, then the session's approval handler."""

    def __init__(self, desk: ApprovalDesk, root: RootSession) -> None:
        self._desk = desk
        self._root = root

    async def authorize(self, call: ToolCall) -> PermissionVerdict:
        """The verdict on ``call``; an allowed search carries the read rules it must skip by."""
        root = self._root
        decision = await self._desk.authorize(root, call.name, call.input, root.requester)
        return root.policy.verdict(call.name, decision)


class RootQuestionTool:
    """The root's AskUserQuestion: the session's question handler, in this process."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = False
    spec = ASK_USER_QUESTION_SPEC

    def __init__(self, desk: ApprovalDesk, requester: Requester) -> None:
        self._desk = desk
        self._requester = requester

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Ask and wait for the answer."""
        try:
            question = UserQuestion.model_validate(call.input)
        except ValidationError:
            return ToolOutput(
                "Error: AskUserQuestion needs a non-empty 'question' and string 'options'.",
                is_error=True,
            )
        answer = await self._desk.ask(question, self._requester)
        if answer.answer is not None:
            return ToolOutput(f"The user answered: {answer.answer}")
        return ToolOutput(f"Error: {answer.reason}", is_error=True)


class StoreEventSink:
    """Records a session's transcript and events in the store; tells an observer."""

    def __init__(
        self, store: SessionStore, session_id: str, observer: EventObserver | None = None
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._observer = observer

    async def emit(self, event: EventSpec[D], data: D) -> None:
        """Persist one event (messages into the transcript)."""
        if isinstance(data, MessageAppended):
            self._store.append_message(self._session_id, data.message)
        else:
            self._store.append_event(self._session_id, event.name, data.model_dump(mode="python"))
        if self._observer is not None:
            self._observer(self._session_id, event.name, data.model_dump(mode="python"))


class RootSession:
    """A root agent with local tools and the Agent tool, backed by a ``Subvisor``.

    It takes from ``host`` the parts its tools use and hands each tool its own,
    by name; nothing it builds holds the ``Subvisor`` itself.
    """

    def __init__(
        self,
        host: Subvisor,
        *,
        model: str,
        cwd: Path,
        tools: Sequence[str] = LOCAL_TOOL_NAMES,
        catalog: ProfileCatalog | None = None,
        session_id: str | None = None,
        observer: EventObserver | None = None,
        extra_tools: RootToolFactory | None = None,
    ) -> None:
        host.gateway.resolve(model)  # fail now, with the gateway's message, if unusable
        self.model = model
        self.cwd = cwd
        self.session_id = session_id or f"sess_{uuid.uuid4().hex[:16]}"
        self._store = store = host.store
        self._has_background_work = host.has_background_work
        store.create_session(
            self.session_id, parent_id=None, task_type="root", model=model, cwd=str(cwd)
        )
        self.queue = host.command_queue(self.session_id)
        self._notification_calls = host.settings.root_max_notification_calls
        #: The root as the asker of approvals and questions.
        self.requester = Requester(
            root_session_id=self.session_id,
            origin=ApprovalOrigin(kind="root", session_id=self.session_id),
            description="main agent",
            event_sessions=(self.session_id,),
        )
        local = LocalToolSet(tools)
        context = ToolContext(cwd=cwd)
        settings = host.settings
        mcp_specs = host.mcp.tool_specs()
        self.policy = ToolPolicy(rules=settings.rules, mode=settings.mode, project_dir=str(cwd))
        self.agent_tool = AgentTool(
            host.launch_services,
            launch_order=host.launch_order(self.session_id),
            parent_session_id=self.session_id,
            parent_tools=(*local.names, "Agent", *(spec.name for spec in mcp_specs)),
            catalog=catalog
            or ProfileCatalog.discover(
                cwd, home=host.home, plugin_dirs=settings.plugin_dirs, hidden=host.homes
            ),
            current_model=lambda: self.model,
            cwd=cwd,
            parent_policy=self.policy,
        )
        host_tools = self._host_tools(host, local, context, mcp_specs)
        if extra_tools is not None:
            # The root's alone: not in ``parent_tools``, so no subagent inherits them.
            host_tools.extend(extra_tools(self))
        #: The root's tools: exactly what its model is offered.
        approvals = PolicyApprovals(host.desk, self)
        self.toolbox = Toolbox(local, context, host_tools, approvals=approvals)
        self.loop = AgentLoop(
            model=DirectModelPort(host.gateway),
            tools=self.toolbox,
            events=StoreEventSink(store, self.session_id, observer),
            system=ROOT_SYSTEM_PROMPT,
            model_name=model,
            agent_keys=("root",),
            max_turns=settings.root_max_turns,
            between_steps=self._take_commands,
        )

    def _host_tools(
        self,
        host: Subvisor,
        local: LocalToolSet,
        context: ToolContext,
        mcp_specs: Sequence[ToolSpec],
    ) -> list[HostTool]:
        """The root's tools beyond its local ones, each given the parts it uses."""
        registry, spawn = host.registry, host.spawn_background
        tools: list[HostTool] = []
        # S-POL-4: the root is depth 0; subagent_depth 0 takes its Agent tool away.
        if agent_tool_enabled(host.settings.subagent_depth, 0):
            send_message = SendMessageTool(
                self.session_id,
                self.agent_tool,
                runs=host.runs,
                registry=registry,
                store=host.store,
                spawn=spawn,
            )
            tools += [self.agent_tool, send_message]
        tools += [
            TaskListTool(registry, self.session_id),
            TaskOutputTool(registry),
            TaskStopTool(registry),
            RootQuestionTool(host.desk, self.requester),
            *(McpHubTool(host.mcp, spec) for spec in mcp_specs),
        ]
        if "Bash" in local:
            tools.append(
                BashWithBackground(
                    context,
                    registry=registry,
                    queue=self.queue,
                    spawn=spawn,
                    session_id=self.session_id,
                )
            )
        return tools

    async def _take_commands(self) -> list[str]:
        # S-NOTE-2: notifications that arrived during the turn are injected
        # between its steps, merged into one message.
        commands = self.queue.take()
        return [format_command_turn(commands, mid_turn=True)] if commands else []

    def steer(self, text: str) -> None:
        """The user's message for the root while it works (S-MSG-3 ``user_steer``).

        It joins the running turn between steps, or starts the next turn.
        """
        self.queue.enqueue(Command(kind="user", priority="next", text=text))

    async def ask(self, prompt: str) -> AgentOutcome:
        """One user turn: run the root until it answers."""
        return await self.loop.run(prompt)

    async def run(self, prompt: str) -> AgentOutcome:
        """A whole non-interactive run (S-RUN-8).

        After the root answers, wait for the session's background agents and
        workflows: each batch of notifications becomes a new root turn, and
        the run ends only when none is left and the root has answered the
        last notification. Those turns may make ``root_max_notification_calls``
        model calls in all (S-SEC-8); what arrives after that, but the user's
        own input, is not given to the root, and the run ends ``partial``, its
        answer saying how many.
        A run that fails ends its session ``failed``; one cancelled leaves the
        status to whoever cancelled it.
        """
        try:
            outcome = await self.ask(prompt)
            calls_left = self._notification_calls
            withheld = 0
            while self._has_background_work(self.session_id) or len(self.queue):
                await self.queue.wait()
                commands = self.queue.take()
                if not commands:
                    continue
                if calls_left <= 0:
                    # S-SEC-8: a flood of messages cannot buy the root more calls;
                    # the user's own input still gets its turn.
                    users = [command for command in commands if command.kind == "user"]
                    if not withheld and len(users) < len(commands):
                        self._store.append_event(
                            self.session_id,
                            "notifications.withheld",
                            {"root_max_notification_calls": self._notification_calls},
                        )
                    withheld += len(commands) - len(users)
                    if users:
                        outcome = await self.loop.run(format_command_turn(users))
                    continue
                before = self.loop.model_calls
                outcome = await self.loop.run(format_command_turn(commands))
                calls_left -= self.loop.model_calls - before
            if withheld:
                outcome = _withheld_outcome(outcome, withheld, self._notification_calls)
        except Exception as exc:
            self._store.set_session_status(self.session_id, "failed", str(exc) or None)
            raise
        self._store.set_session_status(self.session_id, outcome.status)
        return outcome


def _withheld_outcome(outcome: AgentOutcome, withheld: int, calls: int) -> AgentOutcome:
    """``outcome`` made ``partial``, saying that ``withheld`` commands never reached the root."""
    note = (
        f"[subvisor: {withheld} notification{'s' if withheld != 1 else ''} or message"
        f"{'s' if withheld != 1 else ''} from background agents arrived after the root had made "
        f"its {calls} model calls for them (root_max_notification_calls) and were not given to "
        "it; see subvisor ps and subvisor logs TASK_ID]"
    )
    text = f"{outcome.text}\n\n{note}" if outcome.text else note
    return outcome.model_copy(update={"status": "partial", "text": text})


def root_usage(root: RootSession, *, created_at: float) -> TaskUsage:
    """The root agent's own usage so far.

    The root runs inside the supervisor process, so its CPU time and peak
    RSS are that process's (which also hosts the model gateway for every
    agent); ``created_at`` (epoch seconds) starts its wall time.
    """
    loop = root.loop
    cpu = psutil.Process().cpu_times()
    return TaskUsage(
        input_tokens=loop.usage.input_tokens,
        output_tokens=loop.usage.output_tokens,
        cache_read_tokens=loop.usage.cache_read_tokens,
        cache_write_tokens=loop.usage.cache_write_tokens,
        model_calls=loop.model_calls,
        tool_calls=loop.tool_calls,
        duration_ms=max(0, round((time.time() - created_at) * 1000)),
        cpu_seconds=round(cpu.user + cpu.system, 3),
        # ru_maxrss is in KiB on Linux.
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
