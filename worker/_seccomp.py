"""A seccomp filter that keeps reserved disk space under the file-size cap (S-SEC-4).

``RLIMIT_FSIZE`` bounds a file's size, not the space it takes: ``fallocate``
with ``FALLOC_FL_KEEP_SIZE`` reserves blocks past the end and leaves the size
at 0, so ``fallocate -n -l 200G f`` fills the disk under any cap. None of our
dependencies binds seccomp (nor does the standard library), so this module
builds the classic-BPF program by hand and installs it with
``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)``. The filter:

- refuses ``fallocate`` with ``EOPNOTSUPP`` (what a filesystem without the
  mode answers, so callers fall back) unless its mode is 0 (extend the
  size, which the rlimit counts) or ``PUNCH_HOLE | KEEP_SIZE`` (which only
  frees space); every other mode reserves space or shifts extents;
- refuses ``io_uring_setup`` with ``ENOSYS``: an io_uring ``FALLOCATE`` op
  would bypass the filter, which sees only system calls;
- on x86_64, refuses every x32 system call (``ENOSYS``): they share the
  native arch value under other numbers;
- allows everything else.

It checks the arch value first, since a system call number means something
else under each ABI: x86_64 (and its i386 compat ABI) and aarch64 (and arm)
are known; on any other machine nothing is installed and the caller reports
the reserve as not capped. A process of an ABI the filter does not list gets
``ENOSYS`` for every call (none exists on the machines it installs on).

Invariants: a filter applies to the calling thread and what it starts from
then on (threads, children, across ``execve``) and cannot be removed, so it
is installed while the worker has one thread; ``no_new_privs`` must already
be set (the kernel requires it of a process without ``CAP_SYS_ADMIN``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct

__all__ = ["refuse_reserved_space"]

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# Classic BPF opcodes: load a 32-bit word of ``struct seccomp_data``, compare, return.
_LD_ABS_W = 0x00 | 0x00 | 0x20
_JEQ_K = 0x05 | 0x10 | 0x00
_JSET_K = 0x05 | 0x40 | 0x00
_RET_K = 0x06 | 0x00
# Offsets in ``struct seccomp_data``: nr, arch, then args[6] as u64 from 16;
# arg 1's low word (fallocate's ``int mode``) is at 24 on these little-endian ABIs.
_NR, _ARCH, _ARG1_LOW = 0, 4, 24

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_X32_SYSCALL_BIT = 0x40000000
#: Unified across ABIs since Linux 5.1 (the 4xx block).
_IO_URING_SETUP = 425
#: ``AUDIT_ARCH_*`` of each known ABI, with its ``fallocate`` number.
_FALLOCATE = {
    0xC000003E: 285,  # x86_64
    0x40000003: 324,  # i386, on x86_64
    0xC00000B7: 47,  # aarch64
    0x40000028: 352,  # arm (EABI), on aarch64
}
_X86_64 = 0xC000003E
#: ``os.uname().machine`` values whose ABIs ``_FALLOCATE`` covers.
MACHINES = ("x86_64", "aarch64")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k); jumps are relative to the next instruction."""
    refuse_all = ("ret", _RET_ERRNO | errno.ENOSYS)
    # Symbolic first: ("jeq", k, label_true, label_false) with None for "next".
    asm: list[tuple[object, ...]] = [("ld", _ARCH)]
    for arch in _FALLOCATE:
        asm.append(("jeq", arch, f"arch{arch}", None))
    asm.append(refuse_all)
    for arch, fallocate in _FALLOCATE.items():
        asm.append(("label", f"arch{arch}"))
        asm.append(("ld", _NR))
        if arch == _X86_64:
            asm.append(("jset", _X32_SYSCALL_BIT, "nosys", None))
        asm.append(("jeq", _IO_URING_SETUP, "nosys", None))
        asm.append(("jeq", fallocate, "mode", "allow"))
    asm += [
        ("label", "mode"),
        ("ld", _ARG1_LOW),
        ("jeq", 0, "allow", None),
        ("jeq", _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, "allow", None),
        ("ret", _RET_ERRNO | errno.EOPNOTSUPP),
        ("label", "nosys"),
        refuse_all,
        ("label", "allow"),
        ("ret", _RET_ALLOW),
    ]
    where: dict[object, int] = {}
    code: list[tuple[object, ...]] = []
    for op in asm:
        if op[0] == "label":
            where[op[1]] = len(code)
        else:
            code.append(op)

    def jump(label: object, at: int) -> int:
        return 0 if label is None else where[label] - at - 1

    out = []
    for at, op in enumerate(code):
        kind, k = op[0], op[1]
        assert isinstance(k, int)
        if kind == "ld":
            out.append((_LD_ABS_W, 0, 0, k))
        elif kind == "ret":
            out.append((_RET_K, 0, 0, k))
        else:
            opcode = _JEQ_K if kind == "jeq" else _JSET_K
            false = op[3] if len(op) > 3 else None
            out.append((opcode, jump(op[2], at), jump(false, at), k))
    return out


def refuse_reserved_space() -> str:
    """Install the filter on this thread and all it starts; why not, or ``""`` once in force."""
    machine = os.uname().machine
    if machine not in MACHINES:
        return f"no seccomp filter for {machine} (known: {', '.join(MACHINES)})"
    program = _program()
    raw = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))
    fprog = _SockFprog(len=len(program), filter=ctypes.cast(buffer, ctypes.c_void_p))
    if (
        _libc.prctl(
            _PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0
        )
        != 0
    ):
        err = ctypes.get_errno()
        return f"prctl(PR_SET_SECCOMP): {os.strerror(err)}"
    return ""
