"""Faults a scripted model can order a worker to commit, for real.

Tests and stress runs inject crashes into real processes this way: the
scripted provider marks a turn with ``fault`` and the worker that receives it
segfaults, exits, eats memory, hangs or floods the supervisor with valid
events, and the supervisor must cope.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, NoReturn

__all__ = ["EXIT_FAULT_CODE", "FLOOD_TEXT_SIZE", "commit_fault", "flood_events"]

#: Characters of model text and tool output in each event of a flood.
FLOOD_TEXT_SIZE = 16 * 1024

EXIT_FAULT_CODE = 1
_OOM_CHUNK = 64 * 1024 * 1024


def commit_fault(kind: Literal["segfault", "exit", "oom", "hang"]) -> NoReturn:
    """Crash this process the way ``kind`` says; never returns."""
    if kind == "segfault":
        ctypes.string_at(0)
    elif kind == "exit":
        os._exit(EXIT_FAULT_CODE)
    elif kind == "oom":
        held = []
        try:
            while True:
                # Non-zero bytes: the pages really become resident.
                held.append(b"\x01" * _OOM_CHUNK)
                time.sleep(0.005)
        except MemoryError:
            # An address-space cap stopped us first; die as the OOM killer would.
            os.kill(os.getpid(), signal.SIGKILL)
    # "hang": block the whole process, event loop included, like a wedged call.
    while True:
        time.sleep(3600)


async def flood_events(emit: Callable[[str, dict[str, Any]], Awaitable[None]]) -> NoReturn:
    """Send valid events as fast as the pipe takes them, forever (S-SEC-8).

    What a hostile worker would: transcript messages (model text) and tool
    events (tool output), each well-formed, so only a budget stops it.
    """
    text = "x" * FLOOD_TEXT_SIZE
    seq = itertools.count()
    while True:
        await emit("message", {"message": {"role": "assistant", "content": text}})
        await emit(
            "tool.finished",
            {"call_id": f"flood_{next(seq)}", "name": "Bash", "is_error": False, "output": text},
        )
