"""The seccomp program's decisions, run in a small classic-BPF interpreter (no kernel needed).

S-SEC-2 (prlimit and scheduling of another process), S-SEC-7 (no user
namespace), S-SBX-1 (network deny: no MPTCP or SCTP socket; no UNIX socket
in a restricted mode), S-SEC-4
(reserved space), S-SEC-1 and S-SEC-2 (no kernel keyring), each under x86_64,
i386, aarch64 and arm.
"""

from __future__ import annotations

import errno
import struct

import pytest

from worker._seccomp import program

X86_64, I386, AARCH64, ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
ALLOW = "allow"


def _run(insns: list[tuple[int, int, int, int]], arch: int, nr: int, *args: int) -> object:
    """What the filter returns for one call: ``ALLOW`` or an errno."""
    full = (list(args) + [0] * 6)[:6]
    data = struct.pack("<iI Q 6Q", nr, arch, 0, *full)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:
            acc &= k
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x45:
            pc += jt if acc & k else jf
        elif code == 0x06:
            return ALLOW if k == 0x7FFF0000 else k & 0xFFFF
        else:
            raise AssertionError(f"unknown opcode {code:#x}")


def _decide(
    arch: int,
    nr: int,
    *args: int,
    deny: bool = False,
    unix: bool = False,
    shared: bool = False,
    cap: bool = False,
) -> object:
    insns = program(
        deny_network=deny,
        deny_unix_sockets=unix,
        deny_shared_objects=shared,
        cap_reserved_space=cap,
    )
    return _run(insns, arch, nr, *args)


# (arch, prlimit64, setpriority, sched_setaffinity, ioprio_set, unshare, clone, clone3, socket)
ABIS = [
    (X86_64, 302, 141, 203, 251, 272, 56, 435, 41),
    (I386, 340, 97, 241, 289, 310, 120, 435, 359),
    (AARCH64, 261, 140, 122, 30, 97, 220, 435, 198),
    (ARM, 369, 97, 241, 314, 337, 120, 435, 281),
]
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17


@pytest.mark.parametrize("abi", ABIS, ids=["x86_64", "i386", "aarch64", "arm"])
def test_s_sec_2_and_s_sec_7_decisions(abi: tuple[int, ...]) -> None:
    """S-SEC-2: prlimit and scheduling only on the caller (pid 0); S-SEC-7: no CLONE_NEWUSER,
    clone3 reports ENOSYS so that libc falls back to clone."""
    arch, prlimit, setprio, affinity, ioprio, unshare, clone, clone3, _ = abi
    assert _decide(arch, prlimit, 0, 0) == ALLOW
    assert _decide(arch, prlimit, 4242, 0) == errno.EPERM
    assert _decide(arch, setprio, 0, 0, 19) == ALLOW
    assert _decide(arch, setprio, 0, 4242, 19) == errno.EPERM
    assert _decide(arch, setprio, 2, 0, 19) == errno.EPERM  # PRIO_USER: every process of the uid
    assert _decide(arch, affinity, 0) == ALLOW
    assert _decide(arch, affinity, 4242) == errno.EPERM
    assert _decide(arch, ioprio, 1, 0) == ALLOW
    assert _decide(arch, ioprio, 1, 4242) == errno.EPERM
    assert _decide(arch, unshare, CLONE_NEWNS) == ALLOW
    assert _decide(arch, unshare, CLONE_NEWUSER | CLONE_NEWNS) == errno.EPERM
    assert _decide(arch, clone, SIGCHLD) == ALLOW
    assert _decide(arch, clone, CLONE_NEWUSER | SIGCHLD) == errno.EPERM
    assert _decide(arch, clone3, 0) == errno.ENOSYS


@pytest.mark.parametrize("abi", ABIS, ids=["x86_64", "i386", "aarch64", "arm"])
def test_s_sbx_1_socket_decisions_under_network_deny(abi: tuple[int, ...]) -> None:
    """S-SBX-1: under deny, TCP (protocol 0 or 6), UNIX, netlink and AF_ALG sockets are made;
    MPTCP, SCTP, SOCK_SEQPACKET, vsock, UDP, UDP-Lite, ICMP echo and raw sockets are refused with
    EACCES (Landlock's rules see TCP only); with network allowed nothing is."""
    arch, socket = abi[0], abi[-1]
    tcp = ((2, 1, 0), (10, 1, 6), (2, 1 | 0x80000 | 0x800, 0), (10, 1 | 0x80000, 0))
    for args in (*tcp, (1, 1, 0), (1, 2, 0), (16, 3, 0), (38, 5, 0)):
        assert _decide(arch, socket, *args, deny=True) == ALLOW, args
    not_tcp = ((2, 1, 262), (10, 1, 262), (2, 1, 132), (2, 5, 0), (40, 1, 0))
    datagram = ((2, 2, 0), (10, 2, 17), (2, 2 | 0x80000, 0), (2, 2, 136), (2, 2, 1), (10, 2, 58))
    for args in (*not_tcp, *datagram, (2, 3, 1), (10, 3, 58), (2, 3, 6), (2, 1, 17)):
        assert _decide(arch, socket, *args, deny=True) == errno.EACCES, args
        assert _decide(arch, socket, *args) == ALLOW, args


