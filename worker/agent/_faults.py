"""Faults a scripted model can order a worker to commit, for real.

Tests and stress runs inject crashes into real processes this way: the
scripted provider marks a turn with ``fault`` and the worker that receives it
segfaults, exits, eats memory, hangs or floods the supervisor with valid
events, and the supervisor must cope.

Each fault shows exactly the symptom it names, so the supervisor's reason is
determined by the fault and not by which of its watchers looks first. A
worker that eats memory keeps talking (one event per chunk it holds), as a
leaking agent that is still at work would: were it silent, the idle watchdog
would race the memory cap under CPU load, since the allocation loop is what
starves. Only ``hang`` is silent, and only the idle watchdog can end it.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import time
from typing import Literal, NoReturn

from protocol import (
    FAULT_MEMORY,
    MESSAGE,
    TOOL_FINISHED,
    TOOL_STARTED,
    ChatMessage,
    MemoryHeld,
    MessageAppended,
    ToolFinished,
    ToolStarted,
)

from ._ports import EventSink

__all__ = [
    "EXIT_FAULT_CODE",
    "FLOOD_TEXT_SIZE",
    "MEMORY_CHUNK_SIZE",
    "Fault",
    "commit_fault",
    "eat_memory",
    "flood_events",
]

#: What a scripted turn may order (``ModelResult.fault``).
Fault = Literal["segfault", "exit", "oom", "hang", "flood"]

#: Characters of model text and tool output in each event of a flood.
FLOOD_TEXT_SIZE = 16 * 1024

#: Bytes the oom fault takes between two of its events: small enough that even
#: a CPU-starved worker sends one well within any idle timeout.
MEMORY_CHUNK_SIZE = 16 * 1024 * 1024

EXIT_FAULT_CODE = 1


async def commit_fault(kind: Fault, events: EventSink) -> NoReturn:
    """Crash this process, or turn it hostile, the way ``kind`` says; never returns."""
    if kind == "flood":
        await flood_events(events)
    if kind == "oom":
        await eat_memory(events)
    if kind == "segfault":
        ctypes.string_at(0)
    elif kind == "exit":
        os._exit(EXIT_FAULT_CODE)
    _hang()


def _hang() -> NoReturn:
    # Block the whole process, event loop included, like a wedged call.
    while True:
        time.sleep(3600)


async def eat_memory(events: EventSink) -> NoReturn:
    """Hold ever more memory, reporting each chunk, until a memory cap ends this process.

    The kernel's OOM killer ends it inside its cgroup, or the supervisor's
    sampler does; an address-space cap raises ``MemoryError`` first, and the
    process then dies as the OOM killer would have it die.
    """
    held: list[bytes] = []
    try:
        while True:
            # Non-zero bytes: the pages really become resident.
            held.append(b"\x01" * MEMORY_CHUNK_SIZE)
            await events.emit(FAULT_MEMORY, MemoryHeld(held_bytes=len(held) * MEMORY_CHUNK_SIZE))
    except MemoryError:
        os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL does not return")


async def flood_events(events: EventSink) -> NoReturn:
    """Send valid events as fast as the pipe takes them, forever (S-SEC-8).

    What a hostile worker would: transcript messages (model text) and tool
    events (a tool input as large as the text), each well-formed, so only a
    budget stops it. The tool events reach the parent's timeline too.
    """
    text = "x" * FLOOD_TEXT_SIZE
    message = MessageAppended(message=ChatMessage(role="assistant", content=text))
    seq = itertools.count()
    while True:
        await events.emit(MESSAGE, message)
        call_id = f"flood_{next(seq)}"
        await events.emit(
            TOOL_STARTED, ToolStarted(call_id=call_id, name="Bash", input={"command": text})
        )
        await events.emit(
            TOOL_FINISHED,
            ToolFinished(call_id=call_id, name="Bash", is_error=False, output_chars=len(text)),
        )
