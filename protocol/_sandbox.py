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

``network="deny"`` denies TCP bind and connect (Landlock ABI >= 4); the
worker's own pipes to the supervisor are inherited and stay open.

Invariant: a report is ``enforced`` only when every part the policy asked for
is in force. A part that is not is named in ``reason``, never left out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "NETWORK_ABI",
    "NetworkMode",
    "OnUnsupported",
    "SandboxMode",
    "SandboxPolicy",
    "SandboxReport",
]

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
    ``full`` mode); ``temp_dir`` is its private temp dir, also its
    ``TMPDIR``. ``landlock_abi_max`` is a test seam: the worker acts as if the
    kernel's Landlock ABI were at most this (``SUBVISOR_LANDLOCK_ABI_MAX`` in
    the supervisor's environment sets it).
    """

    mode: SandboxMode = "full"
    network: NetworkMode = "allow"
    writable_roots: tuple[str, ...] = ()
    temp_dir: str | None = None
    on_unsupported: OnUnsupported = "error"
    landlock_abi_max: int | None = Field(default=None, ge=0)

    @property
    def restricts_filesystem(self) -> bool:
        """Whether the policy asks for filesystem rules."""
        return self.mode != "full"

    @property
    def restricts_network(self) -> bool:
        """Whether the policy asks for TCP bind/connect to be denied."""
        return self.network == "deny"

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
    the Landlock scopes applied (ABI >= 6). ``reason`` names what was asked
    for and is not in force.
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

    @property
    def summary(self) -> str:
        """One line for people: what is enforced, or that it is not."""
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