@pytest.mark.parametrize("abi", ABIS, ids=["x86_64", "i386", "aarch64", "arm"])
def test_s_sbx_1_unix_socket_decisions(abi: tuple[int, ...]) -> None:
    """S-SBX-1, S-SEC-1: where UNIX sockets are denied, socket(AF_UNIX) of every type gets
    EACCES under either network setting; the network rules decide the other families as
    before; without the rule (full, or the user's opt-in) AF_UNIX sockets are made."""
    arch, socket = abi[0], abi[-1]
    unix = ((1, 1, 0), (1, 2, 0), (1, 5, 0), (1, 1 | 0x80000 | 0x800, 0))
    for args in unix:
        for deny in (False, True):
            assert _decide(arch, socket, *args, deny=deny, unix=True) == errno.EACCES, args
            assert _decide(arch, socket, *args, deny=deny) == ALLOW, args
    for args in ((2, 1, 0), (10, 1, 6), (16, 3, 0), (38, 5, 0)):
        assert _decide(arch, socket, *args, deny=True, unix=True) == ALLOW, args
    for args in ((2, 2, 0), (2, 1, 262), (40, 1, 0)):
        assert _decide(arch, socket, *args, unix=True) == ALLOW, args
        assert _decide(arch, socket, *args, deny=True, unix=True) == errno.EACCES, args


def test_s_sec_1_i386_socketcall_makes_no_socket_in_any_mode() -> None:
    """S-SBX-1, S-SEC-1: i386's socketcall hides socket()'s family behind a pointer, so the
    netlink rule (the proc connector) cannot be checked there: SYS_SOCKET is refused in every
    mode, ``full`` with the network and UNIX sockets allowed included; SYS_SOCKETPAIR (8) and
    calls on sockets already made (SYS_CONNECT, 3) are not."""
    for deny, unix in ((True, False), (False, True), (True, True), (False, False)):
        assert _decide(I386, 102, 1, 0, deny=deny, unix=unix) == errno.EACCES
        assert _decide(I386, 102, 8, 0, deny=deny, unix=unix) == ALLOW
        assert _decide(I386, 102, 3, 0, deny=deny, unix=unix) == ALLOW


# (arch, inotify_init, inotify_init1, fcntl, fcntl64 or None)
SHARED = [
    (X86_64, 253, 294, 72, None),
    (I386, 291, 332, 55, 221),
    (AARCH64, 26, 26, 25, None),
    (ARM, 316, 360, 55, 221),
]
F_SETLEASE, F_GETLEASE, F_SETLK, F_DUPFD_CLOEXEC, F_RDLCK = 1024, 1025, 6, 1030, 0


@pytest.mark.parametrize("abi", SHARED, ids=["x86_64", "i386", "aarch64", "arm"])
def test_s_sec_2_restricted_modes_take_no_inotify_instance_and_no_lease(
    abi: tuple[int, ...],
) -> None:
    """S-SEC-2: with the shared-objects rule (read-only, workspace-write), inotify_init and
    inotify_init1 get ENOSYS (per-uid instances: 128 for the whole machine here) and
    fcntl(F_SETLEASE) EPERM (a lease stalls every writer of the file); every other fcntl
    command, and all of it without the rule (full), passes."""
    arch, init, init1, fcntl, fcntl64 = abi
    assert _decide(arch, init, shared=True) == errno.ENOSYS
    assert _decide(arch, init1, 0x80000, shared=True) == errno.ENOSYS
    for nr in (n for n in (fcntl, fcntl64) if n is not None):
        assert _decide(arch, nr, 3, F_SETLEASE, F_RDLCK, shared=True) == errno.EPERM
        for command in (F_GETLEASE, F_SETLK, F_DUPFD_CLOEXEC):
            assert _decide(arch, nr, 3, command, 0, shared=True) == ALLOW
        assert _decide(arch, nr, 3, F_SETLEASE, F_RDLCK) == ALLOW
    assert _decide(arch, init) == ALLOW
    assert _decide(arch, init1, 0) == ALLOW


def test_s_sec_4_fallocate_and_the_other_abis() -> None:
    """S-SEC-4: KEEP_SIZE reservations refused only with a file-size cap; x32 and unknown ABIs
    get ENOSYS for everything."""
    assert _decide(X86_64, 285, 3, 1, cap=True) == errno.EOPNOTSUPP
    assert _decide(X86_64, 285, 3, 0, cap=True) == ALLOW
    assert _decide(X86_64, 285, 3, 3, cap=True) == ALLOW
    assert _decide(X86_64, 285, 3, 1) == ALLOW
    assert _decide(X86_64, 0x40000000 | 1, 1) == errno.ENOSYS
    assert _decide(X86_64, 425) == errno.ENOSYS
    assert _decide(0xC0000028, 1) == errno.ENOSYS


