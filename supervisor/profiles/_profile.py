"""``AgentProfile``: who a subagent is: prompt, tools, model and limits (S-PROF-2, S-PROF-5).

Field names are Python's; each also validates under its frontmatter name
(``disallowedTools``, ``permissionMode``, ``maxTurns``, ``mcpServers``), so a
profile file's YAML frontmatter can be validated as it is, and list fields
accept the comma-separated strings profile files often use
(``tools: Read, Grep, Glob``). ``mode``, ``model_temperature``, ``permission``,
``tool_switches`` and ``disabled`` carry what opencode agent files say; ``warnings`` what the
loader noticed but accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from protocol import NetworkMode, SandboxMode
from worker.tools import resolve_tool_name

__all__ = [
    "INHERIT_ALL_TOOLS",
    "NEVER_INHERITED_TOOLS",
    "SKILL_TOOL_NAME",
    "AgentProfile",
    "MemoryScope",
    "PermissionAction",
    "PermissionRules",
    "ProfileMode",
    "ProfileScope",
    "canonical_tool_name",
]

ProfileScope = Literal["built-in", "user", "project", "plugin"]
#: opencode's agent modes: only ``subagent`` and ``all`` can be launched as a subagent.
ProfileMode = Literal["subagent", "primary", "all"]
#: Where a profile's persistent memory lives (S-PROF-8).
MemoryScope = Literal["user", "project", "local"]
PermissionAction = Literal["allow", "ask", "deny"]
#: opencode permission rules as written: one action for everything, or a
#: permission (``bash``, ``edit``, ...) mapped to one action or to
#: ``{pattern: action}`` in order (S-POL-2); ``_rule_config.rules_from_config``
#: reads them.
PermissionRules = PermissionAction | dict[str, PermissionAction | dict[str, PermissionAction]]

#: Tools no subagent ever gets: delegation is one level (S-POL-4), and a child
#: has no plan-approval surface, so ExitPlanMode would hang the parent (S-POL-1).
NEVER_INHERITED_TOOLS: frozenset[str] = frozenset(
    {"Agent", "Task", "EnterPlanMode", "ExitPlanMode"}
)
#: The ``tools`` entry meaning "every tool the parent has" (S-PROF-5).
INHERIT_ALL_TOOLS = "*"
#: The tool that loads a profile's ``skills``.
SKILL_TOOL_NAME = "Skill"


def canonical_tool_name(name: str) -> str:
    """A local tool's canonical name (``read`` -> ``Read``); other names unchanged."""
    return resolve_tool_name(name) or name


def _dedupe(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


class AgentProfile(BaseModel):
    """A subagent profile: a Markdown file's frontmatter plus its body (S-PROF-2).

    ``tools=None`` means the field was not written; that differs from ``*``
    only when ``skills`` are set (then only the Skill tool, S-PROF-5).
    ``model=None`` inherits the parent's model. ``source`` is the file the
    profile came from, or ``"built-in"``.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
    )

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    prompt: str
    tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] = ()
    model: str | None = None
    skills: tuple[str, ...] = ()
    color: str | None = None
    permission_mode: str | None = None
    max_turns: int | None = Field(default=None, ge=1)
    background: bool = False
    memory: MemoryScope | None = None
    mcp_servers: tuple[str, ...] = ()
    mode: ProfileMode | None = None
    # opencode's ``temperature``; the file loader maps it here. Not called
    # ``temperature`` so that a stray ``temperature`` key given to this model
    # directly is still rejected as unknown.
    model_temperature: float | None = Field(default=None, allow_inf_nan=False)
    permission: PermissionRules | None = None
    # opencode's ``tools: {write: false}`` map as written, for the permission
    # engine (``_rule_config.tools_map_to_rules``); its false entries are
    # also in ``disallowed_tools``.
    tool_switches: dict[str, bool] | None = None
    disabled: bool = False
    #: The subagent's kernel sandbox (S-SBX-1); None: the config's default,
    #: else by its tools. ``full`` never from a project profile (S-SBX-3).
    sandbox: SandboxMode | None = None
    #: TCP for the subagent's processes; None: the config's default, else deny.
    network: NetworkMode | None = None
    #: CPUs the subagent's worker claims: on Ray, only a node with that many
    #: free takes it; locally, more than this machine has is refused.
    cpus: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    source: str = "built-in"
    scope: ProfileScope = "built-in"
    warnings: tuple[str, ...] = ()

    def __hash__(self) -> int:
        # ``permission`` and ``tool_switches`` are dicts: a field-wise hash would fail.
        return hash((self.name, self.source, self.scope, self.prompt))

    @field_validator("name", "description", mode="after")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        stripped = value.strip()
        if not stripped:
            raise ValueError("must not be blank")
        return stripped

    @field_validator("tools", "disallowed_tools", "skills", "mcp_servers", mode="before")
    @classmethod
    def _split_name_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            return tuple(
                item.strip() if isinstance(item, str) else item
                for item in value
                if not (isinstance(item, str) and not item.strip())
            )
        return value

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus_is_a_number(cls, value: Any) -> Any:
        # YAML's ``true`` and ``"2"`` would pass as 1.0 and 2.0; a count is written as a number.
        if isinstance(value, bool | str):
            raise ValueError("must be a positive number of CPUs, like 2 or 0.5")
        return value

    @model_validator(mode="after")
    def _project_cannot_set_permission_mode(self) -> AgentProfile:
        # A repository must not raise its own permissions (S-PROF-4).
        if self.scope == "project" and self.permission_mode is not None:
            raise ValueError(
                f"profile {self.name!r} ({self.source}): a project-level profile may not set "
                "permissionMode; move it to a user-level profile if you trust it"
            )
        return self

    @model_validator(mode="after")
    def _project_cannot_lift_sandbox(self) -> AgentProfile:
        # A repository must not lift its own sandbox (S-SBX-3), like permissionMode.
        if self.scope == "project" and self.sandbox == "full":
            raise ValueError(
                f"profile {self.name!r} ({self.source}): a project-level profile may not set "
                "sandbox: full; move it to a user-level profile if you trust it"
            )
        return self

    @property
    def is_subagent(self) -> bool:
        """False for an opencode ``mode: primary`` agent or a ``disable: true`` one."""
        return self.mode != "primary" and not self.disabled

    @property
    def lists_tools(self) -> bool:
        """True when ``tools`` names specific tools rather than being omitted, empty or ``*``."""
        return bool(self.tools) and INHERIT_ALL_TOOLS not in (self.tools or ())

    def resolve_tools(self, parent_tools: Sequence[str]) -> tuple[str, ...]:
        """The canonical tool names this profile gets, given its parent's tools (S-PROF-5).

        Omitted, empty or ``*``: every parent tool. Omitted with ``skills``:
        only Skill. Listed: those the parent has. Always minus
        ``disallowed_tools`` and :data:`NEVER_INHERITED_TOOLS` (S-POL-1);
        a profile with ``skills`` always gets Skill, which loads them.
        """
        excluded = NEVER_INHERITED_TOOLS | {canonical_tool_name(n) for n in self.disallowed_tools}
        parent = _dedupe([canonical_tool_name(name) for name in parent_tools])
        if self.tools is None and self.skills:
            chosen: tuple[str, ...] = ()
        elif self.lists_tools:
            listed = _dedupe([canonical_tool_name(name) for name in self.tools or ()])
            chosen = tuple(name for name in listed if name in parent)
        else:
            chosen = parent
        if self.skills:
            chosen = _dedupe([*chosen, SKILL_TOOL_NAME])
        return tuple(name for name in chosen if name not in excluded)
