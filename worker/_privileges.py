"""Shedding privilege in a worker before it runs anything of a model's (S-SEC-1).

A worker runs model-directed commands, so whatever it could do as root (or
with file capabilities) must be gone before its ``hello``:

- every capability: effective, permitted, inheritable, ambient, and the
  bounding set, so no ``execve`` (of a setuid-root binary, or by uid 0) can
  bring one back;
- ``SECBIT_NOROOT`` and friends, locked, where we may set them: uid 0 alone
  then means nothing to ``execve``;
- ``no_new_privs``, which also makes setuid bits and file capabilities inert.

The zygote and the supervisor are made non-dumpable instead: then no process
of the same uid that lacks ``CAP_SYS_PTRACE`` (which no worker has) can read
their memory or ``/proc/PID/environ``, or ptrace them.

Order matters: the bounding set and securebits need ``CAP_SETPCAP``, so they
go before ``capset`` clears it. A process without ``CAP_SETPCAP`` (a user's
worker) has nothing to drop there and only sets ``no_new_privs`` and clears
its (empty) sets.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

__all__ = [
    "PrivilegeReport",
    "drop_privileges",
    "set_child_subreaper",
    "set_dumpable",
    "status_caps",
]

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_SECUREBITS = 28
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_SETPCAP = 8
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off), NO_CAP_AMBIENT_RAISE, each with its lock bit.
_SECUREBITS_LOCKED = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _prctl(option: int, arg: int = 0, what: str = "") -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({what or option}) failed: {os.strerror(err)}")


def set_dumpable(dumpable: bool) -> None:
    """Make this process (non-)dumpable: non-dumpable hides its memory and environ."""
    _prctl(_PR_SET_DUMPABLE, int(dumpable), "PR_SET_DUMPABLE")


def set_child_subreaper() -> None:
    """Adopt this process's orphaned descendants, so none escapes its tree by double fork."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def status_caps() -> dict[str, int]:
    """This process's capability sets and ``NoNewPrivs``, as ``/proc/self/status`` has them."""
    caps: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("Cap", "NoNewPrivs")):
                key, _, value = line.partition(":")
                caps[key] = int(value.strip(), 16 if key.startswith("Cap") else 10)
    return caps


class PrivilegeReport:
    """What ``/proc/self/status`` says after dropping: all capability sets and NoNewPrivs."""

    __slots__ = ("caps",)

    def __init__(self, caps: dict[str, int]) -> None:
        self.caps = caps

    @property
    def all_dropped(self) -> bool:
        """No capability in any set, and ``no_new_privs`` on."""
        sets = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
        return all(self.caps.get(name, 1) == 0 for name in sets) and (
            self.caps.get("NoNewPrivs") == 1
        )


def drop_privileges() -> PrivilegeReport:
    """Drop every capability of this process for good; set ``no_new_privs``.

    Returns what the kernel then reports, so the caller states what is in
    force rather than what was asked for.
    """
    status = status_caps()
    if status.get("CapEff", 0) & (1 << _CAP_SETPCAP):
        # Best effort: a container may already lock some bits differently.
        with contextlib.suppress(OSError):
            _prctl(_PR_SET_SECUREBITS, _SECUREBITS_LOCKED, "PR_SET_SECUREBITS")
        for cap in range(_last_cap() + 1):
            _prctl(_PR_CAPBSET_DROP, cap, "PR_CAPBSET_DROP")
    if status.get("CapAmb", 0):
        _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, "PR_CAP_AMBIENT_CLEAR_ALL")
    header = _CapHeader(version=_LINUX_CAPABILITY_VERSION_3, pid=0)
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset failed: {os.strerror(err)}")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    return PrivilegeReport(status_caps())
