"""Choosing a subagent's sandbox, and what the kernel can enforce (S-SBX-1..3).

Which mode a subagent gets, first match wins:

1. ``subvisor run --sandbox MODE`` (``SandboxSettings.force_mode``);
2. its profile's ``sandbox`` field (``full`` never from a project profile);
3. ``[sandbox] mode`` in config;
4. ``read-only`` if its tools include neither Write nor Edit (Explore),
   else ``workspace-write`` (general-purpose).

The network likewise: ``--network``, the profile's ``network``, ``[sandbox]
network`` (not for a ``read-only`` subagent), else ``deny``: ``allow`` is
always somebody's explicit choice, never a read-only profile's default.

Writable under a filesystem sandbox: the project dir (``workspace-write``),
the worker's private temp dir (made per spawn by the ``Supervisor``), and the
profile's memory dir (S-PROF-8) when it has one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from protocol import (
    NETWORK_ABI,
    NetworkMode,
    OnUnsupported,
    SandboxMode,
    SandboxPolicy,
    SandboxReport,
)

from ._errors import SpawnError, SubvisorError
from ._top_directory import mark_top_directory

if TYPE_CHECKING:
    from ._profile import AgentProfile

__all__ = [
    "LANDLOCK_ABI_MAX_ENV",
    "WRITING_TOOLS",
    "SandboxSettings",
    "SandboxUnsupportedError",
    "WorkerTempDirs",
    "choose_sandbox",
    "landlock_abi_max_from_env",
    "mode_enforcement",
    "unsupported_message",
]

#: Test seam: the supervisor's workers act as if the kernel's Landlock ABI
#: were at most this (``0``: no Landlock), to exercise S-SBX-2 on any kernel.
LANDLOCK_ABI_MAX_ENV = "SUBVISOR_LANDLOCK_ABI_MAX"

#: A profile with either of these writes files on purpose: workspace-write.
WRITING_TOOLS = frozenset({"Write", "Edit"})


class SandboxUnsupportedError(SpawnError):
    """The kernel cannot enforce the sandbox a subagent asked for (S-SBX-2)."""


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


class WorkerTempDirs:
    """The private temp dirs of one supervisor's sandboxed workers.

    All live under one dir per supervisor, ``$TMPDIR/subvisor-sandbox-<pid>-*/workers``,
    removed when the supervisor closes. A supervisor killed by SIGKILL cannot
    do that, so the first sandboxed spawn of the next one removes the dirs of
    supervisors whose pid no longer exists.

    A worker that leaves its dir empty (most do) leaves it until close, or
    until ``MAX_KEPT_EMPTY`` pile up: on ext4 without a journal every removal
    slows each file created in the next minute (see ``_atomic_write``), so
    removing them while subagents start only makes the starts slower. An
    empty dir is never handed to another worker: a process the old worker
    left behind could still write into it.
    """

    PREFIX = "subvisor-sandbox-"
    _WORKERS = "workers"
    MAX_KEPT_EMPTY = 1024

    def __init__(self) -> None:
        self._root: str | None = None
        self._dirs: dict[str, str] = {}
        self._kept_empty: list[str] = []

    def make(self, worker_id: str) -> str:
        """A fresh temp dir for ``worker_id``."""
        if self._root is None:
            _remove_orphans(Path(tempfile.gettempdir()), self.PREFIX)
            root = tempfile.mkdtemp(prefix=f"{self.PREFIX}{os.getpid()}-")
            # Marked as a top dir, the root puts its one subdir in a fresh
            # ext4 block group, and the workers' dirs follow it there: cheap
            # to create even when $TMPDIR's group saw many deletions.
            mark_top_directory(Path(root))
            os.mkdir(os.path.join(root, self._WORKERS), 0o700)
            self._root = root
        parent = os.path.join(self._root, self._WORKERS)
        path = self._dirs[worker_id] = tempfile.mkdtemp(prefix=f"{worker_id}-", dir=parent)
        return path

    def release(self, worker_id: str) -> list[str]:
        """Forget the worker's temp dir; return the dirs to remove now (with ``remove``).

        That is the worker's dir if it holds anything, or every kept empty
        dir once there are ``MAX_KEPT_EMPTY`` of them; else nothing.
        """
        path = self._dirs.pop(worker_id, None)
        if path is None:
            return []
        try:
            with os.scandir(path) as entries:
                empty = next(entries, None) is None
        except OSError:
            empty = False
        if not empty:
            return [path]
        self._kept_empty.append(path)
        if len(self._kept_empty) < self.MAX_KEPT_EMPTY:
            return []
        doomed, self._kept_empty = self._kept_empty, []
        return doomed

    @staticmethod
    def remove(paths: list[str]) -> None:
        """Remove ``paths`` and all they hold (blocking: call from a thread)."""
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Remove every temp dir (blocking)."""
        self._dirs.clear()
        self._kept_empty.clear()
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _remove_orphans(parent: Path, prefix: str) -> None:
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            pid_text = entry.name.removeprefix(prefix).split("-", 1)[0]
            if not entry.name.startswith(prefix) or not pid_text.isdigit():
                continue
            try:
                os.kill(int(pid_text), 0)
                continue  # alive (or its pid was reused: leave it)
            except ProcessLookupError:
                pass
            except PermissionError:
                continue  # somebody else's
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == os.getuid():
                    shutil.rmtree(entry, ignore_errors=True)


