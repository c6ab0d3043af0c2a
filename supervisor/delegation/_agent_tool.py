"""``AgentTool``: the Agent tool of one parent session, launching real subagents.

It is a ``HostTool`` for the root agent loop, and, through ``invoke``, the
async handler a harness that brings its own parent loop calls with the
model's tool input (its JSON schema is ``spec.input_schema``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from pydantic import ValidationError

from protocol import ChatMessage, ResourceLimits, ToolCall, ToolSpec
from worker.tools import ToolOutput

from ..files._confined import Confinement
from ..kernel import SubvisorError
from ..policy._permission_derivation import (
    child_permission_mode,
    derive_child_rules,
    launchable_agents,
)
from ..policy._policy import ToolPolicy
from ..policy._rule_config import rules_from_config, tools_map_to_rules
from ..policy._rules import Ruleset, apply_mode
from ..policy._sandbox import choose_sandbox, home_holds
from ..profiles._agent_memory import apply_memory, make_memory_dir
from ..profiles._profile import AgentProfile
from ..profiles._profile_catalog import ProfileCatalog
from ..providers import ModelGateway, ScriptedProvider, parse_model_string
from ..state._store import SessionStore
from ..state._tasks import TaskRegistry
from ._agent_tool_schema import (
    AGENT_TOOL_NAME,
    HIDDEN_ALIASES,
    AgentToolInput,
    agent_tool_spec,
    format_async_launched,
    format_foreground_result,
    format_task_error,
    format_task_result,
)
from ._launch_order import LaunchOrder
from ._mcp import McpHub, split_mcp_tool_name
from ._notifications import escape_markup
from ._settings import SubvisorSettings
from ._subagents import RunStarter, SubagentLaunch, SubagentRun

__all__ = ["AgentTool", "LaunchServices", "subagent_system_prompt"]

log = logging.getLogger("subvisor")


def subagent_system_prompt(profile: AgentProfile, cwd: str) -> str:
    """The child's system prompt: its profile body plus where it works."""
    return (
        f"{profile.prompt.rstrip()}\n\n"
        f"You are a subagent launched by another agent, which will read your final message; "
        f"the user will not see it directly. Working directory: {cwd}"
    )


@dataclass(frozen=True, slots=True)
class LaunchServices:
    """What the Agent tool of every session of one ``Subvisor`` uses, each part by name."""

    settings: SubvisorSettings
    #: The subvisor home: profiles' persistent memory lives under it (S-PROF-8).
    home: Path
    #: Every subvisor home hidden from the workers: no project file read for a
    #: launch may resolve into one (S-SEC-1).
    homes: tuple[Path, ...]
    #: Earlier agents' records and transcripts, for a resume by ``task_id``.
    store: SessionStore
    #: A session's launches so far, against ``max_subagents_per_session``.
    registry: TaskRegistry
    #: The MCP tools a child may borrow (S-MCP-1).
    mcp: McpHub
    #: Resolves an explicit model before anything starts (S-MODEL-1).
    gateway: ModelGateway
    start: RunStarter


