"""S-SEC-4: a read-only subagent cannot fill the host's disk through its temp dir.

A ``read-only`` worker (the built-in Explore) may write one place: its
private temp dir (``$TMPDIR``). Each file there is under ``file_size_mb``,
but nothing bounded how many it wrote, and the disk it filled is the one
holding ``~/.subvisor`` and the rest of the machine. The attack writes
300 MB in 15 MB files under a 256 MB memory cap, then blocks reading a FIFO
in the project (which a read-only worker may open for reading) while the
test looks from the host: at the temp dir, and at the free space of the
filesystem that holds it.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import random
import sys
import tempfile
from pathlib import Path

import pytest
import trio

from protocol import ResourceLimits, SandboxPolicy
from supervisor import Supervisor, SupervisorConfig
from supervisor.kernel._exit import ExitKind
from tests.support.attack import Attack, bash_attack
from tests.support.bash_worker import bash_model, run_bash

#: 20 files of 15 MB: 300 MB, more than the 256 MB memory cap of the attack.
_FILES, _FILE_MB, _CAP_MB = 20, 15, 256


def _worker_temp_dirs() -> list[str]:
    """The temp dirs this process's supervisor made for its workers (host's view)."""
    root = tempfile.gettempdir()
    return glob.glob(os.path.join(root, f"subvisor-sandbox-{os.getpid()}-*", "workers", "*"))


def _bytes_on_host(path: str) -> int:
    """What the files below ``path`` take on the host's filesystem (``du``)."""
    total = 0
    for parent, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
    return total