# (arch, add_key, request_key, keyctl)
KEYRING = [
    (X86_64, 248, 249, 250),
    (I386, 286, 287, 288),
    (AARCH64, 217, 218, 219),
    (ARM, 309, 310, 311),
]


@pytest.mark.parametrize("abi", KEYRING, ids=["x86_64", "i386", "aarch64", "arm"])
def test_s_sec_1_and_s_sec_2_the_kernel_keyring_is_refused(abi: tuple[int, ...]) -> None:
    """S-SEC-1, S-SEC-2: add_key, request_key and keyctl get ENOSYS in every filter (the per-uid
    keyrings are shared by every process of the uid, whatever its session)."""
    arch, *calls = abi
    for nr in calls:
        for on in (False, True):
            args = (0, 0, 0, -4 & 0xFFFFFFFF)
            assert _decide(arch, nr, *args, deny=on, unix=on, cap=on) == errno.ENOSYS


@pytest.mark.parametrize("abi", ABIS, ids=["x86_64", "i386", "aarch64", "arm"])
def test_s_sec_2_netlink_sockets_are_route_and_sock_diag_only(abi: tuple[int, ...]) -> None:
    """S-SEC-1, S-SEC-2: in every mode a netlink socket is made for NETLINK_ROUTE (0) and
    NETLINK_SOCK_DIAG (4), of any type and flags; the proc connector (11), uevents (15),
    generic netlink (16) and the rest get EACCES."""
    arch, socket = abi[0], abi[-1]
    for deny in (False, True):
        for unix in (False, True):
            for kind in (2, 3, 3 | 0x80000):
                for protocol in (0, 4):
                    got = _decide(arch, socket, 16, kind, protocol, deny=deny, unix=unix)
                    assert got == ALLOW, (deny, unix, kind, protocol)
                for protocol in (11, 15, 16, 9, 1 << 8):
                    got = _decide(arch, socket, 16, kind, protocol, deny=deny, unix=unix)
                    assert got == errno.EACCES, (deny, unix, kind, protocol)


# (arch, (kill, tkill, rt_sigqueueinfo), (tgkill, rt_tgsigqueueinfo), fcntl numbers)
SIGNALS = [
    (X86_64, (62, 200, 129), (234, 297), (72,)),
    (I386, (37, 238, 178), (270, 335), (55, 221)),
    (AARCH64, (129, 130, 138), (131, 240), (25,)),
    (ARM, (37, 238, 178), (268, 363), (55, 221)),
]
SIGSTOP, SIGTSTP, SIGTERM, SIGKILL, SIGCONT, F_SETSIG, F_SETOWN = 19, 20, 15, 9, 18, 10, 8
PIDFD_SEND_SIGNAL = 424


@pytest.mark.parametrize("abi", SIGNALS, ids=["x86_64", "i386", "aarch64", "arm"])
@pytest.mark.parametrize("mode", ["full", "restricted"])
def test_s_sec_5_nothing_a_worker_runs_sends_sigstop(abi: tuple[object, ...], mode: str) -> None:
    """S-SEC-5: in every mode, no call sends SIGSTOP (a stopped worker cannot end its tree
    when its zygote and supervisor are SIGKILLed together), nor makes it a file owner's
    signal (F_SETSIG); every other signal, and every other fcntl, passes."""
    arch, arg1, arg2, fcntls = abi
    assert isinstance(arch, int) and isinstance(arg1, tuple) and isinstance(arg2, tuple)
    assert isinstance(fcntls, tuple)
    flags = {"deny": True, "unix": True, "shared": True} if mode == "restricted" else {}
    for nr in (*arg1, PIDFD_SEND_SIGNAL):
        assert _decide(arch, nr, 1234, SIGSTOP, **flags) == errno.EPERM, nr
        assert _decide(arch, nr, 0xFFFFFFFF, SIGSTOP, **flags) == errno.EPERM, nr
        for other in (SIGTERM, SIGKILL, SIGCONT, SIGTSTP, 0):
            assert _decide(arch, nr, 1234, other, **flags) == ALLOW, (nr, other)
    for nr in arg2:
        assert _decide(arch, nr, 1234, 1235, SIGSTOP, **flags) == errno.EPERM, nr
        assert _decide(arch, nr, 1234, SIGSTOP, SIGTERM, **flags) == ALLOW, nr
    for nr in fcntls:
        assert _decide(arch, nr, 3, F_SETSIG, SIGSTOP, **flags) == errno.EPERM, nr
        assert _decide(arch, nr, 3, F_SETSIG, SIGTERM, **flags) == ALLOW, nr
        assert _decide(arch, nr, 3, F_SETOWN, SIGSTOP, **flags) == ALLOW, nr
