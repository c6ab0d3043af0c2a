"""What this machine's kernel can enforce of a worker's sandbox (S-SBX-2).

The worker applies its sandbox and reports what held; the supervisor refuses
a launch whose sandbox did not hold (``SandboxUnsupportedError``, with
``unsupported_message``) unless the policy says to run anyway. ``doctor``
shows what each mode enforces at this kernel's Landlock ABI.
"""

from __future__ import annotations

import os

from protocol import NETWORK_ABI, SandboxPolicy, SandboxReport

from ._errors import SpawnError, SubvisorError

__all__ = [
    "LANDLOCK_ABI_MAX_ENV",
    "SandboxUnsupportedError",
    "landlock_abi_max_from_env",
    "mode_enforcement",
    "unsupported_message",
]

#: Test seam: the supervisor's workers act as if the kernel's Landlock ABI
#: were at most this (``0``: no Landlock), to exercise S-SBX-2 on any kernel.
LANDLOCK_ABI_MAX_ENV = "SUBVISOR_LANDLOCK_ABI_MAX"


class SandboxUnsupportedError(SpawnError):
    """The kernel cannot enforce the sandbox a subagent asked for (S-SBX-2)."""


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


def unsupported_message(policy: SandboxPolicy, report: SandboxReport | None) -> str:
    """Why a launch was refused, and how to opt into running without the sandbox."""
    reason = report.reason if report is not None and report.reason else "the worker reported none"
    fs_net_ok = not policy.requested or (report is not None and report.enforced)
    if fs_net_ok and report is not None and not report.isolates(policy):
        return (
            f"the worker could not be isolated from subvisor's secrets ({reason}; "
            f"capabilities dropped: {report.privileges_dropped}; seccomp filter: "
            f"{report.syscall_filter}; hidden: {', '.join(report.hidden) or 'nothing'}). "
            "It needs a private mount namespace (root, or unprivileged user namespaces) or "
            "Landlock, and seccomp on x86_64 or aarch64; `subvisor doctor` shows which is "
            'missing. `sandbox.on_unsupported = "warn"` runs it anyway, loudly'
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
    # By the seccomp filter, not Landlock: the syscall filter check says whether it holds.
    unix = "; no UNIX socket, socketpairs only (unless allow_unix_sockets)"
    fs_what = (
        "read everywhere; write only the worker's temp dir" + unix
        if fs_ok
        else "needs Landlock ABI >= 1"
    )
    ws_what = (
        "write only the project dir and temp dir" + unix if fs_ok else "needs Landlock ABI >= 1"
    )
    net_what = (
        "TCP bind/connect denied, no UDP or ICMP socket"
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
