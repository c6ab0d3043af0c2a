"""``SubvisorSettings``: how delegation behaves (models, turns, caps, where state lives)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol import ResourceLimits

from ._paths import subvisor_home
from .providers import GatewayConfig

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
    #: Per-subagent process caps; ``idle_timeout_s`` is the S-RUN-3 watchdog.
    subagent_limits: ResourceLimits = ResourceLimits(memory_mb=2048, idle_timeout_s=600)
    #: Subagent workers alive at once (further launches wait, in order).
    max_concurrent_subagents: int = Field(default=20, ge=1)
    #: Result text style of the Agent tool: Claude Code's or opencode's (S-TOOL-6).
    result_style: Literal["claude", "opencode"] = "claude"
    gateway: GatewayConfig = GatewayConfig()
