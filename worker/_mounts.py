"""A private mount namespace that hides subvisor's home and keeps ``.git`` read-only.

Invariants: ``read_only_except`` runs only in a mount namespace this process
unshared itself (``_own_namespace_of``): in the one a zygote's workers share it
would reach every sibling and the zygote. It clears a mount's read-only flag
only where that mount lacked it before.

Also each worker's own IPC namespace (``enter_ipc_namespace``), and its own
mount namespace where it has a temp dir, in which the other workers' temp
dirs are hidden (``isolate_temp_dir``).

Landlock only grants, so it cannot carve "everything but ``$SUBVISOR_HOME``"
or "the project but not its ``.git``" out of a grant. A mount namespace can:

- an empty, read-only tmpfs over each hidden path (subvisor's home: config,
  database, sockets, every session's output; and the cgroup filesystem, so
  that a worker that is uid 0 cannot move itself out of its cgroup or raise
  its own limits);
- a read-only bind mount of each protected path over itself (every
  ``.git``, ``.hg`` and ``.jj`` a bounded walk finds in a writable root,
  whose hooks and config run outside any sandbox at the user's next git,
  hg or jj command there; and the user-level files and dirs subvisor trusts
  more than a project's, where they resolve into a writable root);
- a plain bind of a directory over itself (``pin``), so that it cannot be
  renamed or removed: each directory between a writable root and such a
  user-level path, which would otherwise take the read-only mount with it
  and leave a fresh directory for the user's path to resolve to;
- where a writable root has no ``.git``, an empty directory made there and
  bound read-only over itself (``block_creation``), so that no repository
  can be planted at the root for the user's git to find first (likewise a
  user-level dir that is missing where a worker could make it).

Not covered here: a ``.git`` deeper than ``VCS_WALK_DEPTH`` or past the
walk's ``VCS_WALK_ENTRIES``, and a repository a worker makes below its root
(``git init sub``). The supervisor disarms those once the worker's tree has
ended (``supervisor.kernel._planted_repos``); it disarms ``.git`` only, so a
``.hg`` or ``.jj`` planted where none was is not (``VCS_PLACEHOLDERS``).

Whoever holds ``CAP_SYS_ADMIN`` (root, also in most containers) unshares the
mount namespace alone; anyone else first enters a new user namespace that
maps only their own uid and gid, where they may mount (where the kernel
allows unprivileged user namespaces). Mounts are made slaves of the host's:
the host's later mounts still reach the worker, ours never reach the host.
Nothing here can be undone by a worker: unmounting needs ``CAP_SYS_ADMIN``,
which every worker drops (``_privileges``) before it runs anything.

The zygote isolates itself once at start, so every worker it forks shares
that namespace and a spawn pays nothing; it adds a ``.git`` bind the first
time a spawn names its root. An exec'd worker isolates itself.

The IPC namespace is the worker's alone, never its zygote's: SysV shared
memory, semaphores and POSIX message queues left by its tree go with the
namespace when the tree's last process ends (S-SEC-4, S-SEC-5), and no
worker sees another's. It needs ``CAP_SYS_ADMIN`` where the worker is: root,
or the user namespace ``enter`` made (the zygote's, inherited by fork).

Each worker also mounts a procfs of its own over ``/proc`` in a mount
namespace of its own (``private_proc``), with ``hidepid=ptraceable``: a
process appears there only to those that may ptrace-read it, which for a
worker (no capability, in a Landlock domain, beside non-dumpable workers,
zygote and supervisor) is its own tree and nothing else (S-SEC-1). The
host's ``/proc`` shows every process's command line to anyone: a stdio MCP
server's token in its arguments, another session's prompt. It needs
``CAP_SYS_ADMIN`` in the user namespace that owns the PID namespace, so it
is not made where a worker had to enter a user namespace of its own.

Last, in that same namespace of its own, a restricted worker makes every
mount read-only but the paths it may write (``read_only_except``): Landlock
has no right for a file's metadata, so without it a read-only worker could
``chmod``, ``touch -d`` or ``setfattr`` any file it owns (as uid 0, every
root-owned one). Each writable path is bound over itself and given back its
flag, and each mount below it the flag it had: a ``.git`` bind stays
read-only, a ``pin`` writable. Needs ``mount_setattr`` (Linux >= 5.12). That
namespace's mounts are made private first: a mount the host makes later would
arrive as the host made it (writable), so none arrives.

Invariant: ``unshare`` runs while the process has one thread (the kernel
refuses ``CLONE_NEWUSER``, and ``CLONE_NEWNS`` implies an unshared fs).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from protocol import TEMP_SHARED_PREFIX

from ._landlock import open_nofollow
from ._privileges import status_caps

__all__ = [
    "CURRENT",
    "DEVICE_DIRS",
    "VCS_NAMES",
    "VCS_PLACEHOLDERS",
    "VCS_WALK_DEPTH",
    "VCS_WALK_ENTRIES",
    "MountNamespace",
    "enter_ipc_namespace",
    "isolate_temp_dir",
    "missing_vcs_dirs",
    "private_proc",
    "read_only_except",
    "temp_dir_covers",
    "vcs_dirs",
]

#: Where block device nodes live: each is covered by ``/dev/null`` (``cover_block_devices``).
DEVICE_DIRS = ("/dev", "/dev/mapper")

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MS_SLAVE = 0x80000
_MNT_DETACH = 0x2
_CAP_SYS_ADMIN = 21
#: mount_setattr(2): one number on every architecture but alpha (the unified table, 5.12+).
_SYS_MOUNT_SETATTR = 442
_AT_EMPTY_PATH = 0x1000
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_O_PATH = os.O_PATH | os.O_CLOEXEC
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
#: Version-control metadata whose contents run code later: git's hooks and
#: config (``core.fsmonitor``...), Mercurial's ``.hg/hgrc`` (``[hooks]``,
#: ``[extensions]``), Jujutsu's ``.jj/repo/config.toml`` (pager, diff and
#: merge tools). Not ``.svn`` (Subversion runs nothing a working copy names).
VCS_NAMES = (".git", ".hg", ".jj")
#: Of ``VCS_NAMES``, made an empty read-only placeholder where a writable root
#: has none (``missing_vcs_dirs``). Only ``.git``: an empty ``.hg`` or ``.jj``
#: is a broken repository to hg and jj, not an absent one.
VCS_PLACEHOLDERS = (".git",)
#: How deep below a writable root ``vcs_dirs`` looks for ``.git`` (1: in the
#: root's own subdirectories), and how many directory entries it reads per
#: root at most. Breadth first, so a bound cuts the deepest first; a ``.git``
#: beyond it is not protected. Large trees (``node_modules``) stay cheap.
VCS_WALK_DEPTH = 4
VCS_WALK_ENTRIES = 20_000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _errno_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    if (
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        )
        != 0
    ):
        raise _errno_error(f"mount {target}")


def _enter_user_namespace() -> None:
    """Enter a new user and mount namespace that maps our uid and gid to themselves.

    The process must still be dumpable: ``/proc/self/uid_map`` of a
    non-dumpable one belongs to root.
    """
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        raise _errno_error("unshare(CLONE_NEWUSER|CLONE_NEWNS)")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _probe(step: Callable[[], None]) -> None:
    """Run ``step`` in a throwaway child; raise ``OSError`` with its error if it fails there."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        try:
            os.close(read_fd)
            step()
            os.write(write_fd, b"ok")
        except BaseException as exc:
            os.write(write_fd, str(exc).encode()[:500])
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        said = f.read()
    os.waitpid(pid, 0)
    if said != b"ok":
        raise OSError(said.decode(errors="replace") or "the probe died")


