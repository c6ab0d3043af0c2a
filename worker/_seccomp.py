"""The worker's seccomp filter: what Landlock, rlimits and uid checks leave open.

None of our dependencies binds seccomp (nor does the standard library), so
this module builds the classic-BPF program by hand and installs it with
``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)``. In every worker the filter:

- refuses ``prlimit64`` on any process but the caller (pid 0) with
  ``EPERM`` (S-SEC-2): the kernel asks only for a matching uid, so a
  worker's Bash could lower ``RLIMIT_CPU`` of its supervisor, the zygote or
  another session, and the kernel would SIGKILL it. ``setrlimit`` and
  ``ulimit`` go through ``prlimit64(0, ...)`` and still work;
- likewise refuses, on any process but the caller, ``setpriority`` (and any
  ``which`` but ``PRIO_PROCESS``: ``PRIO_USER`` reaches every process of
  the uid), ``sched_setaffinity``, ``sched_setscheduler``,
  ``sched_setparam``, ``sched_setattr`` and ``ioprio_set``: a user's worker
  could otherwise starve its supervisor (nice 19, ``SCHED_IDLE``, one CPU,
  idle I/O). A thread's own tid is refused too (``pthread_setaffinity_np``);
- refuses creating a user namespace (S-SEC-7): ``clone`` and ``unshare``
  with ``CLONE_NEWUSER`` get ``EPERM``, ``clone3`` gets ``ENOSYS`` (its
  flags lie behind a pointer; glibc then falls back to ``clone``), as
  bubblewrap and Chrome do. In a user namespace of its own a process holds
  every capability there, and with a PID namespace it is pid 1, which hid a
  nested supervisor from the worker-tree check;
- refuses ``io_uring_setup`` with ``ENOSYS``: io_uring ops (its
  ``FALLOCATE``, its ``SOCKET``) bypass the filter, which sees only system calls;
- refuses the kernel keyring, ``add_key``, ``request_key`` and ``keyctl``,
  with ``ENOSYS`` (as Docker's default profile does) (S-SEC-1, S-SEC-2): the
  per-uid keyrings (``@u``, ``@us``) are not namespaced, so a worker read and
  overwrote the keys its user keeps there, and planted keys that outlive its
  run, a channel to the next worker of that uid, of any session;
- refuses a netlink socket of any protocol but ``NETLINK_ROUTE`` and
  ``NETLINK_SOCK_DIAG`` with ``EACCES`` (S-SEC-1, S-SEC-2): the proc
  connector needs no capability to listen, and sends every fork, exec, exit
  (with its status) and ``comm`` change of the machine: a worker watched its
  siblings, other sessions and their supervisors, and two sessions' workers
  talked through ``prctl(PR_SET_NAME)``. i386's ``socketcall`` makes no
  socket at all (see below);
- refuses to send ``SIGSTOP`` (``kill``, ``tkill``, ``tgkill``,
  ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``, ``pidfd_send_signal``, and
  ``fcntl(F_SETSIG)`` for a file's owner) with ``EPERM`` (S-SEC-5): where the
  kernel has no Landlock signal scopes (for each command's own domain,
  ``worker.tools._process``) a command may signal its worker, and a worker
  stopped so cannot end its tree when its zygote and supervisor are SIGKILLed
  together (its parent-death SIGTERM stays pending, then the orphaned
  group's SIGHUP kills it outright), so the tree outlived them all (red
  team Q). The worker ignores the other stop signals
  (``worker._process.end_tree_with_parent``);
- on x86_64, refuses every x32 system call (``ENOSYS``): they share the
  native arch value under other numbers.

In ``read-only`` and ``workspace-write`` (S-SEC-2) it also refuses what
reaches every process of the uid through the kernel's per-uid counts or
another process's file: ``inotify_init`` and ``inotify_init1`` get
``ENOSYS`` (instances are counted per uid for the whole machine, 128 by
default; a read-only worker took them all, and every other process of the
uid, root's services included, got ``EMFILE`` until it ended; tools such as
``tail -f`` fall back to polling), and ``fcntl(F_SETLEASE)`` gets ``EPERM``
(a lease on a file the worker only reads, but owns, as uid 0 owns ``/etc``,
stalls every writer of it for ``lease-break-time``).

Where the worker's file size is capped (S-SEC-4), it also refuses
``fallocate`` with ``EOPNOTSUPP`` (what a filesystem without the mode
answers, so callers fall back) unless its mode is 0 (extend the size, which
``RLIMIT_FSIZE`` counts) or ``PUNCH_HOLE | KEEP_SIZE`` (which only frees
space): ``FALLOC_FL_KEEP_SIZE`` reserves blocks past the end and leaves the
size at 0, so ``fallocate -n -l 200G f`` would fill the disk under any cap.

Where UNIX sockets are denied (``read-only`` and ``workspace-write`` unless
the user allowed them; S-SBX-1, S-SEC-1) it refuses ``socket(AF_UNIX, ...)``
with ``EACCES`` (what ``socket(2)`` documents for a type the caller may not
make, and what the network rule answers): Landlock does not check ``connect``
on a pathname UNIX socket, so a worker reached every socket file it could
name, ``/var/run/docker.sock`` (root on the host), the D-Bus buses, an
ssh-agent, X11. ``socketpair`` is not checked: a pair reaches nothing but
itself, and trio, asyncio and ``subprocess`` make them. A socket received
over one (``SCM_RIGHTS``) could only come from a process of the worker's own
tree, which has the same filter.

Under network deny (S-SBX-1) it refuses ``socket`` with ``EACCES`` (what
Landlock answers a denied TCP connect) for every address family but
``AF_UNIX`` (decided by the rule above), ``AF_NETLINK`` (by the netlink
rule), ``AF_ALG`` and ``AF_INET``/``AF_INET6``, and
for those two every socket but TCP: type ``SOCK_STREAM`` with protocol 0 or
``IPPROTO_TCP``, which Landlock then refuses at connect and bind. Landlock's
network rules match only TCP: MPTCP (``socket(AF_INET, SOCK_STREAM,
IPPROTO_MPTCP)``) connected out while TCP was denied, and SCTP, DCCP, SMC
or ``AF_VSOCK`` would too; UDP (a datagram to any host, or a DNS query that
carries data out through the resolver) and ICMP echo sockets (where
``net.ipv4.ping_group_range`` admits the worker's group) reach the network
with no rule at all. ``SOCK_STREAM`` with protocol 0 is always TCP (the
kernel's permanent entry comes first); ``SOCK_SEQPACKET`` with 0 is SCTP.

The compat ABIs (i386 on x86_64, arm on aarch64) get the same rules under
their own numbers. i386 may also reach sockets through ``socketcall(2)``,
whose arguments lie behind a pointer the filter cannot read; its call
number, a register, can be read. So ``socketcall(SYS_SOCKET)`` is refused
outright (``EACCES``) in every mode, ``full`` with the network and UNIX
sockets allowed included (the netlink rule holds in every mode, and the
family it checks is out of reach there). That costs a 32-bit program every
new socket (glibc's i386 builds still make them through ``socketcall``)
rather than the whole ABI; its other calls (``SYS_SOCKETPAIR``, and those on
sockets it has) only act on what it could already make. arm EABI has no
``socketcall``.

It checks the arch value first, since a system call number means something
else under each ABI: x86_64 (and i386) and aarch64 (and arm) are known; on
any other machine nothing is installed and the caller reports the filter as
not in force. A process of an ABI the filter does not list gets ``ENOSYS``
for every call (none exists on the machines it installs on).

Arguments: ``struct seccomp_data`` holds each as a u64. The arguments
checked here are C ``int``/``pid_t`` (and flag words whose bits we test lie
in the low half), and the kernel's syscall wrappers truncate them to 32
bits; so only the low word (at ``16 + 8 * i`` on these little-endian ABIs)
decides, and only it is compared: a set high word would not change which
process or flags the kernel acts on.

Invariants: a filter applies to the calling thread and what it starts from
then on (threads, children, across ``execve``) and cannot be removed, so it
is installed while the worker has one thread, after any user namespace its
confinement needs; ``no_new_privs`` must already be set (the kernel
requires it of a process without ``CAP_SYS_ADMIN``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from typing import NamedTuple

__all__ = ["MACHINES", "install", "program"]

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# Classic BPF opcodes: load a 32-bit word of ``struct seccomp_data``, mask,
# compare, return.
_LD_ABS_W = 0x00 | 0x00 | 0x20
_AND_K = 0x04 | 0x50 | 0x00
_JEQ_K = 0x05 | 0x10 | 0x00
_JSET_K = 0x05 | 0x40 | 0x00
_RET_K = 0x06 | 0x00
# Offsets in ``struct seccomp_data``: nr, arch, then args[6] as u64 from 16.
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    """Offset of argument ``index``'s low word."""
    return 16 + 8 * index


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_X32_SYSCALL_BIT = 0x40000000
_CLONE_NEWUSER = 0x10000000
_PRIO_PROCESS = 0
_IOPRIO_WHO_PROCESS = 1
_SOCK_TYPE_MASK = 0xF
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK, _AF_ALG = 1, 2, 10, 16, 38
#: Families a socket may have under network deny; AF_INET/6 and AF_NETLINK are
#: checked further.
_LOCAL_FAMILIES = (_AF_UNIX, _AF_ALG)
#: The netlink protocols a worker may open, in every mode: ``NETLINK_ROUTE``
#: (the machine's interfaces and addresses: ``getifaddrs``, ``ip``) and
#: ``NETLINK_SOCK_DIAG`` (its own sockets: ``ss``). Not the proc connector
#: (11), which multicasts every fork, exec, exit and ``comm`` of the machine.
_NETLINK_PROTOCOLS = (0, 4)
_SOCK_STREAM = 1
#: ``socketcall``'s call number for ``socket``.
_SYS_SOCKET = 1
#: With ``SOCK_STREAM``: IPPROTO_IP (the type's default, TCP) and IPPROTO_TCP.
_TCP_PROTOCOLS = (0, 6)
#: Unified across ABIs since Linux 5.1 (the 4xx block).
_IO_URING_SETUP = 425
_PIDFD_SEND_SIGNAL = 424
_CLONE3 = 435
_F_SETLEASE = 1024
_F_SETSIG = 10
#: The same number on every ABI listed.
_SIGSTOP = 19