def landlock_abi_max_from_env() -> int | None:
    """The test seam's ceiling from ``SUBVISOR_LANDLOCK_ABI_MAX``, if set."""
    raw = os.environ.get(LANDLOCK_ABI_MAX_ENV)
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SubvisorError(
            f"{LANDLOCK_ABI_MAX_ENV}={raw!r} is not a number; unset it, or give the highest "
            "Landlock ABI to use (0: none)"
        ) from None
    return max(0, value)


def choose_sandbox(
    profile: AgentProfile,
    tools: Sequence[str],
    settings: SandboxSettings,
    *,
    project_dir: Path,
    memory_dir: Path | None = None,
    home: Path | None = None,
) -> SandboxPolicy:
    """The sandbox a launch of ``profile`` with ``tools`` gets (see the module doc).

    Raises ``SubvisorError`` for a project profile that asks for ``full``
    (S-SBX-3), whatever path the profile took to get here, and for
    ``workspace-write`` in a project dir that holds subvisor's ``home``
    (S-SEC-3): the subagent could rewrite the user's config and database.
    """
    if profile.scope == "project" and profile.sandbox == "full":
        raise SubvisorError(
            f"profile {profile.name!r} ({profile.source}) is a project profile that sets "
            "sandbox: full; a repository may not lift its own sandbox (S-SBX-3): move it to "
            "a user-level profile, or run with `subvisor run --sandbox full`"
        )
    default_mode: SandboxMode = (
        "workspace-write" if WRITING_TOOLS.intersection(tools) else "read-only"
    )
    mode = settings.force_mode or profile.sandbox or settings.mode or default_mode
    # S-SBX-3: a read-only subagent gets the network only when asked for it
    # by name (its profile, or --network), never from a default.
    default_network = settings.network if mode != "read-only" else None
    network = settings.force_network or profile.network or default_network or "deny"
    roots: list[str] = []
    if mode == "workspace-write":
        if home is not None and home.resolve().is_relative_to(project_dir.resolve()):
            raise SubvisorError(
                f"workspace-write refused: the project dir {project_dir} holds subvisor's "
                f"home {home}, whose config and database a subagent could then rewrite; "
                "run from the project's own directory, or set SUBVISOR_HOME outside it"
            )
        roots.append(str(project_dir))
    if mode != "full" and memory_dir is not None:
        # The Write tool would create it; a sandbox rule needs it to exist.
        memory_dir.mkdir(parents=True, exist_ok=True)
        roots.append(str(memory_dir))
    return SandboxPolicy(
        mode=mode,
        network=network,
        writable_roots=tuple(roots),
        on_unsupported=settings.on_unsupported,
    )


def unsupported_message(policy: SandboxPolicy, report: SandboxReport | None) -> str:
    """Why a launch was refused, and how to opt into running without the sandbox."""
    reason = report.reason if report is not None and report.reason else "the worker reported none"
    fs_net_ok = not policy.requested or (report is not None and report.enforced)
    if fs_net_ok and report is not None and not report.isolates(policy):
        return (
            f"the worker could not be isolated from subvisor's secrets ({reason}; "
            f"capabilities dropped: {report.privileges_dropped}; hidden: "
            f"{', '.join(report.hidden) or 'nothing'}). It needs a private mount namespace "
            "(root, or unprivileged user namespaces) or Landlock; `subvisor doctor` shows "
            'which is missing. `sandbox.on_unsupported = "warn"` runs it anyway, loudly'
        )
    return (
        f"the sandbox ({policy.label}) cannot be enforced on this machine: {reason}. "
        "Run on a kernel with Landlock enabled (Linux >= 6.7 for network rules; "
        "`subvisor doctor` shows the ABI), choose `--sandbox full --network allow`, or set "
        '`sandbox.on_unsupported = "warn"` in subvisor.toml to run without it '
        '(the task record then says "not enforced")'
    )


def mode_enforcement(abi: int) -> list[tuple[str, bool, str]]:
    """What each mode will enforce at Landlock ``abi``: (mode, enforceable, what), for doctor."""
    fs_ok = abi >= 1
    net_ok = abi >= NETWORK_ABI
    fs_what = (
        "read everywhere; write only the worker's temp dir" if fs_ok else "needs Landlock ABI >= 1"
    )
    ws_what = "write only the project dir and temp dir" if fs_ok else "needs Landlock ABI >= 1"
    net_what = (
        "TCP bind/connect denied (UDP and UNIX sockets are not covered)"
        if net_ok
        else f"needs Landlock ABI >= {NETWORK_ABI}"
    )
    scopes = " (+ signal and abstract-socket scopes)" if abi >= 6 else ""
    return [
        ("read-only", fs_ok, fs_what + scopes),
        ("workspace-write", fs_ok, ws_what + scopes),
        ("full", True, "no filesystem rules"),
        ("network deny", net_ok, net_what),
    ]