def _has_sys_admin() -> bool:
    return bool(status_caps().get("CapEff", 0) & (1 << _CAP_SYS_ADMIN))


def _locked_flags(path: str) -> int:
    """The nosuid/nodev/noexec flags of the mount holding ``path`` (kept on a remount)."""
    flags = os.statvfs(path).f_flag
    return (
        (_MS_NOSUID if flags & os.ST_NOSUID else 0)
        | (_MS_NODEV if flags & os.ST_NODEV else 0)
        | (_MS_NOEXEC if flags & os.ST_NOEXEC else 0)
    )


_HIDDEN_SOURCE = "subvisor-hidden"


def _read_only(path: str) -> bool:
    """True if ``path`` lies on a read-only mount (a bind we or a sibling made, or the host's)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _fd_read_only(fd: int) -> bool:
    return bool(os.fstatvfs(fd).f_flag & os.ST_RDONLY)


def _mount_table() -> dict[str, bool]:
    """Each mount point of this namespace, and whether the mount there is read-only.

    From ``/proc/self/mountinfo``, unescaped; the mount's own flag (not its
    filesystem's). Where mounts are stacked on one point, the last listed
    (the top one, which paths reach) wins.
    """
    try:
        with open("/proc/self/mountinfo") as f:
            fields = [line.split() for line in f]
    except OSError:
        return {}
    unescape = re.compile(r"\\([0-7]{3})")
    return {
        unescape.sub(lambda m: chr(int(m.group(1), 8)), entry[4]): "ro" in entry[5].split(",")
        for entry in fields
        if len(entry) > 5
    }


def _mount_points() -> set[str]:
    """Where a mount sits in this mount namespace."""
    return set(_mount_table())


def _hidden_here(path: str) -> bool:
    """True if our tmpfs already covers ``path`` in this mount namespace.

    Workers forked by one zygote share its mount namespace, and each has a
    copy of ``CURRENT`` from before its siblings' mounts: asking the kernel
    keeps them from stacking one mount per spawn.
    """
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                if fields[4] == path and _HIDDEN_SOURCE in fields[fields.index("-") + 2 :]:
                    return True
    except (OSError, ValueError, IndexError):
        return False
    return False


def vcs_dirs(roots: Iterable[str]) -> list[str]:
    """Every ``VCS_NAMES`` entry in ``roots`` (a ``.git`` dir, or a worktree's file...).

    A breadth-first walk of each root, at most ``VCS_WALK_DEPTH`` levels down
    and ``VCS_WALK_ENTRIES`` entries read; symlinks are neither returned nor
    followed (what they point to is covered where it is, if it is).
    """
    found: list[str] = []
    for root in roots:
        level, budget = [root], VCS_WALK_ENTRIES
        for depth in range(VCS_WALK_DEPTH + 1):
            below: list[str] = []
            for directory in level:
                try:
                    with os.scandir(directory) as entries:
                        for entry in entries:
                            budget -= 1
                            if budget < 0:
                                break
                            if entry.is_symlink():
                                continue
                            if entry.name in VCS_NAMES:
                                found.append(entry.path)
                            elif depth < VCS_WALK_DEPTH and entry.is_dir(follow_symlinks=False):
                                below.append(entry.path)
                except OSError:
                    continue
                if budget < 0:
                    break
            level = below
    return found


def missing_vcs_dirs(roots: Iterable[str]) -> list[str]:
    """``ROOT/.git`` of each root that has none (nor a symlink by that name)."""
    return [
        os.path.join(root, name)
        for root in roots
        for name in VCS_PLACEHOLDERS
        if not os.path.lexists(os.path.join(root, name))
    ]


#: The pid that last unshared its mount namespace: equal to ours, the namespace
#: is this process's (and its descendants') alone, not its zygote's and siblings'.
_own_namespace_of = 0


def _unshare_mount_namespace() -> str:
    """Take a mount namespace of this process's own; why not, or ``""``."""
    global _own_namespace_of
    if _libc.unshare(_CLONE_NEWNS) != 0:
        return str(_errno_error("unshare(CLONE_NEWNS)"))
    _own_namespace_of = os.getpid()
    return ""


def temp_dir_covers(path: str) -> list[tuple[str, str]]:
    """What ``isolate_temp_dir`` covers for ``path``: (dir, the entry kept), outer first.

    ``path`` is ``<shared>/<session>/workers/<worker>``: ``<shared>`` is one
    dir per uid holding every session's (``supervisor.kernel._temp_dirs``).
    ``<shared>`` is covered only where its name says it is one
    (``TEMP_SHARED_PREFIX``): a temp dir a caller gave elsewhere (``/tmp/x``)
    has none above it, and its grandparent may be ``/`` or a home.
    """
    parent, name = os.path.split(path.rstrip("/"))
    shared, session = os.path.split(os.path.dirname(parent))
    covers = [(parent, name)]
    if session and os.path.basename(shared).startswith(TEMP_SHARED_PREFIX):
        covers.insert(0, (shared, session))
    return covers


def isolate_temp_dir(path: str) -> str:
    """Leave ``path`` the one temp dir this process reaches; why not, or ``""``.

    Every worker's temp dir sits beside the others, under one parent per
    supervisor, and every supervisor's beside the others of its uid: in the
    namespace a zygote's workers share, a read-only worker could read what
    another wrote in its own, of its session or another (S-SEC-2). So each
    worker takes a mount namespace of its own (it needs ``CAP_SYS_ADMIN``
    where it is, as for its IPC namespace) and covers the uid's dir of every
    session's, then its session's dir of every worker's, each with an empty
    read-only tmpfs that keeps only its own entry, bound back. A tmpfs also
    hides what is made there later (a session that starts after it). A temp
    dir in no such dir of every session's (one a caller gave) gets its
    parent covered alone (``temp_dir_covers``).
    """
    error = _unshare_mount_namespace()
    if error:
        return error
    # Its own record: CURRENT describes the namespace shared with the zygote.
    namespace = MountNamespace(how="mount namespace")
    failed = []
    for directory, kept in temp_dir_covers(path):
        failed += namespace.hide([directory], keep=[kept])
    return "; ".join(failed)


PROC = "/proc"
#: Only what the reader may ptrace-read shows, whatever its groups (``invisible``
#: exempts the mount's ``gid``, root's group by default: a uid-0 worker saw all).
#: Per mount since Linux 5.8, which alone knows ``ptraceable`` (older kernels
#: share one procfs per PID namespace, where the option would reach the host's
#: ``/proc``: they refuse it).
PROC_OPTIONS = "hidepid=ptraceable"


def _mount_points_below(under: str) -> list[str]:
    """The outermost mount points strictly below ``under`` in this namespace."""
    prefix = under.rstrip("/") + "/"
    found = sorted((p for p in _mount_points() if p.startswith(prefix)), key=len)
    return [p for p in found if not any(p.startswith(q + "/") for q in found if q != p)]


def private_proc() -> str:
    """Mount a procfs with ``PROC_OPTIONS`` on ``/proc`` in a new mount namespace; why not, or "".

    The new namespace is this process's own, so what it forks shares it and
    its zygote and siblings keep theirs. Mounts the host made inside
    ``/proc`` (a container's masks over ``/proc/kcore``, a read-only
    ``/proc/sys``) are bound back over the new procfs; where one cannot be,
    the new procfs is taken off again. Same PID namespace: the pids it shows
    are the host's.
    """
    error = _unshare_mount_namespace()
    if error:
        return error
    kept = []
    try:
        for point in _mount_points_below(PROC):
            with contextlib.suppress(OSError):
                kept.append((point, os.open(point, os.O_PATH | os.O_CLOEXEC)))
        try:
            flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
            _mount("proc", PROC, "proc", flags, PROC_OPTIONS)
        except OSError as exc:
            return str(exc)
        try:
            for point, fd in kept:
                _mount(f"/proc/self/fd/{fd}", point, None, _MS_BIND | _MS_REC)
        except OSError as exc:
            _libc.umount2(PROC.encode(), _MNT_DETACH)
            return f"{exc} (the host's mounts inside {PROC} could not be kept)"
    finally:
        for _, fd in kept:
            os.close(fd)
    return ""


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _set_read_only(fd: int, read_only: bool, *, recursive: bool = False) -> None:
    """Set or clear the read-only flag of the mount ``fd`` is the root of (EINVAL if none)."""
    attr = _MountAttr(
        attr_set=_MOUNT_ATTR_RDONLY if read_only else 0,
        attr_clr=0 if read_only else _MOUNT_ATTR_RDONLY,
    )
    flags = _AT_EMPTY_PATH | (_AT_RECURSIVE if recursive else 0)
    args = (ctypes.c_int(fd), b"", ctypes.c_uint(flags), ctypes.byref(attr))
    if _libc.syscall(
        ctypes.c_long(_SYS_MOUNT_SETATTR), *args, ctypes.c_size_t(ctypes.sizeof(attr))
    ):
        raise _errno_error("mount_setattr")


def _set_read_only_at(path: str, read_only: bool, *, recursive: bool = False) -> None:
    """``_set_read_only`` on the mount at ``path``, reached with no symlink on the way."""
    fd = open_nofollow(path)
    try:
        _set_read_only(fd, read_only, recursive=recursive)
    finally:
        os.close(fd)


def _restore(table: dict[str, bool], under: str) -> None:
    """Clear the read-only flag of each mount at or below ``under`` that ``table`` says lacked it.

    A point no path reaches any more (covered by a later mount: ``ENOENT``,
    or no mount's root: ``EINVAL``) stays read-only.
    """
    for point, read_only in table.items():
        if read_only or not _inside(point, under):
            continue
        try:
            _set_read_only_at(point, False)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EINVAL, errno.ELOOP, errno.ENOTDIR):
                raise


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _bind_over_itself(fd: int) -> None:
    """Bind what ``fd`` names over itself, with every mount below it (by fd: no path to swap)."""
    _mount(f"/proc/self/fd/{fd}", f"/proc/self/fd/{fd}", None, _MS_BIND | _MS_REC)


