"""Putting a worker into its sandbox: a ``SandboxPolicy`` in, a ``SandboxReport`` out.

Runs in the worker after fork (or exec), after its rlimits and before
``hello``, while the process has one thread. What it sets up then covers the
worker and everything it starts: Bash, its children, the file tools' threads.
In order, because each step needs what the next one takes away:

1. **Mounts** (``_mounts``): subvisor's home and the cgroup filesystem
   hidden, every block device node covered (as root), every ``.git`` in a
   writable root read-only, and an empty
   read-only ``ROOT/.git`` where a root has none (S-SEC-1, S-SEC-3). A
   zygote worker finds the namespace made by its zygote; an exec'd one
   makes it here. Then the worker's own IPC namespace, never shared (S-SEC-4,
   S-SEC-5): its SysV shared memory and message queues end with its tree.
   Then a procfs of its own over ``/proc`` with ``hidepid=ptraceable``, in a
   mount namespace of its own (S-SEC-1): other processes, whose command lines
   hold MCP servers' tokens and other sessions' prompts, do not show.
   Last, in ``read-only`` and ``workspace-write``, every mount of that
   namespace read-only but the paths Landlock lets it write, each mount below
   those keeping the flag it had (``read_only_except``, S-SBX-1): Landlock has
   no right for ``chmod``, ``utimensat`` or ``setxattr``, which a read-only
   mount refuses. After every write of the worker's own setup outside those
   paths (its cgroups and ``oom_score_adj``, in ``_runtime``, come earlier).
2. **Landlock** (S-SBX-1), in every mode, since a Landlock domain also bars
   ptrace and ``/proc/PID/{environ,mem}`` of every process outside it:

   =================  ========================================================
   mode               rules (everything else the ABI knows is handled, so denied)
   =================  ========================================================
   read-only          read+execute ``/`` but ``/dev`` and the ``agent-memory``
                      kept in a hidden home, list all of ``/``; read
                      ``READABLE_DEVICES`` (``/dev/null``, ``/dev/urandom``
                      & co., no terminal); all rights under
                      ``writable_roots``, ``memory_dir`` (the one memory
                      dir it reads) and ``temp_dir``; write+truncate on
                      ``/dev/null`` & co.
   workspace-write    the same; ``writable_roots`` holds the project dir too
   full               all rights everywhere but ``KERNEL_PATHS`` and subvisor's
                      own code, which it may only read
   network deny       TCP bind and connect handled, no port allowed
   =================  ========================================================

   Scopes (ABI >= 6) in every mode: signals (no signal to a process outside
   the worker's tree) and abstract UNIX sockets (no connect to the
   supervisor's control channel). Where step 1 could not be done, the rules
   carve the hidden paths and ``.git`` out instead: a grant on each sibling
   along the path rather than on the parent (Landlock only grants). That
   costs a little: the parent of subvisor's home cannot be listed, entries
   created in it later are unreachable, and nothing new can be created
   directly in a project's top directory. The read grant, which always
   carves ``/dev`` and a hidden home's ``agent-memory``, pays that price
   along their paths (the listing grant does not): a file made after the
   worker started in ``/``, or in a directory above subvisor's home (``~``),
   can be listed but not read.
   ``memory_dir`` is granted only as reached from ``/`` with no symlink
   (``PathRule.nofollow``): a subagent that swapped a component for a link
   since the supervisor checked it gets no grant there, and the report says so.
3. **Privileges** (``_privileges``): every capability dropped, bounding set
   included; ``no_new_privs``.
4. **Seccomp** (``_seccomp``), in every mode, after any user namespace step 1
   needed: no ``prlimit`` or scheduling change on another process (S-SEC-2),
   no user namespace (S-SEC-7), no kernel keyring (S-SEC-1, S-SEC-2); in
   ``read-only`` and ``workspace-write``, whatever the network, no UNIX socket
   but socketpairs unless the user allowed them (``allow_unix_sockets``):
   Landlock does not check ``connect`` on a socket file, so Docker's socket,
   the D-Bus buses or an ssh-agent were in reach (S-SBX-1, S-SEC-1), and no
   inotify instance or file lease, which reach past the tree (S-SEC-2); under
   network deny no socket but TCP and local ones (UDP, ICMP, MPTCP and SCTP
   escape Landlock's TCP rules); with a file-size cap no space reserved past a
   file's end (S-SEC-4).

Where the kernel falls short, ``on_unsupported="error"`` applies nothing and
reports why (the supervisor then refuses the launch); ``"warn"`` applies the
parts it can and reports the rest as not enforced (S-SBX-2).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable

from protocol import NETWORK_ABI, SandboxPolicy, SandboxReport

from . import _landlock, _mounts, _seccomp
from ._landlock import FsAccess, LandlockError, NetAccess, PathRule, Ruleset, Scope
from ._privileges import drop_privileges
from ._subtree import scope_signals_to_tree
from .tools._process import scope_command_signals

__all__ = [
    "CGROUP_FS",
    "DEVICE_FILES",
    "KERNEL_PATHS",
    "apply_sandbox",
    "isolate_mounts",
    "landlock_abi",
]

#: Char devices shells write to (``cmd > /dev/null``); writing them changes nothing.
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full")
#: The only device nodes a restricted worker may read: the rest of ``DEV``
#: is out of its read grant. A terminal (``/dev/pts/N``, ``/dev/tty*``) would
#: give it the user's keystrokes, a password typed anywhere, and a console's
#: ``/dev/vcs*`` the screen (for uid 0 the kernel checks only the owner, and a
#: user-run subvisor owns the user's terminals). An allowlist also covers a
#: terminal opened after the worker started. ``/dev/stdin`` and ``/dev/fd``
#: lead to ``/proc/self/fd``, granted as ``/proc`` is: a pipe reopened there
#: is no file Landlock checks, a terminal is checked where it lives.
READABLE_DEVICES = (*DEVICE_FILES, "/dev/random", "/dev/urandom")
#: Where device nodes live.
DEV = "/dev"
#: Where cgroups are mounted: a uid-0 worker could leave its cgroup through it.
CGROUP_FS = "/sys/fs/cgroup"
#: Read-only to every worker, ``full`` too: for uid 0 the kernel checks only the
#: owner of a sysctl, so a worker without a capability could still set
#: ``kernel.core_pattern`` to a program the kernel then runs as root with every
#: capability, outside the worker's tree (and reboot through ``sysrq-trigger``,
#: or raise the supervisor's ``oom_score_adj`` and renice its ``autogroup``).
KERNEL_PATHS = ("/proc", "/sys")
#: Kept visible inside a hidden home: profiles' ``memory: user`` dirs (S-PROF-8).
#: Only the mounts keep them: a restricted worker's rules leave them out of its
#: read grant and grant its own ``memory_dir`` alone, so no subagent reads
#: another profile's cross-project memory.
HOME_KEEP = ("agent-memory",)

_DEVICE_ACCESS = FsAccess.READ_FILE | FsAccess.WRITE_FILE | FsAccess.TRUNCATE


def landlock_abi(ceiling: int | None = None) -> int:
    """The kernel's Landlock ABI, capped at ``ceiling`` (the test seam)."""
    abi = _landlock.abi_version()
    return abi if ceiling is None else min(abi, ceiling)


