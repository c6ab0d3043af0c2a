"""The sandbox a worker is asked for, and the one it reports as enforced (S-SBX-1, S-SBX-2).

``SandboxPolicy`` rides in the spawn request (the zygote's ``spawn`` datagram,
or ``--sandbox`` of an exec'd worker); the worker applies it with Landlock
right after fork, before ``hello``, and states in ``hello`` what is actually in
force as a ``SandboxReport``.

==================  =============================  ================================
mode                filesystem                     needs
==================  =============================  ================================
``read-only``       read everywhere, write only    Landlock ABI >= 1
                    ``writable_roots`` (temp dir)
``workspace-write`` write under ``writable_roots``  Landlock ABI >= 1
                    (project dir and temp dir)
``full``            no filesystem rules            nothing
==================  =============================  ================================

A profile's ``memory_dir`` (S-PROF-8) is writable too, but only as the real
directory the supervisor checked: the worker reaches it from ``/`` without
following a symlink (S-SEC-3), so a link planted on its path later grants
nothing.

In every mode the worker also hides ``hidden_paths`` (subvisor's home: keys
in its config, the database, other sessions' output), keeps each ``.git`` of
a writable root read-only and its missing ``ROOT/.git`` uncreatable
(``protect_vcs``; not in ``full``), enters an IPC namespace of its own (and,
with a temp dir, a mount namespace where no other worker's temp dir is seen),
drops every capability and sets ``no_new_privs`` (S-SEC-1, S-SEC-2, S-SEC-3,
S-SEC-4), and installs a seccomp filter: no ``prlimit`` or scheduling change
on another process, no user namespace (S-SEC-2, S-SEC-7).

In ``read-only`` and ``workspace-write``, whatever the network, the filter
also refuses ``socket(AF_UNIX)`` (S-SBX-1, S-SEC-1) unless the user set
``allow_unix_sockets``: Landlock does not check ``connect`` on a pathname
UNIX socket, so a worker could reach any socket file it can name (Docker's,
which is root on the host, the D-Bus buses, an ssh-agent, X11).
``socketpair`` stays allowed (trio, asyncio and subprocess use it).

``network="deny"`` denies TCP bind and connect (Landlock ABI >= 4) and, by
the seccomp filter, every other socket that reaches the network (UDP, ICMP,
MPTCP, SCTP, ``AF_VSOCK`` and the like); the worker's own pipes to the
supervisor are inherited and stay open.

Invariant: a report is ``enforced`` only when every part the policy asked for
is in force. A part that is not is named in ``reason``, never left out.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "NETWORK_ABI",
    "TEMP_SHARED_PREFIX",
    "NetworkMode",
    "OnUnsupported",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxReport",
]

#: The name, before the uid, of the one dir in the system's temp dir that holds
#: every session's dir of that uid: ``subvisor-sandboxes-<uid>/<pid>-*/workers/
#: <worker>`` (``supervisor.kernel._temp_dirs``). A worker covers it only where
#: its temp dir lies in such a dir (``worker._mounts.temp_dir_covers``).
TEMP_SHARED_PREFIX = "subvisor-sandboxes-"

SandboxMode = Literal["read-only", "workspace-write", "full"]
NetworkMode = Literal["deny", "allow"]
#: What a worker does when the kernel cannot enforce its policy: refuse to
#: run (the launch fails), or run without it, saying so loudly.
OnUnsupported = Literal["error", "warn"]

#: The first Landlock ABI with TCP bind/connect rules.
NETWORK_ABI = 4


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SandboxPolicy(_Frozen):
    """What a worker must restrict itself to before it says hello.

    ``writable_roots`` are directories the worker may write under (ignored in
    ``full`` mode), as is ``memory_dir`` where no symlink leads to it;
    ``temp_dir`` is its private temp dir, also its ``TMPDIR``.
    ``landlock_abi_max`` is a test seam: the worker acts as if the kernel's
    Landlock ABI were at most this (``SUBVISOR_LANDLOCK_ABI_MAX`` in the
    supervisor's environment sets it).
    """

    mode: SandboxMode = "full"
    network: NetworkMode = "allow"
    writable_roots: tuple[str, ...] = ()
    #: A profile's memory dir (absolute, resolved): writable, never through a symlink.
    memory_dir: str | None = None
    temp_dir: str | None = None
    #: Directories the worker must not reach at all (absolute, resolved).
    hidden_paths: tuple[str, ...] = ()
    #: Keep each ``.git`` of a writable root read-only, and ``ROOT/.git`` uncreatable.
    protect_vcs: bool = True
    #: Directories (and files) below the writable roots to keep read-only
    #: (absolute, resolved): where subvisor's own code lives (a project's
    #: virtualenv, a source checkout), which the supervisor's later processes
    #: load, and the user-level files subvisor trusts (user profile dirs, its
    #: config) where they resolve into a writable root.
    read_only_paths: tuple[str, ...] = ()
    #: Directories below the writable roots that must keep their place (bound
    #: over themselves, so none can be renamed): those between a root and a
    #: user-level path in ``read_only_paths`` or ``uncreatable_paths``.
    pinned_paths: tuple[str, ...] = ()
    #: Missing paths below the writable roots where a user-level dir of
    #: subvisor's would be found: made empty read-only placeholders, as
    #: ``ROOT/.git`` is, so that nothing can be planted there.
    uncreatable_paths: tuple[str, ...] = ()
    #: The user's opt-in to UNIX sockets in ``read-only`` and ``workspace-write``
    #: (never from a project): False refuses ``socket(AF_UNIX)`` there.
    allow_unix_sockets: bool = False
    on_unsupported: OnUnsupported = "error"
    landlock_abi_max: int | None = Field(default=None, ge=0)

    @property
    def writable_dirs(self) -> tuple[str, ...]:
        """``writable_roots``, then ``memory_dir`` where there is one (not the temp dir)."""
        return (*self.writable_roots, *([self.memory_dir] if self.memory_dir else []))

    @property
    def restricts_filesystem(self) -> bool:
        """Whether the policy asks for filesystem rules."""
        return self.mode != "full"

    @property
    def restricts_network(self) -> bool:
        """Whether the policy asks for TCP bind/connect to be denied."""
        return self.network == "deny"

    @property
    def restricts_unix_sockets(self) -> bool:
        """Whether the policy asks for ``socket(AF_UNIX)`` to be refused."""
        return self.restricts_filesystem and not self.allow_unix_sockets

    @property
    def requested(self) -> bool:
        """Whether the policy asks for any restriction at all."""
        return self.restricts_filesystem or self.restricts_network

    @property
    def label(self) -> str:
        """``read-only, network deny`` and the like."""
        return f"{self.mode}, network {self.network}"


class SandboxReport(BaseModel):
    """The sandbox a worker has actually put itself in, as stated in its ``hello``.

    ``abi`` is the Landlock ABI the worker used (0: none). ``filesystem`` and
    ``network_denied`` say which parts are in force; ``writable`` lists the
    paths it may still write (``full``: none listed, all writable); ``scopes``
    the Landlock scopes applied (ABI >= 6). ``hidden`` and ``read_only`` list
    the paths out of its reach and those it may only read, ``isolation`` by
    what (``mount namespace``, ``landlock`` or both, joined by ``+``);
    ``landlock_domain`` whether it is in one (which also bars ptrace and
    ``/proc/PID/environ`` of every process outside it);
    ``privileges_dropped`` whether it holds no capability in any set and has
    ``no_new_privs``; ``ipc_namespace`` whether it has an IPC namespace of its
    own (its SysV IPC and message queues end with its tree); ``processes_hidden``
    whether its ``/proc`` shows only the processes it may ptrace-read (its own
    tree), not every command line on the machine; ``metadata_read_only``
    whether every mount outside the paths it may write is read-only, so that no
    file's mode, times or xattrs change there (Landlock does not cover them);
    ``syscall_filter``
    whether its seccomp filter is in force (which ``network_denied`` also needs);
    ``reserved_space_capped`` whether its file-size cap also refuses space
    reserved past a file's end (``fallocate`` ``KEEP_SIZE``, by seccomp);
    ``unix_sockets_blocked`` whether it can create no UNIX socket, only
    socketpairs (so reach no socket file: Docker's, D-Bus, an ssh-agent).
    ``reason`` names what was asked for and is not in force.
    """

    # Strict like every message of a worker: it is the untrusted side's claim.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    mode: SandboxMode
    network: NetworkMode
    abi: int = Field(ge=0)
    filesystem: bool = False
    network_denied: bool = False
    writable: list[str] = Field(default_factory=list)
    scopes: list[str] = Field(default_factory=list)
    temp_dir: str | None = None
    hidden: list[str] = Field(default_factory=list)
    read_only: list[str] = Field(default_factory=list)
    isolation: str = ""
    landlock_domain: bool = False
    privileges_dropped: bool = False
    ipc_namespace: bool = False
    processes_hidden: bool = False
    metadata_read_only: bool = False
    syscall_filter: bool = False
    reserved_space_capped: bool = False
    unix_sockets_blocked: bool = False
    reason: str = ""

    @property
    def requested(self) -> bool:
        """Whether any restriction was asked for."""
        return self.mode != "full" or self.network == "deny"

    @property
    def enforced(self) -> bool:
        """True only if every restriction asked for is in force (S-SBX-2)."""
        fs_ok = self.mode == "full" or self.filesystem
        net_ok = self.network == "allow" or self.network_denied
        return self.requested and fs_ok and net_ok

    def isolates(self, policy: SandboxPolicy) -> bool:
        """True if every path ``policy`` hides is hidden, no privilege is left and the
        seccomp filter holds, UNIX sockets refused where asked (S-SEC-1, S-SEC-2, S-SEC-7)."""
        return (
            self.privileges_dropped
            and self.syscall_filter
            and (self.unix_sockets_blocked or not policy.restricts_unix_sockets)
            and set(policy.hidden_paths) <= set(self.hidden)
        )

    @property
    def boundary(self) -> str:
        """What holds beside the mode: capabilities, seccomp, UNIX sockets, hidden and read-only
        paths (S-SEC-1, -3)."""
        parts = ["no capabilities" if self.privileges_dropped else "CAPABILITIES KEPT"]
        parts.append("seccomp" if self.syscall_filter else "NO SECCOMP FILTER")
        if self.unix_sockets_blocked:
            parts.append("no UNIX sockets")
        if self.hidden:
            parts.append("subvisor home hidden")
        if any(os.path.basename(path) == ".git" for path in self.read_only):
            parts.append(".git read-only")
        if any(os.path.basename(path) != ".git" for path in self.read_only):
            parts.append("subvisor's own code read-only")
        if self.isolation:
            parts.append(f"by {self.isolation}")
        return ", ".join(parts)

    @property
    def summary(self) -> str:
        """One line for people: what is enforced, or that it is not."""
        return f"{self._sandbox_summary}; {self.boundary}"

    @property
    def _sandbox_summary(self) -> str:
        label = f"{self.mode}, network {self.network}"
        if not self.requested:
            return f"{label} (no sandbox asked for)"
        if self.enforced:
            return f"{label} (Landlock ABI {self.abi})"
        partial = [
            part
            for part, on in (
                ("filesystem rules", self.filesystem),
                ("network deny", self.network_denied),
            )
            if on
        ]
        in_force = f"; in force: {', '.join(partial)}" if partial else ""
        return f"{label}: NOT ENFORCED ({self.reason or 'unknown reason'}{in_force})"