def _free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _mounted_anywhere(path: str) -> list[int]:
    """The pids whose mount namespace still has a mount at ``path``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/mountinfo") as f:
            if any(line.split()[4] == path for line in f):
                found.append(int(entry))
    return found


async def _while_blocked(tmp_path: Path, commands: list[str]) -> tuple[Attack, dict[str, int]]:
    """Run ``commands`` (ending in a read of ``project/gate``); measure while they wait there."""
    project = tmp_path / "project"
    project.mkdir()
    gate = project / "gate"
    os.mkfifo(gate)
    seen: dict[str, int] = {}
    attack: list[Attack] = []
    free_before = _free(tempfile.gettempdir())

    async def attacker(cancel: trio.CancelScope) -> None:
        attack.append(
            await bash_attack(tmp_path, commands, subagent_limits=ResourceLimits(memory_mb=_CAP_MB))
        )
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(attacker, nursery.cancel_scope)
        while True:
            try:
                # Succeeds once the worker opened the gate to read: its writes are done.
                fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno == errno.ENXIO, exc
                await trio.sleep(0.05)
                continue
            [temp_dir] = _worker_temp_dirs()
            seen["on_host"] = _bytes_on_host(temp_dir)
            seen["free_drop"] = free_before - _free(temp_dir)
            os.close(fd)  # the worker's read ends: it goes on and ends
            break
    [done] = attack
    seen["mounted_after"] = len(_mounted_anywhere(temp_dir))
    seen["left_after"] = _bytes_on_host(temp_dir)  # 0 where the dir is gone
    return done, seen


async def test_s_sec_4_a_read_only_tree_cannot_fill_the_host_disk_through_its_temp_dir(
    tmp_path: Path,
) -> None:
    """S-SEC-4: an Explore worker writing 300 MB into $TMPDIR under a 256 MB memory cap is
    told the device is full, the host's temp dir holds none of it while the worker still
    holds its files, the host filesystem's free space did not drop by what it wrote, and
    after the worker nothing of it is left: no file on the host, no mount anywhere."""
    fill = (
        f"for i in $(seq {_FILES}); do head -c {_FILE_MB}M /dev/zero > $TMPDIR/f$i || break;"
        " done; echo wrote_kb=$(du -sk $TMPDIR | cut -f1); cat gate"
    )
    done, seen = await _while_blocked(tmp_path, [fill])
    said = done.output()
    wrote = int(said.split("wrote_kb=")[1].split()[0]) * 1024
    assert wrote > 64 << 20, said  # control: the worker did write into its temp dir
    assert "No space left on device" in said, (said, seen)
    assert wrote < _CAP_MB << 20, said
    assert seen["on_host"] == 0, seen
    # Other processes write this disk too: what matters is it did not lose what the worker wrote.
    assert seen["free_drop"] < wrote, (seen, wrote)
    assert seen["mounted_after"] == 0, seen
    assert seen["left_after"] == 0, seen


async def test_s_sec_4_the_bounded_temp_dir_still_serves_normal_use(tmp_path: Path) -> None:
    """S-SEC-4: inside the bounded temp dir a read-only worker still makes private files and
    dirs (Python's tempfile, mktemp), runs a program it wrote there, builds a venv there
    (as pip does its builds), and its TMPDIR is its own, mode 0700."""
    script = (
        "import os, tempfile\n"
        "assert tempfile.gettempdir() == os.environ['TMPDIR'], tempfile.gettempdir()\n"
        "with tempfile.NamedTemporaryFile('w+') as f:\n"
        "    f.write('roundtrip-ok'); f.flush(); f.seek(0); print(f.read())\n"
        "d = tempfile.mkdtemp(); open(os.path.join(d, 'x'), 'w').write('y'); print('mkdtemp-ok')\n"
    )
    commands = [
        f"python3 - <<'EOF'\n{script}EOF",
        'f=$(mktemp) && echo hi > "$f" && cat "$f" && d=$(mktemp -d) && touch "$d/a"'
        " && echo mktemp-ok",
        'printf "#!/bin/sh\\necho exec-ok\\n" > $TMPDIR/run.sh && chmod +x $TMPDIR/run.sh'
        " && $TMPDIR/run.sh",
        "python3 -m venv --without-pip $TMPDIR/venv"
        " && $TMPDIR/venv/bin/python -c 'print(\"venv-ok\")'",
        'stat -c "mode=%a uid=%u" $TMPDIR; id -u',
    ]
    done = await bash_attack(tmp_path, commands)
    said = [done.output(i) for i in range(len(commands))]
    assert "roundtrip-ok" in said[0] and "mkdtemp-ok" in said[0], said[0]
    assert "hi" in said[1] and "mktemp-ok" in said[1], said[1]
    assert "exec-ok" in said[2], said[2]
    assert "venv-ok" in said[3], said[3]
    mode, uid = said[4].split()[0], said[4].split()[1]
    assert mode == "mode=700", said[4]
    assert uid == f"uid={said[4].split()[2]}", said[4]


async def test_s_sec_4_what_the_temp_dir_holds_counts_against_the_memory_cap(
    tmp_path: Path,
) -> None:
    """S-SEC-4: under a 256 MB cap (a cgroup), 120 MB in $TMPDIR plus a 150 MB child, each
    alone within the cap, end the worker with "memory cap exceeded": the temp dir's pages
    are the tree's memory, not page cache the kernel may drop."""
    marker = f"61.{random.randrange(10**6):06d}"
    command = (
        "head -c 120M /dev/zero > $TMPDIR/held && echo held &&"
        f" {sys.executable} -c \"b = b'x' * (150 << 20); import time; time.sleep({marker})\""
    )
    config = SupervisorConfig(tree_caps="auto", sample_interval_s=0.05, kill_grace_s=0.5)
    async with Supervisor(config) as sup:
        if not sup.tree_caps.startswith("cgroup"):
            pytest.skip(f"no cgroup on this machine ({sup.tree_caps}): memory is sampled")
        handle = await sup.spawn(
            limits=ResourceLimits(memory_mb=_CAP_MB),
            sandbox=SandboxPolicy(mode="read-only"),
            handler=bash_model(command),
        )
        answer = await run_bash(handle, tmp_path)
        with trio.move_on_after(60):
            exit = await handle.wait()
            assert exit.kind is ExitKind.MEMORY_CAP, (exit.reason, answer)
            return
        raise AssertionError(f"no cap ended the worker; it answered {answer!r}")
