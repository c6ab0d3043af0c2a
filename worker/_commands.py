"""The kernel command set: what a worker can be asked to do before it runs agents.

These exist so the kernel can be tested and benchmarked on its own, with real
processes doing real harm to themselves: allocating memory, burning CPU,
crashing in every way a process can, flooding the pipe and breaking the
protocol on purpose.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import trio

from protocol import ECHO, EchoParams

from ._channel import SupervisorLink

__all__ = ["KERNEL_COMMANDS", "CommandContext", "CommandError", "CommandHandler"]


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


CommandHandler = Callable[[dict[str, Any], CommandContext], Awaitable[Any]]

# Memory the ``allocate`` command holds on purpose until the worker exits.
_held: list[bytes] = []


def _number(params: dict[str, Any], key: str, default: float | None = None) -> float:
    value = params.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise CommandError("bad_params", f"parameter {key!r} must be a number, got {value!r}")
    return float(value)


async def _echo(params: dict[str, Any], ctx: CommandContext) -> Any:
    return params.get("value")


async def _sleep(params: dict[str, Any], ctx: CommandContext) -> float:
    seconds = _number(params, "seconds")
    await trio.sleep(seconds)
    return seconds


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


async def _allocate(params: dict[str, Any], ctx: CommandContext) -> dict[str, float]:
    total_mb = _number(params, "mb")
    step_mb = _number(params, "step_mb", 16)
    delay = _number(params, "step_delay_s", 0.0)
    done = 0.0
    while done < total_mb:
        size = int(min(step_mb, total_mb - done) * 1024 * 1024)
        try:
            # Multiplying a non-zero byte writes every page, so the memory
            # really becomes resident (a zeroed calloc would not).
            _held.append(b"\x01" * size)
        except MemoryError:
            raise CommandError("memory_error", f"allocation failed after {done:.0f} MB") from None
        done += size / (1024 * 1024)
        await trio.sleep(delay)
    return {"allocated_mb": done, "rss_mb": _rss_mb()}


async def _burn_cpu(params: dict[str, Any], ctx: CommandContext) -> float:
    seconds = params.get("seconds")
    limit = None if seconds is None else _number(params, "seconds")
    start = time.process_time()
    while limit is None or time.process_time() - start < limit:
        deadline = time.perf_counter() + 0.01
        while time.perf_counter() < deadline:
            pass
        await trio.lowlevel.checkpoint()
    return time.process_time() - start


async def _crash(params: dict[str, Any], ctx: CommandContext) -> None:
    how = params.get("how")
    if how == "segfault":
        ctypes.string_at(0)
    elif how == "exit":
        os._exit(int(_number(params, "code", 1)))
    elif how == "signal":
        name = str(params.get("signal", "SIGKILL"))
        try:
            sig = signal.Signals[name]
        except KeyError:
            raise CommandError("bad_params", f"unknown signal {name!r}") from None
        os.kill(os.getpid(), sig)
        await trio.sleep_forever()
    elif how == "abort":
        os.abort()
    raise CommandError(
        "bad_params", f"unknown crash kind {how!r}: use segfault, exit, signal, abort"
    )


async def _hang(params: dict[str, Any], ctx: CommandContext) -> None:
    # Blocks the whole process, event loop included, like a wedged C call.
    time.sleep(_number(params, "seconds", 3600))  # noqa: ASYNC251


async def _flood(params: dict[str, Any], ctx: CommandContext) -> int:
    count = int(_number(params, "count"))
    payload = "x" * int(_number(params, "size", 64))
    for i in range(count):
        await ctx.link.emit("flood", {"seq": i, "payload": payload})
    return count


def _raw_frame(obj: Any) -> bytes:
    body: bytes = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


_FORBIDDEN_FRAMES: dict[str, bytes] = {
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
    # 0xc1 is never valid msgpack.
    "garbage": struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",
    # A length prefix far beyond the frame size limit.
    "oversized": struct.pack(">I", 0xFFFF_FFF0) + b"\x00" * 16,
}


async def _forbidden(params: dict[str, Any], ctx: CommandContext) -> None:
    kind = str(params.get("kind", "spawn"))
    frame = _FORBIDDEN_FRAMES.get(kind)
    if frame is None:
        raise CommandError(
            "bad_params", f"unknown frame kind {kind!r}: {sorted(_FORBIDDEN_FRAMES)}"
        )
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


async def _info(params: dict[str, Any], ctx: CommandContext) -> dict[str, Any]:
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_CORE")
    }
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "pgid": os.getpgid(0),
        "env": dict(os.environ),
        "rlimits": limits,
        "fds": _open_fds(),
        "rss_mb": _rss_mb(),
    }


async def _ask_supervisor(params: dict[str, Any], ctx: CommandContext) -> Any:
    answer = await ctx.link.call(ECHO, EchoParams(value=params.get("value")))
    return answer.value


KERNEL_COMMANDS: dict[str, CommandHandler] = {
    "echo": _echo,
    "sleep": _sleep,
    "allocate": _allocate,
    "burn_cpu": _burn_cpu,
    "crash": _crash,
    "hang": _hang,
    "flood": _flood,
    "forbidden": _forbidden,
    "info": _info,
    "ask_supervisor": _ask_supervisor,
}
