"""S-SEC-1, S-SEC-3, S-SEC-5, S-SEC-7: what a worker as root must not write, ``full`` mode included.

For uid 0 the kernel checks only a sysctl's owner, not a capability: a worker
that holds none could still set ``kernel.core_pattern`` to a program of its
own, crash a process, and have the kernel run that program as root with every
capability, outside its tree, its sandbox and its caps (where it read the
supervisor's key and started a supervisor of its own). The same owner check
guards the supervisor's ``/proc/PID/oom_score_adj``. And subvisor's own code,
which gateway processes load with the keys, is not the worker's to rewrite in
any mode. Each attack writes back what is there, so that a hole changes nothing.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

import supervisor.providers
from tests.support.attack import bash_attack

MODES = ["full", "workspace-write", "read-only"]


def _try(name: str, command: str) -> str:
    return f"if ( {command} ) 2>/dev/null; then echo WROTE-{name}; else echo refused-{name}; fi"


@pytest.mark.machine_may_lack(
    "root, for whom the kernel checks only a file's owner", when=os.geteuid() != 0
)
@pytest.mark.parametrize("mode", MODES)
async def test_s_sec_1_a_root_worker_cannot_set_the_kernel_or_the_code_the_keys_run(
    tmp_path: Path, mode: str
) -> None:
    code = supervisor.providers.__file__
    me = os.getpid()  # the supervisor: this test runs it in-process
    commands = [
        _try("core", "cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern"),
        _try("oom", f"cat /proc/{me}/oom_score_adj > /proc/{me}/oom_score_adj"),
        _try("code", f"{sys.executable} -c \"open('{code}', 'a')\""),
        "echo kept > kept.txt && cat kept.txt; echo to-stdout > /dev/stdout",
    ]
    attack = await bash_attack(tmp_path, commands, mode=mode, network="deny")
    said = [attack.output(i).strip() for i in range(len(commands))]
    assert said[:3] == ["refused-core", "refused-oom", "refused-code"], said
    if mode != "read-only":
        # Full is still the filesystem's run, less the kernel's settings and the code.
        assert said[3].split() == ["kept", "to-stdout"], said
    assert attack.record.status == "completed"


@pytest.mark.parametrize("mode", ["full", "read-only"])
async def test_s_sec_4_a_workers_tree_is_the_oom_killers_first_choice_for_good(
    tmp_path: Path, mode: str
) -> None:
    """An OOM of the machine kills a worker's process, never the supervisor first: what a
    worker runs carries the most bias the kernel has (1000) and cannot lower it."""
    commands = [
        "cat /proc/self/oom_score_adj",
        _try("lower", "echo 0 > /proc/self/oom_score_adj"),
    ]
    attack = await bash_attack(tmp_path, commands, mode=mode, network="deny")
    said = [attack.output(i).strip() for i in range(len(commands))]
    assert said == ["1000", "refused-lower"], said
    # The supervisor's own (this process): read here, since a worker's /proc hides it.
    assert int(Path(f"/proc/{os.getpid()}/oom_score_adj").read_text()) < 1000  # noqa: ASYNC240


_BLOCK_DEVICES = [
    entry.path
    for entry in (os.scandir("/dev") if os.path.isdir("/dev") else ())
    if stat.S_ISBLK(entry.stat(follow_symlinks=False).st_mode)
]
_OPEN_EACH = (
    "import os, stat, sys\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        fd = os.open(path, os.O_RDONLY)\n"
    "    except OSError as exc:\n"
    "        print('refused', path, exc.errno); continue\n"
    "    print('BLOCK' if stat.S_ISBLK(os.fstat(fd).st_mode) else 'covered', path)\n"
)


@pytest.mark.machine_may_lack("a block device node in /dev", when=not _BLOCK_DEVICES)
@pytest.mark.machine_may_lack(
    "root, for whom the kernel checks only a disk's owner", when=os.geteuid() != 0
)
@pytest.mark.parametrize("mode", ["full", "read-only"])
async def test_s_sec_1_a_root_worker_cannot_read_a_raw_disk(tmp_path: Path, mode: str) -> None:
    """S-SEC-1: the disk holds subvisor's hidden home (its config, with the keys), and a
    uid-0 worker passes a disk's owner check without a capability: no block device in
    /dev opens as one for it."""
    script = tmp_path / "open_each.py"
    script.write_text(_OPEN_EACH)
    command = f"{sys.executable} {script} {' '.join(_BLOCK_DEVICES)}"
    attack = await bash_attack(tmp_path, [command], mode=mode, network="deny")
    lines = attack.output(0).split("\n")
    assert len(lines) == len(_BLOCK_DEVICES), lines
    assert not [line for line in lines if line.startswith("BLOCK")], lines
