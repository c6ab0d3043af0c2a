"""S-SEC-1 / S-SBX-1: a subagent cannot read the user's terminals, so no typed secret.

Landlock's read grant on ``/`` covered character devices: any subagent, a
read-only Explore too, could open ``/dev/pts/N`` of a terminal of its user (for
uid 0 the kernel checks only the owner) and race the shell for what is typed
there: a password at a ``sudo`` prompt, an approval key press. A terminal
opened after the worker started is one too. The attack is a real worker's
Bash; what it read is asserted, and that the keystrokes still reach the
terminal's owner.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.attack import bash_attack
from worker._sandbox import landlock_abi

SECRET = b"sudo-password-hunter2"


@pytest.mark.machine_may_lack("Landlock in its kernel", when=landlock_abi() < 1)
@pytest.mark.parametrize(
    ("mode", "subagent_type"),
    [("read-only", "Explore"), ("workspace-write", "general-purpose")],
)
async def test_s_sec_1_a_subagent_cannot_read_what_is_typed_in_a_terminal(
    tmp_path: Path, mode: str, subagent_type: str
) -> None:
    """S-SEC-1, S-SBX-1: a line typed into a terminal of the user (a pty opened by the
    test, as a shell's) is not what a subagent's `head`, or its non-blocking read, gets;
    the line is still there for the terminal's owner. Control: /dev/null, /dev/zero,
    /dev/urandom and /dev/stdin on a pipe still work."""
    master, slave = os.openpty()
    try:
        terminal = os.ttyname(slave)
        os.write(master, SECRET + b"\n")  # typed, waiting for its reader
        reader = (
            f"import os; fd = os.open({terminal!r}, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY); "
            "print('got', os.read(fd, 200))"
        )
        attack = await bash_attack(
            tmp_path,
            [
                f"head -n 1 {terminal}; echo rc=$?",
                f'python3 -c "{reader}"; echo rc=$?',
                "echo piped | cat /dev/stdin; head -c 4 /dev/zero | wc -c; "
                "head -c 4 /dev/urandom | wc -c; echo x > /dev/null && echo null-ok",
            ],
            subagent_type=subagent_type,
            mode=mode,
        )
        os.set_blocking(slave, False)
        try:
            left = os.read(slave, 200)
        except BlockingIOError:
            left = b""  # all taken
    finally:
        os.close(master)
        os.close(slave)
    head, nonblocking, control = (r.content for r in attack.results)
    for text in (head, nonblocking):
        assert SECRET.decode() not in text, text
    assert left == SECRET + b"\n"  # no keystroke taken from its owner
    assert control.split() == ["piped", "4", "4", "null-ok"], control