def isolate_mounts(
    hidden: Iterable[str], read_only: Iterable[str] = (), absent: Iterable[str] = ()
) -> list[str]:
    """Enter (or keep) a private mount namespace hiding ``hidden`` and ``CGROUP_FS``.

    ``read_only`` paths are bound read-only; ``absent`` ones become empty
    read-only directories, so nothing can be created there. Returns what
    could not be done, one line each; empty when all holds.
    """
    namespace = _mounts.CURRENT
    if not namespace.enter():
        return [f"no private mount namespace: {namespace.error}"]
    problems = namespace.hide(hidden, keep=HOME_KEEP)
    if os.path.isdir(CGROUP_FS):
        problems += namespace.hide([CGROUP_FS])
    if os.geteuid() == 0:
        problems += namespace.cover_block_devices()
    problems += namespace.make_read_only(read_only)
    problems += namespace.block_creation(absent)
    return problems


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


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def rules_excluding(
    root: str, excluded: Iterable[str], access: FsAccess, *, nofollow: bool = False
) -> list[PathRule]:
    """Rules granting ``access`` beneath ``root`` except beneath each ``excluded`` path.

    Landlock rules only grant, and a grant covers a whole tree; so where an
    excluded path lies below ``root``, grant each sibling along the way
    instead. Symlinks are skipped: what they point to is covered where it is.
    ``nofollow`` goes to every rule (``PathRule.nofollow``).
    """
    excluded = [e for e in excluded if _inside(e, root)]
    if not excluded:
        return [PathRule(root, access, nofollow)]
    if root in excluded:
        return []
    rules: list[PathRule] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        if entry.is_symlink():
            continue
        rules.extend(rules_excluding(entry.path, excluded, access, nofollow=nofollow))
    return rules