class _Abi(NamedTuple):
    """System call numbers of one ABI."""

    fallocate: int
    prlimit64: int
    setpriority: int
    sched_setparam: int
    sched_setscheduler: int
    sched_setaffinity: int
    sched_setattr: int
    ioprio_set: int
    unshare: int
    clone: int
    socket: int
    socketcall: int | None
    #: ``add_key``, ``request_key``, ``keyctl``: refused in every worker.
    keyring: tuple[int, int, int]
    #: ``inotify_init`` (aarch64 has none: ``inotify_init1`` twice), ``inotify_init1``.
    inotify: tuple[int, int]
    #: ``fcntl`` (and ``fcntl64`` where there is one).
    fcntl: tuple[int, ...]
    #: ``kill``, ``tkill``, ``rt_sigqueueinfo`` (the signal is argument 1), then
    #: ``tgkill``, ``rt_tgsigqueueinfo`` (argument 2).
    signal_arg1: tuple[int, int, int]
    signal_arg2: tuple[int, int]


#: ``AUDIT_ARCH_*`` of each known ABI, with its numbers.
# fmt: off
_ABIS = {
    # x86_64
    0xC000003E: _Abi(285, 302, 141, 142, 144, 203, 314, 251, 272, 56, 41, None,
                     (248, 249, 250), (253, 294), (72,), (62, 200, 129), (234, 297)),
    # i386
    0x40000003: _Abi(324, 340, 97, 154, 156, 241, 351, 289, 310, 120, 359, 102,
                     (286, 287, 288), (291, 332), (55, 221), (37, 238, 178), (270, 335)),
    # aarch64
    0xC00000B7: _Abi(47, 261, 140, 118, 119, 122, 274, 30, 97, 220, 198, None,
                     (217, 218, 219), (26, 26), (25,), (129, 130, 138), (131, 240)),
    # arm EABI
    0x40000028: _Abi(352, 369, 97, 154, 156, 241, 380, 314, 337, 120, 281, None,
                     (309, 310, 311), (316, 360), (55, 221), (37, 238, 178), (268, 363)),
}
# fmt: on
_X86_64 = 0xC000003E
#: ``os.uname().machine`` values whose ABIs ``_ABIS`` covers.
MACHINES = ("x86_64", "aarch64")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _rules(
    abi: _Abi,
    *,
    deny_network: bool,
    deny_unix_sockets: bool,
    deny_shared_objects: bool,
    cap_reserved_space: bool,
) -> list[tuple[object, ...]]:
    """Dispatch on the loaded system call number of ``abi`` to the shared checks."""
    own_process = (
        abi.prlimit64,
        abi.sched_setparam,
        abi.sched_setscheduler,
        abi.sched_setaffinity,
        abi.sched_setattr,
    )
    asm: list[tuple[object, ...]] = [
        ("jeq", _IO_URING_SETUP, "nosys", None),
        ("jeq", _CLONE3, "nosys", None),
        *(("jeq", nr, "nosys", None) for nr in abi.keyring),
        *(("jeq", nr, "arg0_zero", None) for nr in own_process),
        ("jeq", abi.setpriority, "setpriority", None),
        ("jeq", abi.ioprio_set, "ioprio", None),
        ("jeq", abi.unshare, "newuser", None),
        ("jeq", abi.clone, "newuser", None),
    ]
    if cap_reserved_space:
        asm.append(("jeq", abi.fallocate, "mode", None))
    asm += [("jeq", nr, "signal_arg1", None) for nr in (*abi.signal_arg1, _PIDFD_SEND_SIGNAL)]
    asm += [("jeq", nr, "signal_arg2", None) for nr in abi.signal_arg2]
    asm += [("jeq", nr, "fcntl", None) for nr in abi.fcntl]
    if deny_shared_objects:
        asm += [("jeq", nr, "nosys", None) for nr in abi.inotify]
    asm.append(("jeq", abi.socket, "socket", None))
    if abi.socketcall is not None:
        asm.append(("jeq", abi.socketcall, "socketcall", None))
    asm.append(("ret", _RET_ALLOW))
    return asm