class AgentTool:
    """Launches subagents for one parent session (S-TOOL-1..6, S-RUN-3, S-RUN-4)."""

    concurrency_safe = True
    aliases: Sequence[str] = HIDDEN_ALIASES

    def __init__(
        self,
        services: LaunchServices,
        *,
        launch_order: LaunchOrder,
        parent_session_id: str,
        parent_tools: Sequence[str],
        catalog: ProfileCatalog,
        current_model: Callable[[], str],
        cwd: Path,
        parent_policy: ToolPolicy,
    ) -> None:
        self._services = services
        self._parent_session_id = parent_session_id
        self._parent_tools = tuple(parent_tools)
        self._current_model = current_model
        self._cwd = cwd
        self._parent_policy = parent_policy
        self._catalog = catalog
        #: The parent session's line for worker slots.
        self._launch_order = launch_order
        #: Places in line taken by ``reserve``, by tool call id.
        self._tickets: dict[str, int] = {}
        # S-TOOL-4: agents whose `task` permission is deny are neither listed
        # nor launchable.
        launchable = set(launchable_agents(self._inherited_rules, list(catalog.profiles)))
        self._profiles = {n: p for n, p in catalog.profiles.items() if n in launchable}
        self.spec: ToolSpec = agent_tool_spec(list(self._profiles.values()), self._parent_tools)

    @functools.cached_property
    def _configured_rules(self) -> Ruleset:
        # The settings are frozen: their rules are parsed once per session, not per launch.
        return self._services.settings.rules

    @functools.cached_property
    def _home_in_project(self) -> bool:
        # One session, one project dir and one home: resolved at its first launch.
        return home_holds(self._cwd, self._services.home)

    @property
    def _inherited_rules(self) -> Ruleset:
        # A plan-mode parent's restrictions become rules, so they reach children.
        return apply_mode(self._parent_policy.mode, self._parent_policy.rules)

    def reserve(self, call: ToolCall) -> None:
        """Take the call's place in line for a worker slot (``LaunchOrder``)."""
        self._tickets[call.id] = self._launch_order.ticket()

    def release(self, call: ToolCall) -> None:
        """Give up the call's place if no launch took it."""
        ticket = self._tickets.pop(call.id, None)
        if ticket is not None:
            self._launch_order.pass_turn(ticket)

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Run one Agent (or Task) call from the model."""
        ticket = self._tickets.pop(call.id, None)
        try:
            if ticket is not None:
                # Plan in call order too, so that max_subagents_per_session
                # refuses the last calls of a message, not random ones.
                await self._launch_order.wait_turn(ticket)
            return await self.invoke(call.input, tool_use_id=call.id, ticket=ticket)
        finally:
            # By now its run has queued for a slot (or ended, or never
            # started): passing again is a no-op, and never holds others back.
            if ticket is not None:
                self._launch_order.pass_turn(ticket)

    async def invoke(
        self,
        raw_input: Mapping[str, Any],
        *,
        tool_use_id: str | None = None,
        model: str | None = None,
        ticket: int | None = None,
    ) -> ToolOutput:
        """Validate the model's input, launch the subagent, return what the model reads.

        ``model`` is a one-shot override for this launch (S-MODEL-1), for
        harnesses; the model itself cannot choose one. ``ticket``, from
        the parent session's ``LaunchOrder.ticket()``, is its place in line for a worker
        slot when several launches wait (default: behind all so far); the
        caller passes it once this returns.
        """
        try:
            request = AgentToolInput.model_validate(dict(raw_input))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            return ToolOutput(f"Error: invalid {AGENT_TOOL_NAME} input: {problems}", is_error=True)
        try:
            launch = self._plan(request, tool_use_id, model)
        except (SubvisorError, ValueError) as exc:
            # ValueError: a bad value outside the tree (a profile name that makes no memory dir).
            return ToolOutput(f"Error: {exc}", is_error=True)
        run = self._services.start(launch, ticket=ticket)
        if launch.background:
            await run.ready.wait()
            if run.done.is_set() and run.record is not None and run.record.status == "failed":
                return self._failure(run)
            return self._launched(run)
        waited = False
        try:
            await self._wait_in_foreground(run)
            waited = True
        finally:
            # S-RUN-3: the parent turn's abort (a cancellation, which trio may
            # wrap in an exception group) cancels a foreground child.
            if not waited and not run.background and not run.done.is_set():
                with trio.CancelScope(shield=True):
                    await run.stop("the parent turn was aborted")
        if run.backgrounded.is_set():
            # S-RUN-5: moved to the background; its end will be a notification
            # (even if it ended just now: the parent must not get it twice).
            return self._launched(run)
        return self._result(run)

    @staticmethod
    def _launched(run: SubagentRun) -> ToolOutput:
        """The ``async_launched`` answer for a run that goes on in the background."""
        assert run.record is not None
        return ToolOutput(
            format_async_launched(
                agent_id=run.task_id,
                description=run.launch.description,
                output_file=run.record.output_file,
            )
        )

    async def _wait_in_foreground(self, run: SubagentRun) -> None:
        """Until the run ends or moves to the background (on request or after
        ``auto_background_ms``)."""
        # One event for both ends of the wait: no task per end, none to cancel.
        auto_ms = self._services.settings.auto_background_ms
        if auto_ms is not None:
            with trio.move_on_after(auto_ms / 1000):
                await run.left_foreground.wait()
                return
            run.move_to_background()  # no-op if it ended meanwhile
        await run.left_foreground.wait()

    def _plan(
        self, request: AgentToolInput, tool_use_id: str | None, override: str | None
    ) -> SubagentLaunch:
        cap = self._services.settings.max_subagents_per_session
        launched = self._services.registry.count(self._parent_session_id, "local_agent")
        if launched >= cap:
            raise SubvisorError(
                f"this session already launched {launched} subagents, its "
                "max_subagents_per_session; finish with what you have, or raise the cap in "
                "subvisor.toml"
            )
        history: tuple[ChatMessage, ...] = ()
        subagent_type = request.subagent_type
        if request.task_id is not None:
            # Only this session's agents: another session's (a concurrent MCP
            # client's, an earlier run's) transcript is not this root's to read.
            previous = self._services.store.find_task(
                request.task_id, parent_session_id=self._parent_session_id
            )
            if previous is None or previous.child_session_id is None:
                raise SubvisorError(
                    f"no earlier agent with task_id {request.task_id!r}; omit task_id to start "
                    "a new agent"
                )
            history = tuple(self._services.store.messages(previous.child_session_id))
            subagent_type = previous.subagent_type or subagent_type
        found = self._catalog.resolve(subagent_type)
        if found.name not in self._profiles:
            raise SubvisorError(
                f"subagent_type {found.name!r} is denied by the task permission of this "
                f"session; pick one of {', '.join(sorted(self._profiles))} or change the "
                "[permission] task rules"
            )
        name = found.name
        if found.scope == "project" and found.permission_mode is not None:
            # S-PROF-4, checked again at assembly: a repository must not raise
            # its own permissions, whatever path the profile took to get here.
            raise SubvisorError(
                f"profile {name!r} ({found.source}) is a project profile that sets "
                "permissionMode; move it to a user-level profile to use it"
            )
        # S-PROF-8: persistent memory joins the prompt (and its tools the
        # set), from a dir checked to be where it says (S-SEC-3).
        home = self._services.home
        memory = make_memory_dir(found, home=home, project_dir=self._cwd)
        profile = apply_memory(found, home=home, project_dir=self._cwd)
        model = self._model_for(profile, override)
        cwd = str(self._cwd)
        tools, mcp_tools = self._split_mcp(profile)
        policy = self._child_policy(profile)
        # S-MCP-1, S-PROF-5: a borrowed tool its rules deny whatever the input is not listed.
        mcp_tools = tuple(spec for spec in mcp_tools if not policy.always_denies(spec.name))
        sandbox = choose_sandbox(
            profile,
            tools,
            self._services.settings.sandbox,
            project_dir=self._cwd,
            memory_dir=memory,
            home=home,
            home_in_project=self._home_in_project,
        )
        return SubagentLaunch(
            parent_session_id=self._parent_session_id,
            description=request.description,
            prompt=request.prompt,
            subagent_type=name,
            system=subagent_system_prompt(profile, cwd),
            tools=tools,
            mcp_tools=mcp_tools,
            model=model,
            max_turns=_max_turns(profile, self._services.settings.max_turns),
            background=request.run_in_background or profile.background,
            cwd=cwd,
            limits=_limits_for(profile, self._services.settings.subagent_limits),
            sandbox=sandbox,
            policy=policy,
            tool_use_id=tool_use_id,
            history=history,
        )

    def _split_mcp(self, profile: AgentProfile) -> tuple[tuple[str, ...], tuple[ToolSpec, ...]]:
        """Local tool names, and the MCP tools lent to the child (S-MCP-1, S-PROF-9)."""
        hub = self._services.mcp
        for server in profile.mcp_servers:
            if server not in hub.connected:
                raise SubvisorError(f"Required MCP server is not connected: {server}")
        resolved = profile.resolve_tools(self._parent_tools)
        local = tuple(name for name in resolved if split_mcp_tool_name(name) is None)
        if profile.mcp_servers:
            # The profile scopes its MCP servers: all their tools, none of others.
            lent = hub.tool_specs(tuple(profile.mcp_servers), lent=True)
        else:
            wanted = set(resolved)
            lent = tuple(spec for spec in hub.tool_specs(lent=True) if spec.name in wanted)
        disallowed = set(profile.disallowed_tools)
        return local, tuple(spec for spec in lent if spec.name not in disallowed)

    def _child_policy(self, profile: AgentProfile) -> ToolPolicy:
        # S-POL-2: the child's own rules (the configured ones every agent
        # starts from, as opencode merges its config into each agent, then its
        # profile's), then what it inherits from the parent (external
        # directories and every deny), then todowrite/task denied by default.
        own = (
            self._configured_rules
            + rules_from_config(profile.permission or {})
            + tools_map_to_rules(profile.tool_switches or {})
        )
        # S-SEC-3: a project's profile may only tighten what the configured
        # rules say (a repository wrote it); the user's own profiles may loosen.
        ceiling = None
        if profile.scope == "project":
            ceiling = derive_child_rules(self._inherited_rules, self._configured_rules)
        return ToolPolicy(
            rules=derive_child_rules(self._inherited_rules, own),
            mode=child_permission_mode(self._parent_policy.mode, profile.permission_mode),
            project_dir=str(self._cwd),
            ceiling=ceiling,
        )

    def _model_for(self, profile: AgentProfile, override: str | None) -> str:
        # S-MODEL-1: a one-shot override, else the profile's explicit model,
        # else the parent's current one (with its effort). An explicit model
        # that cannot be resolved is an error, never a silent fall-back.
        for explicit, from_profile in ((override, False), (profile.model, True)):
            if explicit is None:
                continue
            spec = parse_model_string(explicit)
            if spec is not None:
                _, provider = self._services.gateway.resolve(explicit)
                if from_profile and isinstance(provider, ScriptedProvider):
                    self._check_scenario(profile, spec.model, provider)
                return explicit
        return self._current_model()

    def _check_scenario(
        self, profile: AgentProfile, scenario: str, provider: ScriptedProvider
    ) -> None:
        """Refuse a project profile's scenario outside the project (S-SEC-3).

        The supervisor reads a scenario, with its own rights: a repository's
        profile naming ``~/.ssh/id_rsa`` would learn from the launch's error
        whether that file exists, its size, and whether it parses. The path is
        taken as the scripted provider opens it, from the supervisor's
        directory, with every link followed where it stands: ``realpath``, not
        ``abspath``, which drops ``link/..`` before the link is followed
        (``project/l/../x`` with ``l -> /etc/ssl`` is ``/etc/x``). The provider
        then reads it only through a descriptor that resolves inside the
        project, so a link swapped in after this check is not read either.
        """
        if profile.scope != "project":
            return
        confinement = Confinement.of_project(self._cwd, self._services.homes)
        project = confinement.root
        try:
            where = Path(os.path.realpath(scenario))
        except (OSError, ValueError):
            inside = False
        else:
            inside = confinement.why_not(where) is None
        if inside:
            provider.confine(scenario, confinement)
        else:
            raise SubvisorError(
                f"profile {profile.name!r} ({profile.source}) is a project profile whose model"
                f" reads the scenario {scenario!r}, outside the project {str(project)!r}: a"
                " repository's profile may only be scripted from the project's own files"
                " (S-SEC-3); move the scenario into the project, or the profile to a user-level"
                " one"
            )

    def _result(self, run: SubagentRun) -> ToolOutput:
        record = run.record
        assert record is not None
        if record.status != "completed":
            return self._failure(run)
        outcome = run.outcome
        status = outcome.status if outcome is not None else "completed"
        text = record.result or ""
        if self._services.settings.result_style == "opencode":
            return ToolOutput(format_task_result(text, task_id=run.task_id, state=status))
        return ToolOutput(
            format_foreground_result(
                text,
                agent_id=run.task_id,
                total_tokens=record.usage.total_tokens,
                tool_uses=record.usage.tool_calls,
                duration_ms=record.usage.duration_ms,
                status=status,
            )
        )

    def _failure(self, run: SubagentRun) -> ToolOutput:
        record = run.record
        assert record is not None
        error = record.error or record.status
        if self._services.settings.result_style == "opencode":
            return ToolOutput(format_task_error(error, task_id=run.task_id), is_error=True)
        return ToolOutput(
            f'Error: agent "{record.description}" ({run.task_id}) {record.status}: '
            f"{escape_markup(error)}",
            is_error=True,
        )


def _max_turns(profile: AgentProfile, in_force: int) -> int:
    """The profile's ``maxTurns``, else ``in_force``; a project or plugin profile may only lower it.

    A repository may not lift its own limits (S-SEC-3), as its config may not
    raise ``max_turns``: above it, a project profile's launch is refused (as
    for its ``permissionMode``) and a plugin's value is ignored with a warning.
    """
    if profile.max_turns is None or profile.max_turns <= in_force:
        return profile.max_turns or in_force
    if profile.scope == "plugin":
        log.warning(
            "profile %r (%s): maxTurns: %d ignored: above the max_turns = %d in force",
            profile.name, profile.source, profile.max_turns, in_force,
        )  # fmt: skip
        return in_force
    if profile.scope == "project":
        raise SubvisorError(
            f"profile {profile.name!r} ({profile.source}) is a project profile that sets "
            f"maxTurns: {profile.max_turns}, above the max_turns = {in_force} in force; a "
            "repository may only lower it (S-SEC-3): raise max_turns in your config.toml, "
            "or move the profile to a user-level dir"
        )
    return profile.max_turns


def _limits_for(profile: AgentProfile, limits: ResourceLimits) -> ResourceLimits:
    """The config's subagent caps, with the CPUs the profile claims (``cpus``) if it does."""
    if profile.cpus is None:
        return limits
    return limits.model_copy(update={"cpus": profile.cpus})
