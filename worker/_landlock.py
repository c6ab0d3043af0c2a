"""Linux Landlock through ctypes: ABI probe, rulesets, and restricting this thread.

A minimal typed binding of the three syscalls (``landlock_create_ruleset``,
``landlock_add_rule``, ``landlock_restrict_self``). The PyPI ``landlock``
package (1.0.0.dev5) has no network rules or scopes and no type hints, so
this small one is ours.

Access rights by ABI (what ``handled_*`` are cut down to, best effort):

=====  ==========================================================
ABI    adds
=====  ==========================================================
1      filesystem: execute, read/write file, read dir, remove, make
2      ``REFER`` (rename/link across directories)
3      ``TRUNCATE``
4      network: ``BIND_TCP``, ``CONNECT_TCP``
5      ``IOCTL_DEV``
6      scopes: abstract UNIX sockets, signals
=====  ==========================================================

A rule may be ``nofollow``: its path is then reached from ``/`` one component
at a time with ``O_NOFOLLOW``, and where a symlink is met the rule is left out
(it grants less, never more), for paths a sandboxed process could have
swapped for a link since they were checked (or removed).

Invariants: a restriction applies to the calling thread and whatever it
starts later (threads and processes), never to threads that already exist;
so ``restrict_self`` refuses to run in a process with more than one thread.
It is irreversible: nothing can lift it, only add to it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "FILE_ACCESS",
    "READ_ACCESS",
    "FsAccess",
    "LandlockError",
    "NetAccess",
    "PathRule",
    "Ruleset",
    "Scope",
    "abi_version",
    "fs_access_for_abi",
    "net_access_for_abi",
    "open_nofollow",
    "restrict_self",
    "scopes_for_abi",
    "thread_count",
]

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38


class FsAccess(enum.IntFlag):
    """``LANDLOCK_ACCESS_FS_*``."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13
    TRUNCATE = 1 << 14
    IOCTL_DEV = 1 << 15


class NetAccess(enum.IntFlag):
    """``LANDLOCK_ACCESS_NET_*``."""

    BIND_TCP = 1 << 0
    CONNECT_TCP = 1 << 1


class Scope(enum.IntFlag):
    """``LANDLOCK_SCOPE_*``: IPC the domain may not reach outside itself."""

    ABSTRACT_UNIX_SOCKET = 1 << 0
    SIGNAL = 1 << 1


#: The rights a rule on a file (not a directory) may carry.
FILE_ACCESS = (
    FsAccess.EXECUTE
    | FsAccess.WRITE_FILE
    | FsAccess.READ_FILE
    | FsAccess.TRUNCATE
    | FsAccess.IOCTL_DEV
)
#: Reading and running, nothing else.
READ_ACCESS = FsAccess.EXECUTE | FsAccess.READ_FILE | FsAccess.READ_DIR

_FS_ABI_1 = FsAccess((1 << 13) - 1)


class LandlockError(OSError):
    """Landlock is missing, or a ruleset could not be built or applied."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    # The kernel's struct is __attribute__((packed)): 12 bytes, not 16.
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args: object) -> int:
    # syscall(2) is variadic and reads every argument as a long: widen ints
    # explicitly rather than trust ctypes' default int promotion.
    wide = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return int(_libc.syscall(ctypes.c_long(number), *wide))


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    result = _syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    if result < 0:
        # ENOSYS: kernel without Landlock; EOPNOTSUPP: built in, not enabled.
        return 0
    return result


def _fs_access(abi: int) -> FsAccess:
    if abi < 1:
        return FsAccess(0)
    access = _FS_ABI_1
    if abi >= 2:
        access |= FsAccess.REFER
    if abi >= 3:
        access |= FsAccess.TRUNCATE
    if abi >= 5:
        access |= FsAccess.IOCTL_DEV
    return access


# Built at import, so in the zygote: a flag value first made in a worker
# costs each worker a trip through ``Flag._missing_`` (about 50 us each).
_KNOWN_ABIS = range(8)
_FS_BY_ABI = tuple(_fs_access(abi) for abi in _KNOWN_ABIS)
_NET_BY_ABI = tuple(
    NetAccess.BIND_TCP | NetAccess.CONNECT_TCP if abi >= 4 else NetAccess(0) for abi in _KNOWN_ABIS
)
_SCOPES_BY_ABI = tuple(
    Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL if abi >= 6 else Scope(0) for abi in _KNOWN_ABIS
)


def _known(abi: int) -> int:
    """``abi`` as an index into the tables: newer ABIs add nothing we use."""
    return min(max(abi, 0), _KNOWN_ABIS[-1])


def fs_access_for_abi(abi: int) -> FsAccess:
    """Every filesystem right the given ABI knows."""
    return _FS_BY_ABI[_known(abi)]


def net_access_for_abi(abi: int) -> NetAccess:
    """Every network right the given ABI knows."""
    return _NET_BY_ABI[_known(abi)]


def scopes_for_abi(abi: int) -> Scope:
    """Every scope the given ABI knows."""
    return _SCOPES_BY_ABI[_known(abi)]


def thread_count() -> int:
    """Threads of this process (a restriction only covers the calling thread)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


