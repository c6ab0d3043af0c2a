"""S-SEC-1, S-SEC-2: a worker reads, changes and plants nothing in the kernel's keyring.

Found by red-teaming: the per-uid keyring (``@u``), shared by every process
of the uid, let a read-only worker read and overwrite the user's keys and
plant one that outlived its run, for the next worker of any session to read.
The attack is a real subagent's Bash; the key's serial is handed to it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.attack import bash_attack

PY = sys.executable
_SYS_ADD_KEY, _SYS_KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(
    os.uname().machine, (0, 0)
)
_KEY_SPEC_USER_KEYRING = -4
_KEYCTL_UPDATE, _KEYCTL_SEARCH, _KEYCTL_READ, _KEYCTL_INVALIDATE = 2, 10, 11, 21
_libc = ctypes.CDLL(None, use_errno=True)

#: In the worker: read the user's key by its serial, overwrite it, plant another in @u.
_KEY_ATTACK = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
add_key, keyctl, serial, planted = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                    sys.argv[4].encode())
buf = ctypes.create_string_buffer(4096)
n = libc.syscall(keyctl, 11, serial, buf, 4096)
print("read:", buf.raw[: max(n, 0)])
print("update:", libc.syscall(keyctl, 2, serial, b"attacker", 8))
print("plant:", libc.syscall(add_key, b"user", planted, b"left-behind", 11, -4))
"""


def _read_key(serial: int) -> bytes:
    buf = ctypes.create_string_buffer(4096)
    n = _libc.syscall(_SYS_KEYCTL, _KEYCTL_READ, serial, buf, 4096)
    return buf.raw[:n] if n >= 0 else b""


def _find_key(description: bytes) -> int:
    """The serial of the user key ``description`` in @u (searched from here), or -1."""
    return int(
        _libc.syscall(_SYS_KEYCTL, _KEYCTL_SEARCH, _KEY_SPEC_USER_KEYRING, b"user", description, 0)
    )


async def test_s_sec_1_the_users_keyring_is_neither_read_nor_changed_nor_planted(
    tmp_path: Path,
) -> None:
    """S-SEC-1, S-SEC-2: a key the user keeps in the per-uid keyring (@u) is not read or
    overwritten by a read-only worker, and no key it adds is left in @u after its run (a
    channel to the next worker of the uid, any session's)."""
    if not _SYS_KEYCTL:
        pytest.skip(f"no keyctl numbers here for {os.uname().machine}")
    secret = f"ghp_KEYRING{uuid.uuid4().hex}".encode()
    name = f"subvisor-test-{uuid.uuid4().hex}".encode()
    planted = f"subvisor-planted-{uuid.uuid4().hex}"
    serial = _libc.syscall(_SYS_ADD_KEY, b"user", name, secret, len(secret), _KEY_SPEC_USER_KEYRING)
    if serial < 0:
        pytest.skip(f"add_key here: {os.strerror(ctypes.get_errno())}")
    script = tmp_path / "keys.py"
    script.write_text(_KEY_ATTACK)
    try:
        attack = await bash_attack(
            tmp_path,
            [f"{PY} {script} {_SYS_ADD_KEY} {_SYS_KEYCTL} {serial} {planted}"],
            subagent_type="Explore",
        )
        out = attack.output()
        assert "read:" in out, out  # the attack ran
        assert secret.decode() not in out, out
        assert _read_key(serial) == secret
        assert _find_key(planted.encode()) == -1 and ctypes.get_errno() == errno.ENOKEY
    finally:
        _libc.syscall(_SYS_KEYCTL, _KEYCTL_INVALIDATE, serial)
        found = _find_key(planted.encode())
        if found > 0:
            _libc.syscall(_SYS_KEYCTL, _KEYCTL_INVALIDATE, found)
