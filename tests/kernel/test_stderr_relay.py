"""Workers hold no terminal: their stderr reaches ours through ``StderrRelay`` (S-SEC-1).

A worker that inherited the supervisor's terminal as its stderr could read
what is typed there (an approval's key press) through that fd, which
Landlock never checks, or write escape sequences to it.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import textwrap

import trio

from supervisor.kernel._stderr_relay import MAX_RELAYED_BYTES, StderrRelay

_SPAWN_BOTH = textwrap.dedent(
    """
    import json, trio
    from protocol import KERNEL_INFO, InfoParams
    from supervisor import Supervisor

    async def main():
        async with Supervisor() as sup:
            for mode in ("zygote", "exec"):
                handle = await sup.spawn(mode=mode)
                info = await handle.request(KERNEL_INFO, InfoParams())
                with open(f"/proc/{handle.pid}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                print(json.dumps({"mode": mode, "fds": info.fds, "tty_nr": int(fields[4])}))

    trio.run(main)
    """
)


def test_s_sec_1_a_worker_holds_no_terminal_of_the_supervisor() -> None:
    """S-SEC-1: with the supervisor on a terminal (stdin, stdout and stderr a pty),
    neither a forked nor an exec'd worker has it as an fd or as its controlling
    terminal."""
    controller, terminal = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-c", _SPAWN_BOTH],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=terminal,
            start_new_session=True,
            # The pty becomes the session's controlling terminal at its first open.
            preexec_fn=lambda: os.close(os.open(os.ttyname(0), os.O_RDWR)),
            timeout=120,
            text=True,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert result.returncode == 0, result.stdout
    workers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [w["mode"] for w in workers] == ["zygote", "exec"]
    for worker in workers:
        terminals = [t for t in worker["fds"].values() if t.startswith(("/dev/pts", "/dev/tty"))]
        assert terminals == [], worker
        assert worker["tty_nr"] == 0, worker


async def test_s_sec_1_what_workers_write_on_stderr_is_escaped_and_bounded() -> None:
    """S-SEC-1: a worker's escape sequence reaches our stderr escaped, never raw, and
    past MAX_RELAYED_BYTES the rest is dropped while the writer is never blocked."""
    out = io.StringIO()
    relay = StderrRelay(out)
    writer = relay.write_fd
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.run)
        os.write(writer, b"Traceback: \x1b]52;c;cGF5bG9hZA==\x07 done\n")
        flood = b"x" * 1000 + b"\n"
        written = 0
        while written < 4 * MAX_RELAYED_BYTES:
            written += await trio.to_thread.run_sync(os.write, writer, flood)
        relay.close_write_end()
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown.startswith("Traceback: \\x1b]52;c;cGF5bG9hZA==\\x07 done\n"), shown[:200]
    assert len(shown) < 2 * MAX_RELAYED_BYTES
    assert "the rest is dropped" in shown
    assert relay.dropped > 2 * MAX_RELAYED_BYTES