@dataclass(frozen=True, slots=True)
class PathRule:
    """Allow ``access`` beneath ``path`` (or on it, for a file).

    ``nofollow``: only if no component of ``path`` is a symlink (see the module doc).
    """

    path: str
    access: FsAccess
    nofollow: bool = False


@dataclass(frozen=True, slots=True)
class Ruleset:
    """What to handle (deny unless a rule allows) and what to allow."""

    handled_fs: FsAccess
    handled_net: NetAccess
    scoped: Scope
    paths: Sequence[PathRule] = ()


def _fail(what: str) -> LandlockError:
    err = ctypes.get_errno()
    return LandlockError(err, f"{what}: {os.strerror(err)}")


def open_nofollow(path: str) -> int:
    """An ``O_PATH`` fd of the absolute ``path``, opened without following any symlink.

    Raises ``OSError`` (``ELOOP``) where a component is a symlink, ``.`` or ``..``.
    """
    parts = path.split("/")[1:] if path.startswith("/") else None
    if parts is None or any(part in (".", "..") for part in parts):
        raise OSError(errno.ELOOP, "not an absolute path free of . and ..", path)
    parts = [part for part in parts if part]
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if last else os.O_DIRECTORY)
            try:
                child = os.open(part, flags, dir_fd=fd)
            except NotADirectoryError:
                # O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR.
                raise OSError(
                    errno.ELOOP, "a component is a symlink or no directory", path
                ) from None
            os.close(fd)
            fd = child
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, "it is a symlink", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _add_path_rule(ruleset_fd: int, rule: PathRule, handled: FsAccess) -> bool:
    """Add ``rule``; False where a ``nofollow`` rule's path could not be opened so."""
    try:
        if rule.nofollow:
            # The last check of a path a worker could have swapped for a link:
            # the rule binds to what this fd names, not to the path.
            fd = open_nofollow(rule.path)
        else:
            fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        if rule.nofollow:
            return False
        if exc.errno == errno.ENOENT:
            # Gone since the rules were drawn (a sibling in /tmp): nothing to grant.
            return True
        raise LandlockError(
            exc.errno, f"cannot open {rule.path} for a rule: {exc.strerror}"
        ) from exc
    try:
        access = int(rule.access) & int(handled)
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            # A rule on a file may only carry file rights (else EINVAL).
            access &= int(FILE_ACCESS)
        if not access:
            return True
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        if _syscall(_SYS_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0) < 0:
            raise _fail(f"landlock_add_rule({rule.path})")
        return True
    finally:
        os.close(fd)


def restrict_self(ruleset: Ruleset, *, thread_only: bool = False) -> tuple[str, ...]:
    """Restrict this thread and everything it starts from now on; irreversible.

    Returns the paths of ``nofollow`` rules left out (a symlink met, or the
    path gone). The caller cuts the ruleset down to what the kernel's ABI knows (see the
    ``*_for_abi`` functions). Sets ``no_new_privs`` first, as Landlock requires
    of an unprivileged process (setuid binaries then run without privileges).
    A process must have one thread, since the others would stay free, unless
    ``thread_only`` says that confining this thread alone is the point (and
    that it ends when its confined work does: both stay its own).
    """
    threads = thread_count()
    if threads != 1 and not thread_only:
        raise LandlockError(
            errno.EBUSY,
            f"this process has {threads} threads; Landlock would restrict only the calling one",
        )
    attr = _RulesetAttr(
        handled_access_fs=int(ruleset.handled_fs),
        handled_access_net=int(ruleset.handled_net),
        scoped=int(ruleset.scoped),
    )
    ruleset_fd = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset_fd < 0:
        raise _fail("landlock_create_ruleset")
    left_out: list[str] = []
    try:
        for rule in ruleset.paths:
            if not _add_path_rule(ruleset_fd, rule, ruleset.handled_fs):
                left_out.append(rule.path)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
        if _syscall(_SYS_RESTRICT_SELF, ruleset_fd, 0) < 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset_fd)
    return tuple(left_out)