def _unread(policy: SandboxPolicy, carve: list[str]) -> list[str]:
    """What a restricted worker may not read: ``carve``, ``DEV``, other profiles' memory."""
    kept_in_home = [
        os.path.join(h, k)
        for h in policy.hidden_paths
        for k in HOME_KEEP
        if os.path.lexists(os.path.join(h, k))
    ]
    return [*carve, DEV, *kept_in_home]


def _writable(policy: SandboxPolicy) -> tuple[tuple[str, ...], str | None]:
    """The paths a restricted worker may write, and of them the one granted only with no symlink."""
    roots = (*policy.writable_roots, *([policy.temp_dir] if policy.temp_dir else []))
    memory = policy.memory_dir if policy.memory_dir not in roots else None
    return (*dict.fromkeys(roots), *([memory] if memory else [])), memory


def _read_only_view(policy: SandboxPolicy, carve: list[str]) -> str:
    """Every mount read-only but the paths ``policy`` lets the worker write; why not, or ``""``.

    The same paths Landlock grants write on (``_ruleset``), and below them the
    same left out: what it cannot read, and the kernel's settings.
    """
    writable, memory = _writable(policy)
    kept = [*_unread(policy, carve), *KERNEL_PATHS]
    return _mounts.read_only_except(writable, nofollow=[memory] if memory else [], kept=kept)


def _ruleset(policy: SandboxPolicy, abi: int, carve: list[str]) -> tuple[Ruleset, tuple[str, ...]]:
    """The ruleset for ``policy`` at ``abi``, and the paths it leaves writable.

    ``carve`` lists paths the mounts could not hide or make read-only: the
    rules leave them out of every grant.
    """
    fs = policy.restricts_filesystem and abi >= 1
    net = policy.restricts_network and abi >= NETWORK_ABI
    all_fs = _landlock.fs_access_for_abi(abi)
    scopes = _landlock.scopes_for_abi(abi)
    writable, memory = _writable(policy) if fs else ((), None)
    paths: list[PathRule] = []
    handled_fs = FsAccess(0)
    if fs:
        handled_fs = all_fs
        # Read everything but devices and the memory of other profiles (kept
        # in a hidden home); list everything, as before, but what is carved.
        unread = _unread(policy, carve)
        paths.extend(rules_excluding("/", unread, _landlock.READ_ACCESS))
        paths.extend(rules_excluding("/", carve, FsAccess.READ_DIR))
        paths.extend(
            PathRule(dev, FsAccess.READ_FILE) for dev in READABLE_DEVICES if os.path.exists(dev)
        )
        for root in writable:
            # A root of "/" would otherwise grant the kernel's settings too.
            kept = [*unread, *KERNEL_PATHS]
            paths.extend(rules_excluding(root, kept, all_fs, nofollow=root == memory))
        paths.extend(PathRule(dev, _DEVICE_ACCESS) for dev in DEVICE_FILES if os.path.exists(dev))
    elif abi >= 1:
        # full: every right everywhere, less what must stay out of reach:
        # hidden paths not at all, the kernel's and the rest read-only.
        handled_fs = all_fs
        paths.extend(rules_excluding("/", [*carve, *KERNEL_PATHS], all_fs))
        hidden = set(policy.hidden_paths)
        paths.extend(PathRule(c, _landlock.READ_ACCESS) for c in KERNEL_PATHS if os.path.isdir(c))
        paths.extend(
            PathRule(c, _landlock.READ_ACCESS)
            for c in carve
            if c not in hidden and not any(_inside(c, k) for k in KERNEL_PATHS)
        )
    ruleset = Ruleset(
        handled_fs=handled_fs,
        handled_net=_landlock.net_access_for_abi(abi) if net else NetAccess(0),
        scoped=scopes,
        paths=paths,
    )
    return ruleset, writable