def _socket_checks(*, deny_network: bool, deny_unix_sockets: bool) -> list[tuple[object, ...]]:
    """The check of ``socket``'s family (and type, protocol) that the dispatch jumps to."""
    asm: list[tuple[object, ...]] = [
        ("label", "socket"),
        ("ld", _arg(0)),
        ("jeq", _AF_NETLINK, "netlink", None),
    ]
    if deny_unix_sockets:
        asm.append(("jeq", _AF_UNIX, "eacces", None))
    if not deny_network:
        asm.append(("ret", _RET_ALLOW))
    else:
        asm += [
            *(("jeq", family, "allow", None) for family in _LOCAL_FAMILIES),
            ("jeq", _AF_INET, "inet", None),
            ("jeq", _AF_INET6, "inet", "eacces"),
            ("label", "inet"),  # TCP only: Landlock refuses it at connect and bind
            ("ld", _arg(1)),
            ("and", _SOCK_TYPE_MASK),
            ("jeq", _SOCK_STREAM, None, "eacces"),
            ("ld", _arg(2)),
            *(("jeq", protocol, "allow", None) for protocol in _TCP_PROTOCOLS),
            ("ret", _RET_ERRNO | errno.EACCES),
        ]
    return [
        *asm,
        ("label", "netlink"),
        ("ld", _arg(2)),
        *(("jeq", protocol, "allow", None) for protocol in _NETLINK_PROTOCOLS),
        ("ret", _RET_ERRNO | errno.EACCES),
    ]