def _give_back(root: str, fd: int, was_read_only: bool, table: dict[str, bool]) -> None:
    """Bind ``root`` (opened as ``fd``) over itself; give it and each mount below its old flag.

    Reached again by path, with no symlink: what ``fd`` names may lie under a
    mount made since, and the bind must be where paths lead. A directory
    swapped in the meantime (by a sibling writing there) is refused.
    """
    for bind in (root not in table, False):
        at = open_nofollow(root)
        try:
            if not os.path.samestat(os.fstat(at), os.fstat(fd)):
                raise OSError(errno.EXDEV, f"{root} was moved while being bound")
            if bind:
                _bind_over_itself(at)
            elif not was_read_only:
                _set_read_only(at, False)
        finally:
            os.close(at)
    _restore({p: ro for p, ro in table.items() if p != root}, root)


def read_only_except(
    writable: Iterable[str], *, nofollow: Iterable[str] = (), kept: Iterable[str] = ()
) -> str:
    """Make every mount read-only but at ``writable``; why not, or ``""``.

    Landlock has no right for a file's metadata: ``chmod``, ``utimensat`` and
    ``setxattr`` of a file the worker owns (as uid 0, every root-owned file)
    pass any ruleset. A read-only mount refuses them all (``EROFS``), and writes
    to device nodes, FIFOs and sockets, which the kernel does not check against
    the mount, still work. In this process's own mount namespace (taken here
    where it has none yet: never its zygote's, shared with its siblings): the
    whole tree read-only (``mount_setattr``, recursive), then each outermost
    writable path that exists bound over itself (its resolved path; one in
    ``nofollow`` only if reached with no symlink, as Landlock grants it) and,
    with each mount below it, given back the flag it had before: our ``.git``
    binds and placeholders stay read-only, ``pin`` binds and a real writable
    filesystem in the project writable. ``kept`` paths below a writable path
    (what Landlock keeps out of its write grant there) are made read-only
    again. Where a step fails, every mount gets back the flag it had.
    """
    if _own_namespace_of != os.getpid():
        error = _unshare_mount_namespace()
        if error:
            return error
    nofollow = set(nofollow)
    opened: dict[str, int] = {}
    try:
        for path in dict.fromkeys(writable):
            try:
                fd = open_nofollow(path) if path in nofollow else os.open(path, _O_PATH)
            except OSError:
                continue  # gone, or a symlink on its way: Landlock grants nothing there
            real = os.readlink(f"/proc/self/fd/{fd}")
            if real in opened:
                os.close(fd)
            else:
                opened[real] = fd
        table = _mount_table()
        # The flag each root's bind gets: that of the mount (or filesystem) holding it now.
        was_read_only = {
            root: table[root] if root in table else _fd_read_only(fd) for root, fd in opened.items()
        }
        # Cut off from the host's later mounts first: one propagated in after
        # this would arrive with the host's flags, writable.
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        whole = os.open("/", _O_PATH)
        try:
            _set_read_only(whole, True, recursive=True)
        finally:
            os.close(whole)
        try:
            outermost = [p for p in opened if not any(q != p and _inside(p, q) for q in opened)]
            for root in outermost:
                _give_back(root, opened[root], was_read_only[root], table)
            kept = [p for p in kept if any(_inside(p, root) for root in outermost)]
            for path in kept:
                try:
                    fd = open_nofollow(path)
                except OSError:
                    continue  # absent, or a symlink: what it leads to is covered where it is
                try:
                    if path not in table:
                        _bind_over_itself(fd)
                finally:
                    os.close(fd)
                _set_read_only_at(path, True, recursive=True)
            # A writable path inside a kept one is granted all the same (as Landlock does).
            for root in opened:
                if root not in outermost and any(_inside(root, k) for k in kept):
                    _give_back(root, opened[root], was_read_only[root], table)
        except OSError as exc:
            # Back as it was: a worker that cannot write its own roots is no
            # safer, and the report says the step is not in force.
            with contextlib.suppress(OSError):
                _restore(table, "/")
            return str(exc)
    except OSError as exc:
        return str(exc)
    finally:
        for fd in opened.values():
            os.close(fd)
    return ""


