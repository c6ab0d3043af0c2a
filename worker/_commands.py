"""The kernel command set: what a worker can be asked to do before it runs agents.

These exist so the kernel can be tested and benchmarked on its own, with real
processes doing real harm to themselves: allocating memory, burning CPU,
crashing in every way a process can, flooding the pipe and breaking the
protocol on purpose.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import resource
import signal
import struct
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

import msgpack
import trio
from pydantic import BaseModel

from protocol import (
    ECHO,
    FLOOD,
    KERNEL_ALLOCATE,
    KERNEL_ASK_SUPERVISOR,
    KERNEL_BURN_CPU,
    KERNEL_CRASH,
    KERNEL_ECHO,
    KERNEL_FLOOD,
    KERNEL_FORBIDDEN,
    KERNEL_HANG,
    KERNEL_INFO,
    KERNEL_SLEEP,
    Allocated,
    AllocateParams,
    BurnCpuParams,
    CommandSpec,
    CpuBurned,
    CrashParams,
    EchoParams,
    EchoResult,
    Flooded,
    FloodItem,
    FloodParams,
    ForbiddenFrame,
    ForbiddenParams,
    HangParams,
    InfoParams,
    SleepParams,
    Slept,
    WorkerInfo,
)

from ._channel import SupervisorLink

__all__ = [
    "KERNEL_COMMANDS",
    "Command",
    "CommandContext",
    "CommandError",
    "CommandHandler",
    "command_table",
]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class CommandError(Exception):
    """A command failed in a way the caller should see as an error reply."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class CommandContext:
    """What a command handler can use: the link to the supervisor, and its request id."""

    link: SupervisorLink
    request_id: int


#: Answers one method: given its params model, returns its result model. An
#: ``async def``, or a plain function for a command that never waits: that one
#: cannot be cancelled midway, so it runs without a cancel scope of its own.
CommandHandler = Callable[[P, CommandContext], Coroutine[Any, Any, R] | R]


@dataclass(frozen=True, slots=True)
class Command(Generic[P, R]):
    """A method of ``protocol.SUPERVISOR_METHODS`` and the handler that answers it here."""

    spec: CommandSpec[P, R]
    handler: CommandHandler[P, R]
    #: True for an ``async def`` handler (it may wait); False for a plain function.
    waits: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "waits", inspect.iscoroutinefunction(self.handler))


def command_table(*commands: Command[Any, Any]) -> dict[str, Command[Any, Any]]:
    """The commands by method name."""
    return {command.spec.name: command for command in commands}


# Memory the ``allocate`` command holds on purpose until the worker exits.
_held: list[bytes] = []


def _echo(params: EchoParams, ctx: CommandContext) -> EchoResult:
    return EchoResult(value=params.value)


async def _sleep(params: SleepParams, ctx: CommandContext) -> Slept:
    await trio.sleep(params.seconds)
    return Slept(seconds=params.seconds)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


async def _allocate(params: AllocateParams, ctx: CommandContext) -> Allocated:
    done = 0.0
    while done < params.mb:
        size = int(min(params.step_mb, params.mb - done) * 1024 * 1024)
        try:
            # Multiplying a non-zero byte writes every page, so the memory
            # really becomes resident (a zeroed calloc would not).
            _held.append(b"\x01" * size)
        except MemoryError:
            raise CommandError("memory_error", f"allocation failed after {done:.0f} MB") from None
        done += size / (1024 * 1024)
        await trio.sleep(params.step_delay_s)
    return Allocated(allocated_mb=done, rss_mb=_rss_mb())


async def _burn_cpu(params: BurnCpuParams, ctx: CommandContext) -> CpuBurned:
    limit = params.seconds
    start = time.process_time()
    while limit is None or time.process_time() - start < limit:
        deadline = time.perf_counter() + 0.01
        while time.perf_counter() < deadline:
            pass
        await trio.lowlevel.checkpoint()
    return CpuBurned(cpu_seconds=time.process_time() - start)


async def _crash(params: CrashParams, ctx: CommandContext) -> NoReturn:
    if params.how == "segfault":
        ctypes.string_at(0)
    elif params.how == "exit":
        os._exit(params.code)
    elif params.how == "signal":
        os.kill(os.getpid(), signal.Signals[params.signal])
    else:
        os.abort()
    # A signal this process survives (or a segfault that was not one): it
    # stays, as a crash that did not happen would.
    await trio.sleep_forever()


def _hang(params: HangParams, ctx: CommandContext) -> Slept:
    # Blocks the whole process, event loop included, like a wedged C call.
    time.sleep(params.seconds)
    return Slept(seconds=params.seconds)