def _checks(
    *, deny_network: bool, deny_unix_sockets: bool, deny_shared_objects: bool
) -> list[tuple[object, ...]]:
    """The argument checks the dispatch jumps to, each ending in a return."""
    return [
        ("label", "signal_arg1"),  # kill & co.: never SIGSTOP
        ("ld", _arg(1)),
        ("jeq", _SIGSTOP, "eperm", "allow"),
        ("label", "signal_arg2"),
        ("ld", _arg(2)),
        ("jeq", _SIGSTOP, "eperm", "allow"),
        ("label", "fcntl"),  # no F_SETSIG of SIGSTOP; no F_SETLEASE with shared objects
        ("ld", _arg(1)),
        ("jeq", _F_SETSIG, "setsig", None),
        *([("jeq", _F_SETLEASE, "eperm", None)] if deny_shared_objects else []),
        ("ret", _RET_ALLOW),
        ("label", "setsig"),
        ("ld", _arg(2)),
        ("jeq", _SIGSTOP, "eperm", "allow"),
        ("label", "arg0_zero"),  # prlimit64 & co.: pid 0 (the caller) only
        ("ld", _arg(0)),
        ("jeq", 0, "allow", "eperm"),
        ("label", "setpriority"),  # (PRIO_PROCESS, 0) only
        ("ld", _arg(0)),
        ("jeq", _PRIO_PROCESS, None, "eperm"),
        ("ld", _arg(1)),
        ("jeq", 0, "allow", "eperm"),
        ("label", "ioprio"),  # (IOPRIO_WHO_PROCESS, 0) only
        ("ld", _arg(0)),
        ("jeq", _IOPRIO_WHO_PROCESS, None, "eperm"),
        ("ld", _arg(1)),
        ("jeq", 0, "allow", "eperm"),
        ("label", "newuser"),  # flags are arg 0 of clone on every ABI listed
        ("ld", _arg(0)),
        ("jset", _CLONE_NEWUSER, "eperm", "allow"),
        ("label", "mode"),
        ("ld", _arg(1)),
        ("jeq", 0, "allow", None),
        ("jeq", _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, "allow", None),
        ("ret", _RET_ERRNO | errno.EOPNOTSUPP),
        *_socket_checks(deny_network=deny_network, deny_unix_sockets=deny_unix_sockets),
        ("label", "socketcall"),  # i386: socket()'s family lies behind a pointer
        ("ld", _arg(0)),
        ("jeq", _SYS_SOCKET, "eacces", "allow"),
        ("label", "eacces"),
        ("ret", _RET_ERRNO | errno.EACCES),
        ("label", "eperm"),
        ("ret", _RET_ERRNO | errno.EPERM),
        ("label", "nosys"),
        ("ret", _RET_ERRNO | errno.ENOSYS),
        ("label", "allow"),
        ("ret", _RET_ALLOW),
    ]


