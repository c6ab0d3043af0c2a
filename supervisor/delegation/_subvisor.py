"""``Subvisor``: the library entry point that delegation runs on, a composition root.

It builds one kernel ``Supervisor`` (the fleet of worker processes), one
``ModelGateway`` (every model call of every agent, with the API keys), the
SQLite ``SessionStore``, the ``TaskRegistry``, the ``ApprovalDesk``, the MCP
hub, the ``AgentRequestServer`` that answers every agent worker, and one
``CommandQueue`` per parent session, and hands each part to whatever uses
it. Subagent runs live in its nursery, not in the tool call that launched
them, so a background run outlives the parent's turn and a foreground one
can later be moved to the background without restarting it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import trio

from ..kernel import (
    Supervisor,
    SupervisorConfig,
    WireTap,
    mark_supervisor,
    unmark_supervisor,
)
from ..policy._approval_desk import ApprovalDesk
from ..policy._approvals import ApprovalHandler, QuestionHandler
from ..profiles._profile_catalog import user_profile_dirs
from ..providers import ModelGateway, ModelProvider
from ..state._paths import (
    HOMES_FILE,
    agent_output_dir,
    database_path,
    known_homes,
    register_home,
)
from ..state._recovery import recover_dead_runs
from ..state._store import SessionStore
from ..state._tasks import TaskError, TaskRegistry
from ._agent_requests import AgentRequestServer
from ._agent_tool import LaunchServices
from ._launch_order import LaunchOrder
from ._lifecycle import LifecycleFeed
from ._mcp import McpHub
from ._notifications import CommandQueue
from ._settings import SubvisorSettings
from ._subagents import RunServices, SubagentLaunch, SubagentRun

__all__ = ["Subvisor"]

log = logging.getLogger("subvisor")

#: In a subvisor home, what a later run trusts as the user's own: its config,
#: the project files trusted, the user profile dir, the list of homes.
_HOME_FILES = ("config.toml", "trusted.json", "agents", HOMES_FILE)


def _user_level_paths(
    homes: Iterable[Path], home: Path, plugin_dirs: Iterable[Path]
) -> tuple[str, ...]:
    """Every user-level file and dir a run reads with more trust than a project's (S-SEC-3)."""
    paths = [
        *(home_dir / name for home_dir in homes for name in _HOME_FILES),
        *(profile_dir.path for profile_dir in user_profile_dirs(home)),
        *plugin_dirs,
    ]
    return tuple(dict.fromkeys(os.path.abspath(path) for path in paths))


