"""``SubvisorSettings``: how delegation behaves (models, turns, caps, where state lives)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from protocol import ResourceLimits

from ..kernel import EventBudgetLimits, Placement
from ..policy._rule_config import rules_from_config
from ..policy._rules import PermissionMode, Ruleset, parse_permission_mode
from ..policy._sandbox import SandboxSettings
from ..providers import GatewayConfig
from ..state._paths import subvisor_home
from ._mcp import McpServerConfig

__all__ = ["SubvisorSettings"]


class SubvisorSettings(BaseModel):
    """Settings of one ``Subvisor``: a supervisor, its store and its model gateway."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(default_factory=subvisor_home)
    #: The root session's model when none is given (``provider:model``).
    model: str | None = None
    #: Model turns a subagent may take when its profile does not say (S-PROF-7).
    max_turns: int = Field(default=4, ge=1)
    #: Model turns the root agent may take per user turn.
    root_max_turns: int = Field(default=50, ge=1)
    #: Model calls the root may make, in one session, for the turns that background
    #: agents' notifications and messages start (S-SEC-8, S-RUN-8); once spent (a turn
    #: begun runs to its end) they are no longer given to the root, and ``subvisor
    #: run`` ends ``partial`` saying so.
    root_max_notification_calls: int = Field(default=500, ge=0)
    #: Per-subagent process caps; ``idle_timeout_s`` is the S-RUN-3 watchdog.
    subagent_limits: ResourceLimits = ResourceLimits(memory_mb=2048, idle_timeout_s=600)
    #: What one subagent's worker may make the supervisor record: events and the
    #: MB of its transcript, tool output and events; past it the worker is stopped
    #: with "event budget exceeded" (S-SEC-8). No normal run comes near the defaults.
    event_budget: EventBudgetLimits = EventBudgetLimits()
    #: Subagent workers alive at once (further launches wait, in order).
    max_concurrent_subagents: int = Field(default=20, ge=1)
    #: Subagents one session may launch in all (further launches fail clearly).
    max_subagents_per_session: int = Field(default=200, ge=1)
    #: A foreground subagent still running after this long moves to the
    #: background and its parent's turn goes on (S-RUN-5); None: never.
    auto_background_ms: int | None = Field(default=None, ge=0)
    #: How long a workflow actor's escalated question waits for the root's
    #: ResolveWorkflowQuestion before its ask fails.
    workflow_question_timeout_s: float = Field(default=600.0, gt=0)
    #: Result text style of the Agent tool: Claude Code's or opencode's (S-TOOL-6).
    result_style: Literal["claude", "opencode"] = "claude"
    #: Levels of delegation (S-POL-4): 0 disables the Agent tool, 1 lets the
    #: root delegate and no child. More is refused: a worker cannot start a
    #: supervisor, so a second level could never be honoured.
    subagent_depth: int = Field(default=1, ge=0, le=1)
    #: The session's permission rules, in opencode's config shapes (S-POL-2):
    #: ``{"*": "allow", "bash": {"rm *": "ask"}, "edit": "deny"}``.
    permission: dict[str, Any] | list[Any] = Field(default_factory=lambda: {"*": "allow"})
    #: default, acceptEdits, plan or bypassPermissions (S-POL-3).
    permission_mode: str = "default"
    #: Directories of Claude Code plugins whose agents to load (S-PROF-3).
    plugin_dirs: tuple[Path, ...] = ()
    #: MCP servers the supervisor connects at startup (S-MCP-1), as given;
    #: ``load_settings`` adds a project's ``.mcp.json`` once trusted (S-SEC-3).
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    #: Subagent sandboxes (S-SBX-1): defaults, CLI overrides, and what to do
    #: where the kernel cannot enforce them.
    sandbox: SandboxSettings = SandboxSettings()
    #: The model gateway; unless ``gateway.max_concurrency`` is set, it gives
    #: every concurrent subagent and the root a model slot (at least 16).
    gateway: GatewayConfig = GatewayConfig()
    #: Where subagent workers run (S-DIST-1): ``local``, or ``ray``: on the
    #: nodes of the Ray cluster at ``ray_address`` (``auto`` or ``host:port``).
    placement: Placement = "local"
    ray_address: str = "auto"

    @field_validator("permission")
    @classmethod
    def _rules_parse(cls, value: dict[str, Any] | list[Any]) -> dict[str, Any] | list[Any]:
        rules_from_config(value)
        return value

    @field_validator("permission_mode")
    @classmethod
    def _mode_parses(cls, value: str) -> str:
        return parse_permission_mode(value)

    @model_validator(mode="after")
    def _model_slots_follow_subagents(self) -> SubvisorSettings:
        # Model slots fewer than subagents would make the gateway, not the
        # subagent cap, the limit nobody chose; an explicit setting is kept.
        gateway = self.gateway
        if "max_concurrency" not in gateway.model_fields_set:
            slots = max(gateway.max_concurrency, self.max_concurrent_subagents + 1)
            if slots != gateway.max_concurrency:
                derived = gateway.model_copy(update={"max_concurrency": slots})
                object.__setattr__(self, "gateway", derived)  # frozen: set once, here
        return self

    @property
    def rules(self) -> Ruleset:
        """The session's permission rules."""
        return rules_from_config(self.permission)

    @property
    def mode(self) -> PermissionMode:
        """The session's permission mode."""
        return parse_permission_mode(self.permission_mode)