def program(
    *,
    deny_network: bool,
    deny_unix_sockets: bool,
    deny_shared_objects: bool,
    cap_reserved_space: bool,
) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k); jumps are relative to the next instruction.

    ``deny_network``: the socket rules of network deny; ``deny_unix_sockets``:
    no ``socket(AF_UNIX)``; ``cap_reserved_space``: the ``fallocate`` rule of
    a file-size cap; ``deny_shared_objects``: no inotify instance, no file lease.
    """
    refuse_all = ("ret", _RET_ERRNO | errno.ENOSYS)
    # Symbolic first: ("jeq", k, label_true, label_false) with None for "next".
    asm: list[tuple[object, ...]] = [("ld", _ARCH)]
    for arch in _ABIS:
        asm.append(("jeq", arch, f"arch{arch}", None))
    asm.append(refuse_all)
    for arch, abi in _ABIS.items():
        asm.append(("label", f"arch{arch}"))
        asm.append(("ld", _NR))
        if arch == _X86_64:
            asm.append(("jset", _X32_SYSCALL_BIT, "nosys", None))
        asm += _rules(
            abi,
            deny_network=deny_network,
            deny_unix_sockets=deny_unix_sockets,
            deny_shared_objects=deny_shared_objects,
            cap_reserved_space=cap_reserved_space,
        )
    asm += _checks(
        deny_network=deny_network,
        deny_unix_sockets=deny_unix_sockets,
        deny_shared_objects=deny_shared_objects,
    )
    where: dict[object, int] = {}
    code: list[tuple[object, ...]] = []
    for op in asm:
        if op[0] == "label":
            where[op[1]] = len(code)
        else:
            code.append(op)

    def jump(label: object, at: int) -> int:
        offset = 0 if label is None else where[label] - at - 1
        if not 0 <= offset <= 255:  # classic BPF jumps forward, by a byte
            raise ValueError(f"jump to {label} out of range at {at}")
        return offset

    out = []
    for at, op in enumerate(code):
        kind, k = op[0], op[1]
        assert isinstance(k, int)
        if kind == "ld":
            out.append((_LD_ABS_W, 0, 0, k))
        elif kind == "ret":
            out.append((_RET_K, 0, 0, k))
        elif kind == "and":
            out.append((_AND_K, 0, 0, k))
        else:
            opcode = _JEQ_K if kind == "jeq" else _JSET_K
            false = op[3] if len(op) > 3 else None
            out.append((opcode, jump(op[2], at), jump(false, at), k))
    return out


def install(
    *,
    deny_network: bool,
    deny_unix_sockets: bool,
    deny_shared_objects: bool,
    cap_reserved_space: bool,
) -> str:
    """Install the filter on this thread and all it starts; why not, or ``""`` once in force."""
    machine = os.uname().machine
    if machine not in MACHINES:
        return f"no seccomp filter for {machine} (known: {', '.join(MACHINES)})"
    insns = program(
        deny_network=deny_network,
        deny_unix_sockets=deny_unix_sockets,
        deny_shared_objects=deny_shared_objects,
        cap_reserved_space=cap_reserved_space,
    )
    raw = b"".join(struct.pack("=HBBI", *insn) for insn in insns)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(len=len(insns), filter=ctypes.cast(buffer, ctypes.c_void_p))
    if (
        _libc.prctl(
            _PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0
        )
        != 0
    ):
        err = ctypes.get_errno()
        return f"prctl(PR_SET_SECCOMP): {os.strerror(err)}"
    return ""
