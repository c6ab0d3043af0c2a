"""Choosing a subagent's sandbox, or a workflow actor's (S-SBX-1, S-SBX-3).

Which mode a subagent gets, first match wins (an actor has no profile, so
step 2 never applies to it):

1. ``subvisor run --sandbox MODE`` (``SandboxSettings.force_mode``);
2. its profile's ``sandbox`` field;
3. ``[sandbox] mode`` in config;
4. ``read-only`` if its tools include neither Write nor Edit (Explore),
   else ``workspace-write`` (general-purpose).

The network likewise: ``--network``, the profile's ``network``, ``[sandbox]
network`` (not for a ``read-only`` subagent), else ``deny``: ``allow`` is
always somebody's explicit choice, never a read-only profile's default.

UNIX sockets (S-SBX-1, S-SEC-1): a ``read-only`` or ``workspace-write``
subagent can make none (only socketpairs), whatever its network, unless the
user's config sets ``[sandbox] allow_unix_sockets = true``. No profile and no
project config can: a socket file such as Docker's is root on the host.

A project profile comes with the repository, so it may only tighten
(S-SBX-3, S-SEC-3), as a project's config may: a ``sandbox`` looser than
steps 3-4 give, or ``network: allow`` where ``[sandbox] network`` is not
``allow``, is refused at launch like its ``full`` and ``permissionMode``; a
plugin profile's (a project config may name plugin dirs) is ignored with a
warning, like its ``full``. The ``run`` flags still decide over both.

Writable under a filesystem sandbox: the project dir (``workspace-write``),
the worker's private temp dir (made per spawn by the ``Supervisor``), and the
profile's memory dir (S-PROF-8) when it has one, as ``make_memory_dir``
checked it (no symlink on its way; the worker checks again).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from protocol import NetworkMode, OnUnsupported, SandboxMode, SandboxPolicy

from ..kernel import SubvisorError
from ..profiles._profile import AgentProfile

__all__ = ["WRITING_TOOLS", "SandboxSettings", "choose_sandbox", "home_holds"]

log = logging.getLogger("subvisor")

#: A profile with either of these writes files on purpose: workspace-write.
WRITING_TOOLS = frozenset({"Write", "Edit"})
#: Filesystem modes, strictest first.
_LOOSENESS: dict[SandboxMode, int] = {"read-only": 0, "workspace-write": 1, "full": 2}


class SandboxSettings(BaseModel):
    """The ``[sandbox]`` table of the config, and the ``run`` flags that override it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: For profiles that do not say; None: by their tools (see the module doc).
    mode: SandboxMode | None = None
    #: For profiles that do not say; None: deny.
    network: NetworkMode | None = None
    #: Where the kernel cannot enforce a sandbox: refuse the launch, or run
    #: with a loud warning and "not enforced" on the task record.
    on_unsupported: OnUnsupported = "error"
    #: Set by ``subvisor run --sandbox``: every subagent gets this mode.
    force_mode: SandboxMode | None = None
    #: Set by ``subvisor run --network``: every subagent gets this network.
    force_network: NetworkMode | None = None
    #: Let ``read-only`` and ``workspace-write`` subagents make UNIX sockets,
    #: and so connect to any socket file they can name (Docker's, D-Bus, an
    #: ssh-agent). The user's config only: a project's may not set it.
    allow_unix_sockets: bool = False


def home_holds(project_dir: Path, home: Path) -> bool:
    """Whether ``project_dir`` holds subvisor's ``home``, both resolved (S-SEC-3).

    Resolving walks every component of both paths (an ``lstat`` each): a
    caller that launches many agents in one project asks once. Neither
    answer can be changed by a sandboxed subagent: moving the project dir or
    home (or a link on the way to them) needs write access above the project.
    """
    return home.resolve().is_relative_to(project_dir.resolve())


