"""Which signals stop a command gracefully (S-SEC-6); the end-to-end runs are in
tests/security/test_recovery.py."""

from __future__ import annotations

import os
import signal

import trio

from supervisor.cli._interrupt import interruptible


async def _after(signum: int) -> int | None:
    async with interruptible() as interruption:
        os.kill(os.getpid(), signum)
        with trio.move_on_after(5):
            await interruption.requested.wait()
        return interruption.signum


async def test_s_sec_6_a_hang_up_stops_a_command_like_sigterm() -> None:
    """The terminal closing under a command is an interruption (exit 129)."""
    assert await _after(signal.SIGHUP) == signal.SIGHUP


async def test_s_sec_6_under_nohup_a_hang_up_stays_ignored() -> None:
    """A command started to outlive its terminal (SIGHUP ignored) is not stopped by one."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        async with interruptible() as interruption:
            os.kill(os.getpid(), signal.SIGHUP)
            await trio.sleep(0.2)
            assert interruption.signum is None
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
