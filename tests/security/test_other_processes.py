"""S-SEC-1: a worker reads no other process's command line.

Found by red-teaming: the host's ``/proc`` showed every process's arguments
to every worker (a stdio MCP server's ``--token``, a ``postgresql://`` URL
with its password, another session's ``subvisor run "<prompt>"``). The
attack is a real subagent's Bash; a control shows what the worker may still
do (read its own tree's command lines).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.attack import bash_attack
from tests.support.mcp import flood_server

PY = sys.executable
TOKEN = "ghp_" + "S3CRETMARKER" + "0123456789"
#: Every process's command line the worker's /proc lists, NULs as spaces.
_EVERY_CMDLINE = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
#: A child's own: its arguments show once its exec has set them up (Popen can return
#: before: with vfork the parent resumes when the new image's memory is in place, its
#: arguments not yet), so it reads until they do, a bounded while.
_OWN_CHILD = (
    f"{PY} -c \"import subprocess, time; p = subprocess.Popen(['sleep', '31']); "
    "args = lambda: open(f'/proc/{p.pid}/cmdline').read().split(chr(0)); "
    "[time.sleep(0.01) for _ in range(500) if args() == ['']]; "
    "print('own child:', args()); p.kill()\""
)


@pytest.mark.parametrize("mode", ["read-only", "full"])
async def test_s_sec_1_no_other_process_command_line_is_read(tmp_path: Path, mode: str) -> None:
    """S-SEC-1: the token in a running stdio MCP server's arguments and the supervisor's own
    command line are not in any /proc/PID/cmdline the worker reads, in read-only and full;
    a process the worker started shows its arguments."""
    raw = Path(f"/proc/{os.getpid()}/cmdline").read_bytes()  # noqa: ASYNC240
    supervisor = raw.replace(b"\0", b" ").decode().strip()
    attack = await bash_attack(
        tmp_path,
        [
            f"{_EVERY_CMDLINE}; tr '\\0' ' ' < /proc/{os.getpid()}/cmdline; ps -eo args | cat",
            _OWN_CHILD,
        ],
        mode=mode,
        mcp_servers={"github": flood_server(TOKEN)},
    )
    seen = attack.output(0)
    assert TOKEN not in seen, seen
    assert supervisor not in seen, seen
    assert "own child: ['sleep', '31'" in attack.output(1), attack.output(1)
