"""Putting a worker into its sandbox: a ``SandboxPolicy`` in, a ``SandboxReport`` out (S-SBX-1).

Runs in the worker after fork (or exec), after its rlimits and before
``hello``, while the process has one thread. Landlock then covers the worker
and everything it starts: Bash, its children, the file tools' threads.

=================  =============================================================
mode               rules (everything else the ABI knows is handled, so denied)
=================  =============================================================
read-only          read+execute ``/``; all rights under ``writable_roots``
                   and ``temp_dir``;
                   write+truncate on ``/dev/null``, ``/dev/zero``, ``/dev/full``
workspace-write    the same; ``writable_roots`` holds the project dir too
full               no filesystem rules
network deny       TCP bind and connect handled, no port allowed
=================  =============================================================

Scopes (ABI >= 6) come along: signals for a filesystem sandbox (the worker
cannot signal processes outside it), abstract UNIX sockets with network deny.
They are extra hardening, reported when applied and never required.

Where the kernel falls short, ``on_unsupported="error"`` applies nothing and
reports why (the supervisor then refuses the launch); ``"warn"`` applies the
parts it can and reports the rest as not enforced (S-SBX-2).
"""

from __future__ import annotations

import os
import tempfile

from protocol import NETWORK_ABI, SandboxPolicy, SandboxReport

from . import _landlock
from ._landlock import FsAccess, LandlockError, NetAccess, PathRule, Ruleset, Scope

__all__ = ["DEVICE_FILES", "apply_sandbox", "landlock_abi"]

#: Char devices shells write to (``cmd > /dev/null``); writing them changes nothing.
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full")

_DEVICE_ACCESS = FsAccess.READ_FILE | FsAccess.WRITE_FILE | FsAccess.TRUNCATE


def landlock_abi(ceiling: int | None = None) -> int:
    """The kernel's Landlock ABI, capped at ``ceiling`` (the test seam)."""
    abi = _landlock.abi_version()
    return abi if ceiling is None else min(abi, ceiling)


def _use_temp_dir(path: str) -> None:
    # Bash and its children inherit the environment; Python's own tempfile
    # may have cached the zygote's choice.
    for name in ("TMPDIR", "TMP", "TEMP"):
        os.environ[name] = path
    tempfile.tempdir = path


def _missing(policy: SandboxPolicy, abi: int) -> list[str]:
    missing = []
    if policy.restricts_filesystem and abi < 1:
        missing.append(
            f"{policy.mode} needs Landlock (ABI >= 1) and this kernel has "
            + ("none" if abi == 0 else f"ABI {abi}")
        )
    if policy.restricts_network and abi < NETWORK_ABI:
        missing.append(
            f"network deny needs Landlock ABI >= {NETWORK_ABI} (TCP rules, Linux >= 6.7) and "
            "this kernel has " + ("none" if abi == 0 else f"ABI {abi}")
        )
    return missing


def _ruleset(policy: SandboxPolicy, abi: int) -> tuple[Ruleset, tuple[str, ...]]:
    """The ruleset for ``policy`` at ``abi``, and the paths it leaves writable."""
    fs = policy.restricts_filesystem and abi >= 1
    net = policy.restricts_network and abi >= NETWORK_ABI
    handled_fs = _landlock.fs_access_for_abi(abi) if fs else FsAccess(0)
    roots = (*policy.writable_roots, *([policy.temp_dir] if policy.temp_dir else []))
    writable = tuple(dict.fromkeys(roots)) if fs else ()
    paths: list[PathRule] = []
    if fs:
        paths.append(PathRule("/", _landlock.READ_ACCESS))
        paths.extend(PathRule(root, handled_fs) for root in writable)
        paths.extend(PathRule(dev, _DEVICE_ACCESS) for dev in DEVICE_FILES if os.path.exists(dev))
    scopes = _landlock.scopes_for_abi(abi)
    scoped = Scope(0)
    if fs:
        scoped |= scopes & Scope.SIGNAL
    if net:
        scoped |= scopes & Scope.ABSTRACT_UNIX_SOCKET
    ruleset = Ruleset(
        handled_fs=handled_fs,
        handled_net=_landlock.net_access_for_abi(abi) if net else NetAccess(0),
        scoped=scoped,
        paths=paths,
    )
    return ruleset, writable


def _scope_names(scoped: Scope) -> tuple[str, ...]:
    names = {Scope.SIGNAL: "signal", Scope.ABSTRACT_UNIX_SOCKET: "abstract-unix-socket"}
    return tuple(name for flag, name in names.items() if flag in scoped)


def apply_sandbox(policy: SandboxPolicy | None) -> SandboxReport:
    """Restrict this process as ``policy`` says; report what is in force (never more)."""
    policy = policy or SandboxPolicy()
    if policy.temp_dir is not None:
        _use_temp_dir(policy.temp_dir)
    report = SandboxReport(
        mode=policy.mode, network=policy.network, abi=0, temp_dir=policy.temp_dir
    )
    if not policy.requested:
        return report
    abi = landlock_abi(policy.landlock_abi_max)
    report = report.model_copy(update={"abi": abi})
    missing = _missing(policy, abi)
    if missing and policy.on_unsupported == "error":
        return report.model_copy(update={"reason": "; ".join(missing)})
    if abi < 1:
        return report.model_copy(update={"reason": "; ".join(missing)})
    ruleset, writable = _ruleset(policy, abi)
    if not (ruleset.handled_fs or ruleset.handled_net or ruleset.scoped):
        return report.model_copy(update={"reason": "; ".join(missing)})
    try:
        _landlock.restrict_self(ruleset)
    except LandlockError as exc:
        return report.model_copy(update={"reason": f"Landlock could not be applied: {exc}"})
    return report.model_copy(
        update={
            "filesystem": bool(ruleset.handled_fs),
            "network_denied": bool(ruleset.handled_net),
            "writable": list(writable),
            "scopes": list(_scope_names(ruleset.scoped)),
            "reason": "; ".join(missing),
        }
    )