def _scope_names(scoped: Scope) -> tuple[str, ...]:
    names = {Scope.SIGNAL: "signal", Scope.ABSTRACT_UNIX_SOCKET: "abstract-unix-socket"}
    return tuple(name for flag, name in names.items() if flag in scoped)


def _isolate(policy: SandboxPolicy) -> tuple[list[str], list[str], list[str]]:
    """Mounts for ``policy``: (hidden by them, read-only by them, what Landlock must carve)."""
    vcs: list[str] = []
    absent: list[str] = []
    # No .git is read-only in full, the user's explicit choice; subvisor's own
    # code (``read_only_paths``) is in every mode: gateway processes load it.
    if policy.protect_vcs and policy.mode != "full":
        vcs = _mounts.vcs_dirs(policy.writable_dirs)
        absent = _mounts.missing_vcs_dirs(policy.writable_roots)
    vcs = [*(p for p in policy.read_only_paths if os.path.lexists(p)), *vcs]
    absent += policy.uncreatable_paths
    isolate_mounts(policy.hidden_paths, vcs, absent)
    namespace = _mounts.CURRENT
    # Where a directory on the way to a user-level path could not be pinned,
    # renaming it would take the bind along: Landlock's carve holds them all.
    unpinned = bool(namespace.pin(policy.pinned_paths)) if namespace.entered else False
    hidden = [p for p in policy.hidden_paths if p in namespace.hidden]
    vcs += absent
    read_only = [p for p in vcs if p in namespace.read_only]
    if unpinned:
        read_only = [p for p in read_only if p not in policy.uncreatable_paths]
        read_only = [p for p in read_only if p not in policy.read_only_paths]
    carve = [p for p in (*policy.hidden_paths, *vcs) if p not in hidden and p not in read_only]
    if CGROUP_FS not in namespace.hidden:
        carve.append(CGROUP_FS)
    return hidden, read_only, carve