async def _flood(params: FloodParams, ctx: CommandContext) -> Flooded:
    payload = "x" * params.size
    for i in range(params.count):
        await ctx.link.emit(FLOOD, FloodItem(seq=i, payload=payload))
    return Flooded(count=params.count)


def _raw_frame(obj: Any) -> bytes:
    body: bytes = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


_FORBIDDEN_FRAMES: dict[ForbiddenFrame, bytes] = {
    # A spawn request: no such message exists on the worker side (S-POL-4).
    "spawn": _raw_frame({"type": "spawn", "worker_id": "grandchild", "limits": {}}),
    # Asking the parent to run an agent: not a method a worker has (S-POL-4).
    "delegate": _raw_frame(
        {"type": "request", "id": 1, "method": "agent.run", "params": {"prompt": "grandchild"}}
    ),
    # Answering its own permission ask: no such message exists for a worker (S-APR-1).
    "approve": _raw_frame({"type": "permission_resolved", "decision": "allow_always"}),
    # A message only the supervisor may send.
    "welcome": _raw_frame({"type": "welcome", "protocol_version": 1, "worker_id": "x"}),
    "shutdown": _raw_frame({"type": "shutdown", "reason": "forged"}),
    # An answer to a request that was never made.
    "unsolicited_response": _raw_frame({"type": "response", "id": 999_999, "result": None}),
    # An event that is not in the table (S-POL-4: events ask for nothing).
    "unknown_event": _raw_frame({"type": "event", "name": "spawn", "data": {}}),
    # An event whose data does not fit its model.
    "bad_event": _raw_frame({"type": "event", "name": "process_group", "data": {"pgid": [7]}}),
    # 0xc1 is never valid msgpack.
    "garbage": struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",
    # A length prefix far beyond the frame size limit.
    "oversized": struct.pack(">I", 0xFFFF_FFF0) + b"\x00" * 16,
}


def _container_frame(kind: ForbiddenFrame) -> bytes:
    """A frame whose model JSON is 32,000 empty lists (64 KB, within the frame's own limits):
    a tool.started, a permission.check or an mcp.call_tool past MAX_JSON_CONTAINERS, the
    input that cost the supervisor 80 ms each to validate and act on (S-SEC-8). Built when
    asked for, not by every worker that imports this module."""
    lists: dict[str, Any] = {"k": [[[]]] * 16_000}
    if kind == "container_event":
        data = {"call_id": "c", "name": "Bash", "input": lists}
        return _raw_frame({"type": "event", "name": "tool.started", "data": data})
    if kind == "container_permission_check":
        params = {"tool": "Bash", "input": lists}
        method = "permission.check"
    else:
        params = {"name": "mcp__server__tool", "arguments": lists}
        method = "mcp.call_tool"
    # An id the worker's own requests never reach (they count up from 0).
    return _raw_frame({"type": "request", "id": 2**62, "method": method, "params": params})


#: The frames ``_container_frame`` builds.
_CONTAINER_FRAMES: frozenset[ForbiddenFrame] = frozenset(
    {"container_event", "container_permission_check", "container_mcp_call"}
)


async def _forbidden(params: ForbiddenParams, ctx: CommandContext) -> NoReturn:
    kind = params.kind
    frame = _container_frame(kind) if kind in _CONTAINER_FRAMES else _FORBIDDEN_FRAMES[kind]
    await ctx.link.write_raw(frame)
    await trio.sleep_forever()


def _open_fds() -> dict[str, str]:
    targets = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            targets[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the fd listdir itself used
    return targets


def _info(params: InfoParams, ctx: CommandContext) -> WorkerInfo:
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_CORE")
    }
    return WorkerInfo(
        pid=os.getpid(),
        ppid=os.getppid(),
        pgid=os.getpgid(0),
        env=dict(os.environ),
        rlimits=limits,
        fds=_open_fds(),
        rss_mb=_rss_mb(),
    )


async def _ask_supervisor(params: EchoParams, ctx: CommandContext) -> EchoResult:
    return await ctx.link.call(ECHO, params)


KERNEL_COMMANDS = command_table(
    Command(KERNEL_ECHO, _echo),
    Command(KERNEL_SLEEP, _sleep),
    Command(KERNEL_ALLOCATE, _allocate),
    Command(KERNEL_BURN_CPU, _burn_cpu),
    Command(KERNEL_CRASH, _crash),
    Command(KERNEL_HANG, _hang),
    Command(KERNEL_FLOOD, _flood),
    Command(KERNEL_FORBIDDEN, _forbidden),
    Command(KERNEL_INFO, _info),
    Command(KERNEL_ASK_SUPERVISOR, _ask_supervisor),
)