class Subvisor:
    """Supervisor + gateway + store: everything a parent agent needs to delegate.

    ``async with Subvisor(settings) as sv:`` then ``RootSession(sv, ...)`` (a
    whole root agent; its ``agent_tool`` alone serves a harness that brings
    its own parent loop). Each part is built once here and handed by name to
    what uses it: ``run_services`` to every subagent run, ``launch_services``
    to every session's Agent tool.
    """

    def __init__(
        self,
        settings: SubvisorSettings | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        providers: Mapping[str, ModelProvider] | None = None,
        wire_tap: WireTap | None = None,
        approval_handler: ApprovalHandler | None = None,
        question_handler: QuestionHandler | None = None,
    ) -> None:
        self.settings = settings or SubvisorSettings()
        self.home = self.settings.home
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            # So that every other run hides this home from its workers too (S-SEC-1).
            register_home(self.home)
        except OSError as exc:
            log.warning(
                "cannot list %s among subvisor's homes in ~/.subvisor (%s): runs that use"
                " another home will not hide this one from their subagents",
                self.home,
                exc.strerror or exc,
            )
        homes = known_homes(self.home)
        #: Every subvisor home hidden from the workers (S-SEC-1); no project file may
        #: resolve into one (``ProfileCatalog.discover``'s ``hidden``).
        self.homes = homes
        self.store = SessionStore(database_path(self.home))
        # S-SEC-6: what a dead supervisor left running is ended before anything starts.
        recover_dead_runs(self.store, self.home)
        self.registry = TaskRegistry(self.store, self.home)
        # ``providers``: model families beyond the configured ones (the MCP
        # client's own model, for ``subvisor mcp --model mcp-sampling``).
        self.gateway = ModelGateway(self.settings.gateway, transport=transport, providers=providers)
        #: The kernel fleet: every worker process of this Subvisor.
        self.fleet = Supervisor(
            SupervisorConfig(
                max_workers=self.settings.max_concurrent_subagents,
                placement=self.settings.placement,
                ray_address=self.settings.ray_address,
                # Keys in its config, every session's transcripts (S-SEC-1),
                # in this home and in any other this process can name.
                hidden_paths=tuple(str(path) for path in homes),
                # What the user put there is trusted more than a project's: no
                # worker may rewrite it where it resolves into the project.
                protected_paths=_user_level_paths(homes, self.home, self.settings.plugin_dirs),
                event_budget=self.settings.event_budget,
            ),
            wire_tap=wire_tap,
        )
        #: Every agent's tool calls and questions are decided or put to a person here.
        self.desk = ApprovalDesk(
            self.store, approval_handler=approval_handler, question_handler=question_handler
        )
        self.mcp = McpHub(self.settings.mcp_servers)
        #: Answers every request of every agent worker (subagents and actors).
        self.requests = AgentRequestServer(
            gateway=self.gateway, desk=self.desk, mcp=self.mcp, store=self.store
        )
        self.runs: dict[str, SubagentRun] = {}
        #: Subagent lifecycle events for live watchers (the control channel, S-OBS-1).
        self.lifecycle = LifecycleFeed()
        #: What each subagent run uses, by name (``SubagentRun``).
        self.run_services = RunServices(
            store=self.store,
            registry=self.registry,
            fleet=self.fleet,
            requests=self.requests,
            lifecycle=self.lifecycle,
            stopping_reason=lambda: self.stopping_reason,
        )
        #: What every session's Agent tool uses, by name (``AgentTool``).
        self.launch_services = LaunchServices(
            settings=self.settings,
            home=self.home,
            homes=self.homes,
            store=self.store,
            registry=self.registry,
            mcp=self.mcp,
            gateway=self.gateway,
            start=self.start,
        )
        # Per parent session: one session's launch held back (by an approval,
        # say) must not hold back another session's.
        self._launch_orders: dict[str, LaunchOrder] = {}
        self._queues: dict[str, CommandQueue] = {}
        self._stack = contextlib.AsyncExitStack()
        self._nursery: trio.Nursery | None = None
        #: Why every task is being stopped (``stop_all``); each stop then records it.
        self.stopping_reason: str | None = None

    async def __aenter__(self) -> Self:
        # Named a supervisor first and last: its gateway and MCP servers act for a model
        # (S-SEC-2); the stack's first callback runs after all the rest is closed.
        mark_supervisor()
        self._stack.callback(unmark_supervisor)
        try:
            await self._stack.enter_async_context(self.gateway)
            await self._stack.enter_async_context(self.fleet)
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
        parent = launch.parent_session_id
        run = SubagentRun(
            launch,
            self.run_services,
            launch_order=self.launch_order(parent),
            parent_queue=self.command_queue(parent),
            output_dir=self.output_dir(parent, launch.agent_id),
            ticket=ticket,
        )
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

    def has_background_work(self, parent_session_id: str) -> bool:
        """Whether a background subagent or workflow of the session has not ended."""
        return bool(self.running_background(parent_session_id)) or any(
            record.kind == "workflow" and not record.is_terminal
            for record in self.registry.list(parent_session_id)
        )

    def move_to_background(self, task_id: str) -> bool:
        """Move a running foreground subagent to the background (S-RUN-5)."""
        run = self.runs.get(task_id)
        return run is not None and run.move_to_background()