def choose_sandbox(
    profile: AgentProfile | None,
    tools: Sequence[str],
    settings: SandboxSettings,
    *,
    project_dir: Path,
    memory_dir: Path | None = None,
    home: Path | None = None,
    home_in_project: bool | None = None,
) -> SandboxPolicy:
    """The sandbox a launch of ``profile`` with ``tools`` gets (see the module doc).

    ``profile`` None: an agent with no profile (a workflow actor), whose
    tools and the settings alone decide.

    Raises ``SubvisorError`` for a project profile that asks for ``full``
    (S-SBX-3), whatever path the profile took to get here, or for more than
    the config gives (see the module doc), and for ``workspace-write`` in a
    project dir that holds subvisor's ``home`` (S-SEC-3): the subagent could
    rewrite the user's config and database. ``home_in_project``: that answer
    (``home_holds``) when the caller knows it already; None: worked out here.
    ``memory_dir``: as ``make_memory_dir`` returned it.
    """
    if profile is not None and profile.scope == "project" and profile.sandbox == "full":
        raise SubvisorError(
            f"profile {profile.name!r} ({profile.source}) is a project profile that sets "
            "sandbox: full; a repository may not lift its own sandbox (S-SBX-3): move it to "
            "a user-level profile, or run with `subvisor run --sandbox full`"
        )
    default_mode: SandboxMode = (
        "workspace-write" if WRITING_TOOLS.intersection(tools) else "read-only"
    )
    wanted_mode = profile.sandbox if profile is not None else None
    wanted_network = profile.network if profile is not None else None
    if profile is not None and profile.scope in ("project", "plugin"):
        wanted_mode, wanted_network = _no_looser(profile, settings, default_mode)
    mode = settings.force_mode or wanted_mode or settings.mode or default_mode
    # S-SBX-3: a read-only subagent gets the network only when asked for it
    # by name (its profile, or --network), never from a default.
    default_network = settings.network if mode != "read-only" else None
    network = settings.force_network or wanted_network or default_network or "deny"
    roots: list[str] = []
    if mode == "workspace-write":
        if home_in_project is None:
            home_in_project = home is not None and home_holds(project_dir, home)
        if home_in_project:
            raise SubvisorError(
                f"workspace-write refused: the project dir {project_dir} holds subvisor's "
                f"home {home}, whose config and database a subagent could then rewrite; "
                "run from the project's own directory, or set SUBVISOR_HOME outside it"
            )
        roots.append(str(project_dir))
    return SandboxPolicy(
        mode=mode,
        network=network,
        writable_roots=tuple(roots),
        memory_dir=str(memory_dir) if mode != "full" and memory_dir is not None else None,
        allow_unix_sockets=settings.allow_unix_sockets,
        on_unsupported=settings.on_unsupported,
    )


def _no_looser(
    profile: AgentProfile, settings: SandboxSettings, default_mode: SandboxMode
) -> tuple[SandboxMode | None, NetworkMode | None]:
    """A project or plugin profile's ``sandbox`` and ``network``, none looser than config's.

    A project profile that loosens is refused (S-SBX-3, S-SEC-3, as its
    ``full``); a plugin's loosening is dropped with a warning, as its ``full``
    is, since a project config may name plugin dirs.
    """
    in_force = settings.mode or default_mode
    mode, network = profile.sandbox, profile.network
    loosened = []
    if settings.force_mode is None and mode is not None and _LOOSENESS[mode] > _LOOSENESS[in_force]:
        where = "[sandbox] mode in config" if settings.mode else "the default for its tools"
        loosened.append(f"sandbox: {mode} (looser than {in_force}, {where})")
        mode = None
    if settings.force_network is None and network == "allow" and settings.network != "allow":
        loosened.append("network: allow (the config's [sandbox] network is not allow)")
        network = None
    if not loosened:
        return mode, network
    what = " and ".join(loosened)
    if profile.scope == "plugin":
        log.warning(
            "profile %r (%s): %s ignored: a plugin may not loosen its sandbox",
            profile.name,
            profile.source,
            what,
        )
        return mode, network
    raise SubvisorError(
        f"profile {profile.name!r} ({profile.source}) is a project profile that sets {what}; "
        "a repository may not loosen its own sandbox (S-SBX-3): allow it in your "
        "config.toml's [sandbox], move the profile to a user-level dir, or pass "
        "`subvisor run --sandbox`/`--network`"
    )