def apply_sandbox(policy: SandboxPolicy | None, *, file_size_cap: bool = False) -> SandboxReport:
    """Confine this process as ``policy`` says; report what is in force (never more).

    ``file_size_cap``: an ``RLIMIT_FSIZE`` is set, so reserving space past a
    file's end, which it does not count, is refused too.
    """
    policy = policy or SandboxPolicy()
    if policy.temp_dir is not None:
        _use_temp_dir(policy.temp_dir)
    abi = landlock_abi(policy.landlock_abi_max)
    report = SandboxReport(
        mode=policy.mode, network=policy.network, abi=abi, temp_dir=policy.temp_dir
    )
    missing = _missing(policy, abi)
    if missing and policy.on_unsupported == "error":
        # Refused: the supervisor kills it unheard. Shed privilege all the same.
        dropped = drop_privileges().all_dropped
        return report.model_copy(
            update={"reason": "; ".join(missing), "privileges_dropped": dropped}
        )
    hidden, read_only, carve = _isolate(policy)
    if os.geteuid() == 0 and not _mounts.CURRENT.devices_covered:
        missing.append(
            "block devices are not covered, so this uid-0 worker could read a raw disk "
            f"(no private mount namespace: {_mounts.CURRENT.error or 'a bind failed'})"
        )
    how = [_mounts.CURRENT.how] if hidden or read_only else []
    # After the mounts: where a user namespace was needed, this is where the
    # capability to unshare is (and before the privilege drop takes it).
    if policy.temp_dir is not None and policy.restricts_filesystem:
        temp_error = _mounts.isolate_temp_dir(policy.temp_dir)
        if temp_error:
            missing.append(f"other workers' temp dirs are not hidden: {temp_error}")
        else:
            hidden += [covered for covered, _ in _mounts.temp_dir_covers(policy.temp_dir)]
    ipc_error = _mounts.enter_ipc_namespace()
    if ipc_error:
        missing.append(f"no IPC namespace of its own: {ipc_error}")
    # Its own procfs, in a mount namespace of its own: no other process's
    # command line (an MCP server's token, another session's prompt) shows.
    proc_error = _mounts.private_proc()
    if proc_error:
        missing.append(f"other processes' command lines are visible in /proc: {proc_error}")
    # Before Landlock, which forbids mounting; after every write of the
    # worker's own setup outside its writable paths (procfs, cgroups).
    metadata_error = _read_only_view(policy, carve) if policy.restricts_filesystem else ""
    if metadata_error:
        missing.append(
            "files outside its writable paths can have their mode, times and xattrs changed "
            f"(chmod, touch, setfattr): {metadata_error}"
        )
    domain = False
    if abi >= 1:
        ruleset, writable = _ruleset(policy, abi, carve)
        try:
            left_out = _landlock.restrict_self(ruleset)
        except LandlockError as exc:
            missing.append(f"Landlock could not be applied: {exc}")
        else:
            domain = True
            if ruleset.scoped & Scope.SIGNAL:
                scope_signals_to_tree()
                scope_command_signals()
            if left_out:
                # Less granted than asked, never more: enforced, and said here.
                writable = tuple(w for w in writable if w != policy.memory_dir)
                missing.append(
                    f"memory dir {policy.memory_dir} not writable: a symlink on its path, or gone"
                )
            carved = [p for p in carve if p != CGROUP_FS]
            if not policy.restricts_filesystem:
                carved += [p for p in KERNEL_PATHS if os.path.isdir(p)]
            hidden += [p for p in carved if p in policy.hidden_paths]
            read_only += [p for p in carved if p not in policy.hidden_paths]
            how += ["landlock"] if carved else []
            report = report.model_copy(
                update={
                    "filesystem": bool(ruleset.handled_fs) and policy.restricts_filesystem,
                    "network_denied": bool(ruleset.handled_net),
                    "writable": list(writable),
                    "scopes": list(_scope_names(ruleset.scoped)),
                }
            )
    unhidden = [p for p in policy.hidden_paths if p not in hidden]
    if unhidden:
        missing.append(
            f"cannot hide {', '.join(unhidden)} (no private mount namespace: "
            f"{_mounts.CURRENT.error or 'not tried'}; no Landlock)"
        )
    privileges = drop_privileges()
    filter_error = _seccomp.install(
        deny_network=policy.restricts_network,
        deny_unix_sockets=policy.restricts_unix_sockets,
        deny_shared_objects=policy.restricts_filesystem,
        cap_reserved_space=file_size_cap,
    )
    if filter_error:
        missing.append(f"no seccomp filter: {filter_error}")
    return report.model_copy(
        update={
            # Landlock alone lets MPTCP and SCTP connect out.
            "network_denied": report.network_denied and not filter_error,
            "ipc_namespace": not ipc_error,
            "processes_hidden": not proc_error,
            "metadata_read_only": policy.restricts_filesystem and not metadata_error,
            "syscall_filter": not filter_error,
            "reserved_space_capped": file_size_cap and not filter_error,
            "unix_sockets_blocked": policy.restricts_unix_sockets and not filter_error,
            "hidden": hidden,
            "read_only": read_only,
            "isolation": "+".join(how),
            "landlock_domain": domain,
            "privileges_dropped": privileges.all_dropped,
            "reason": "; ".join(missing),
        }
    )