def enter_ipc_namespace() -> str:
    """Unshare this process's IPC namespace; why not, or ``""`` once it has its own."""
    if _libc.unshare(_CLONE_NEWIPC) != 0:
        return str(_errno_error("unshare(CLONE_NEWIPC)"))
    return ""


@dataclass
class MountNamespace:
    """This process's private mount namespace, once ``enter`` succeeded.

    ``hidden`` and ``read_only`` list what is in force; ``how`` says which
    namespace it took (``mount namespace`` or ``user+mount namespace``);
    ``error`` why there is none.
    """

    how: str = ""
    error: str = ""
    hidden: list[str] = field(default_factory=list)
    read_only: list[str] = field(default_factory=list)
    #: Directories bound over themselves, so that none can be renamed (``pin``).
    pinned: list[str] = field(default_factory=list)
    #: Whether every block device node is covered (``cover_block_devices``).
    devices_covered: bool = False

    @property
    def entered(self) -> bool:
        """True once this process has its own mount namespace."""
        return bool(self.how)

    def enter(self) -> bool:
        """Unshare the mount namespace (in a new user namespace if need be); False on failure."""
        if self.entered:
            return True
        try:
            if _has_sys_admin():
                if _libc.unshare(_CLONE_NEWNS) != 0:
                    raise _errno_error("unshare(CLONE_NEWNS)")
                how = "mount namespace"
            else:
                # Half done (unshared, maps refused) would leave us an unmapped
                # uid that owns nothing: try it in a child first.
                _probe(_enter_user_namespace)
                _enter_user_namespace()
                how = "user+mount namespace"
            _mount(None, "/", None, _MS_REC | _MS_SLAVE)
        except OSError as exc:
            self.error = str(exc)
            return False
        global _own_namespace_of
        _own_namespace_of = os.getpid()
        self.how = how
        return True

    def hide(self, paths: Iterable[str], keep: Iterable[str] = ()) -> list[str]:
        """Cover each existing directory with an empty read-only tmpfs; what failed.

        The subdirectories named in ``keep`` stay visible through it (bound
        back from the real directory, opened before the tmpfs covers it).
        """
        failed = []
        for path in paths:
            if path in self.hidden:
                continue
            if _hidden_here(path):
                # Hidden already, by another worker of the namespace we share.
                self.hidden.append(path)
                continue
            if not os.path.isdir(path):
                if os.path.lexists(path):
                    failed.append(f"{path}: not a directory")
                continue
            kept = []
            try:
                for name in keep:
                    # Made now if missing: once covered, it could not be added.
                    with contextlib.suppress(OSError):
                        os.makedirs(os.path.join(path, name), mode=0o700, exist_ok=True)
                        kept.append((name, os.open(os.path.join(path, name), _O_PATH_DIR)))
                flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
                _mount(_HIDDEN_SOURCE, path, "tmpfs", flags, "size=16k,mode=0711")
                for name, fd in kept:
                    inside = os.path.join(path, name)
                    os.mkdir(inside, 0o711)
                    _mount(f"/proc/self/fd/{fd}", inside, None, _MS_BIND | _MS_REC)
                _mount(None, path, None, _MS_REMOUNT | _MS_RDONLY | flags, "size=16k,mode=0711")
            except OSError as exc:
                failed.append(str(exc))
                continue
            finally:
                for _, fd in kept:
                    os.close(fd)
            self.hidden.append(path)
        return failed

    def cover_block_devices(self) -> list[str]:
        """Bind ``/dev/null`` over every block device node in ``DEVICE_DIRS``; what failed.

        For uid 0 the kernel checks only a disk's owner (root), not a
        capability: a worker could read the raw disk and, from the filesystem
        on it, subvisor's hidden home (its config, with the keys). Landlock's
        read grant on ``/`` covers device nodes too. Once per namespace: a
        zygote does it at start, and what it forks inherits that it is done.
        A disk attached later is not covered.
        """
        if self.devices_covered:
            return []
        failed = []
        for directory in DEVICE_DIRS:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    if not stat.S_ISBLK(entry.stat(follow_symlinks=False).st_mode):
                        continue
                    _mount(os.devnull, entry.path, None, _MS_BIND)
                except OSError as exc:
                    failed.append(f"{entry.path}: {exc}")
        self.devices_covered = not failed
        return failed

    def make_read_only(self, paths: Iterable[str]) -> list[str]:
        """Bind each path read-only over itself; the paths that failed."""
        failed = []
        for path in paths:
            if path in self.read_only:
                continue
            if _read_only(path):
                # Bound by another worker of the namespace we share (or read-only anyway).
                self.read_only.append(path)
                continue
            try:
                _mount(path, path, None, _MS_BIND | _MS_REC)
                _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _locked_flags(path))
            except OSError as exc:
                failed.append(str(exc))
                continue
            self.read_only.append(path)
        return failed

    def pin(self, paths: Iterable[str]) -> list[str]:
        """Bind each directory over itself (recursively, writable as it was); what failed.

        A mount point cannot be renamed or removed (``EBUSY``), whatever the
        rights on its parent: each directory between a writable root and a
        read-only bind keeps its place, so the path the user's files name
        keeps leading to what is bound. Recursive, so that what is bound
        inside stays. Renames into or out of it cross a mount (``EXDEV``:
        ``mv`` copies instead).
        """
        failed = []
        here: set[str] | None = None
        for path in paths:
            if path in self.pinned:
                continue
            if here is None:
                here = _mount_points()
            if path in here:
                # Pinned by another worker of the namespace we share (or a mount anyway).
                self.pinned.append(path)
                continue
            try:
                _mount(path, path, None, _MS_BIND | _MS_REC)
            except OSError as exc:
                failed.append(str(exc))
                continue
            here.add(path)
            self.pinned.append(path)
        return failed

    def block_creation(self, paths: Iterable[str]) -> list[str]:
        """Make each missing path an empty directory bound read-only; the paths that failed.

        The directory is made on the host's filesystem (a bind needs an inode
        to cover) and stays there, empty, after the worker: git skips an
        empty ``.git`` in its search for a repository, as if it were absent.
        The supervisor removes it once no worker of its own is left.
        """
        failed = []
        for path in paths:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                # A sibling's placeholder (bound all the same), or a symlink
                # planted since: git would follow it, so the path is refused.
                if os.path.islink(path):
                    failed.append(f"{path}: a symlink")
                    continue
            except OSError as exc:
                failed.append(f"{path}: {exc.strerror}")
                continue
            failed += self.make_read_only([path])
        return failed


#: This process's namespace: inherited across fork, so a zygote's workers share it.
CURRENT = MountNamespace()
