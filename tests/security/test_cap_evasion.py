"""S-SEC-4, S-SEC-5: memory and disk that would outlive or sidestep a worker's caps.

SysV shared memory belongs to an IPC namespace, not to a process: a segment
made in the host's namespace stays after its worker, held by nothing and
counted against no cap. Each worker has an IPC namespace of its own, which
ends with its tree. ``RLIMIT_FSIZE`` counts a file's size, not the space it
reserves: ``fallocate --keep-size`` (and io_uring's fallocate) would fill the
disk under any file-size cap, so a worker with that cap refuses them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
from pathlib import Path

from protocol import ResourceLimits
from tests.support.attack import bash_attack

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_IPC_CREAT, _IPC_RMID = 0o1000, 0


def shm_keys() -> set[int]:
    """The keys of every SysV shared memory segment of this process's IPC namespace."""
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[0]) for line in f.readlines()[1:]}


def remove_shm(key: int) -> None:
    """Remove the segment of ``key`` from this process's IPC namespace, if there is one."""
    shmid = _libc.shmget(key, 0, 0)
    if shmid >= 0:
        _libc.shmctl(shmid, _IPC_RMID, None)


def shm_attack(key: int, size_mb: int, seen_key: int) -> str:
    """Bash that makes and fills a segment of ``key``, and looks for ``seen_key``'s."""
    return f"""python3 - <<'PY'
import ctypes, ctypes.util
libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = {size_mb} << 20
shmid = libc.shmget({key}, ctypes.c_size_t(size), 0o1000 | 0o600)
addr = libc.shmat(shmid, None, 0)
ctypes.memset(addr, 1, size)
libc.shmdt(ctypes.c_void_p(addr))
print('made', shmid >= 0, 'seen', libc.shmget({seen_key}, 0, 0) >= 0)
PY
readlink /proc/self/ns/ipc"""


async def test_s_sec_4_and_5_shared_memory_ends_with_the_worker(tmp_path: Path) -> None:
    """S-SEC-4, S-SEC-5: a 150 MB SysV segment a worker under a 200 MB cap makes and fills
    is gone once it ends (its IPC namespace was its own), and the worker never saw the
    host's segments; the report says it had the namespace."""
    key, host_key = random.randrange(1, 2**30), random.randrange(1, 2**30)
    host_shmid = _libc.shmget(host_key, 4096, _IPC_CREAT | 0o600)
    assert host_shmid >= 0
    try:
        attack = await bash_attack(
            tmp_path,
            [shm_attack(key, 150, host_key)],
            subagent_type="Explore",
            subagent_limits=ResourceLimits(memory_mb=200, idle_timeout_s=30),
        )
        left = shm_keys()
    finally:
        remove_shm(key)
        remove_shm(host_key)
    out = attack.output(0)
    assert "made True seen False" in out, out  # it made one, and saw none of ours
    assert key not in left
    assert os.readlink("/proc/self/ns/ipc") not in out
    assert attack.record.sandbox is not None and attack.record.sandbox.ipc_namespace


async def test_s_sec_4_reserved_space_is_under_the_file_size_cap(tmp_path: Path) -> None:
    """S-SEC-4: under an 8 MB file-size cap, `fallocate --keep-size` of 200 MB and
    io_uring (whose fallocate no filter sees) are refused; plain fallocate within the cap
    and punching holes still work; the report and the caps say it is enforced."""
    attack = await bash_attack(
        tmp_path,
        [
            "touch sparse; fallocate -n -l 200M sparse; echo rc=$?",
            "python3 -c 'import ctypes; l = ctypes.CDLL(None); p = ctypes.create_string_buffer"
            '(120); print("uring", l.syscall(425, 1, p))\'',
            "fallocate -l 1M plain && fallocate -p -o 0 -l 4096 plain; echo rc=$?",
        ],
        subagent_type="general-purpose",
        mode="workspace-write",
        subagent_limits=ResourceLimits(file_size_mb=8, idle_timeout_s=30),
    )
    keep_size, uring, control = (attack.output(i) for i in range(3))
    project = tmp_path / "project"
    assert "rc=0" not in keep_size, keep_size
    assert (project / "sparse").stat().st_blocks * 512 < 8 << 20
    assert "uring -1" in uring, uring
    # Control: what the cap counts still works.
    assert "rc=0" in control, control
    assert (project / "plain").stat().st_size == 1 << 20
    report = attack.record.sandbox
    assert report is not None and report.reserved_space_capped, report
    assert "NOT capped" not in attack.record.caps, attack.record.caps
