"""Faults a scripted model can order a worker to commit, for real.

Tests and stress runs inject crashes into real processes this way: the
scripted provider marks a turn with ``fault`` and the worker that receives it
segfaults, exits, eats memory or hangs, and the supervisor must cope.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Literal, NoReturn

__all__ = ["EXIT_FAULT_CODE", "commit_fault"]

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
