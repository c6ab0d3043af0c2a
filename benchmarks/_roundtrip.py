"""Request/response latency: ``WorkerHandle.request(KERNEL_ECHO, ...)`` against baselines.

- subvisor: one zygote worker; each sample is one ``await handle.request``
  (frame encode, protocol checks, pipe write, the worker's trio loop, reply).
- raw_pipe: a peer process (``benchmarks._peers``) on two ``os.pipe``s,
  blocking ``os.read``/``os.write``, 4-byte length prefix + msgpack. The
  messages are the very dicts subvisor puts on the wire, so the bytes per
  message are the same.
- mp_pipe: a ``multiprocessing.Pipe`` (socketpair + pickle) to a ``spawn``
  child, sending the same dicts.
- trio_pipe: the raw peer's echo with trio on both ends and no protocol.

All series run interleaved in rounds (the order rotating each round), so a
burst of machine noise lands on all of them alike; percentiles are over all
samples of all rounds.

Two in-process series, no I/O, bound what any event loop could reach:
``protocol_cpu`` is one round trip through both ends' ``Connection`` (model,
encode, decode, validate, state checks: what subvisor does per round trip
besides waiting), ``raw_codec_cpu`` the same for the raw peer's bare msgpack.
``floor_ratio_vs_raw`` is the raw round trip plus the protocol's extra CPU,
over the raw round trip: the ratio subvisor would show if both event loops
cost nothing. Run hot in one process, both series are lower bounds.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection as MpConnection
from typing import Any

import msgpack
import trio

from protocol import (
    KERNEL_ECHO,
    PROTOCOL_VERSION,
    Connection,
    EchoParams,
    EchoResult,
    Hello,
    Response,
    Role,
    SupervisorRequest,
    Welcome,
    encode_frame,
)
from supervisor import Supervisor, SupervisorConfig, WorkerHandle
from worker import PipeStream

from . import Report
from ._peers import HEADER, FrameReader, mp_pipe_echo, reply_to, write_all
from ._stats import percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"ratio_vs_raw": ("<=", 2.0)}

_METHODS = ("subvisor", "raw_pipe", "mp_pipe", "trio_pipe", "protocol_cpu", "raw_codec_cpu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--samples", type=int, default=1000, help="round trips per method per round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=200, help="discarded round trips per method")
    parser.add_argument("--payload-bytes", type=int, default=64, help="size of the echoed string")
    parser.add_argument(
        "--cpus",
        default=None,
        help="pin this process, and so every process it starts, to these CPUs (e.g. 0 or 0,1): "
        "takes cross-CPU wake-ups out of the comparison",
    )


def _request(request_id: int, payload: str) -> dict[str, Any]:
    """The dict subvisor encodes for ``request(KERNEL_ECHO, EchoParams(value=payload))``."""
    message = KERNEL_ECHO.request_for(request_id, EchoParams(value=payload))
    wire: dict[str, Any] = message.model_dump(mode="python")
    return wire


@dataclass
class _RawPeer:
    process: subprocess.Popen[bytes]
    write_fd: int
    reader: FrameReader

    def round_trip(self, request: dict[str, Any]) -> Any:
        body: bytes = msgpack.packb(request, use_bin_type=True)
        write_all(self.write_fd, HEADER.pack(len(body)) + body)
        reply = self.reader.read_frame()
        assert reply is not None, "raw peer hung up"
        return msgpack.unpackb(reply, raw=False)


@contextlib.contextmanager
def _raw_peer(*flags: str) -> Iterator[_RawPeer]:
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._peers", *flags, str(down_r), str(up_w)],
            pass_fds=(down_r, up_w),
        )
    finally:
        os.close(down_r)
        os.close(up_w)
    try:
        yield _RawPeer(process, down_w, FrameReader(up_r))
    finally:
        os.close(down_w)
        os.close(up_r)
        process.wait(timeout=10)


@contextlib.contextmanager
def _mp_peer() -> Iterator[MpConnection]:
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=mp_pipe_echo, args=(theirs,), daemon=True)
    process.start()
    theirs.close()
    try:
        yield ours
    finally:
        ours.close()
        process.join(timeout=10)
        if process.exitcode is None:
            process.kill()
            process.join()


def _connected_pair() -> tuple[Connection, Connection]:
    """A supervisor and a worker ``Connection`` past the handshake."""
    ours, theirs = Connection(Role.SUPERVISOR), Connection(Role.WORKER)
    hello = Hello(
        protocol_version=PROTOCOL_VERSION,
        worker_id="w",
        pid=os.getpid(),
        pgid=os.getpgid(0),
        spawn_mode="zygote",
        rlimits={},
    )
    ours.receive_data(theirs.send(hello))
    theirs.receive_data(ours.send(Welcome(protocol_version=PROTOCOL_VERSION, worker_id="w")))
    return ours, theirs


def _protocol_round(count: int, payload: str, out: list[float]) -> None:
    """Both ends' protocol work for ``request(KERNEL_ECHO)``, with the pipe taken out.

    As in ``WorkerHandle.request`` and the worker's runtime: the params model
    built, the request sent and decoded (params validated), the result model
    built, sent and decoded, and the result validated against its model.
    """
    ours, theirs = _connected_pair()
    for _ in range(count):
        started = time.perf_counter_ns()
        request_id = ours.next_request_id()
        frame = ours.send(KERNEL_ECHO.request_for(request_id, EchoParams(value=payload)))
        [request] = theirs.receive_data(frame)
        assert isinstance(request, SupervisorRequest)
        answer = EchoResult(value=request.params.value)  # type: ignore[attr-defined]
        [reply] = ours.receive_data(theirs.send(Response.answering(request.id, answer)))
        assert isinstance(reply, Response)
        result = KERNEL_ECHO.parse_result(reply.result)
        out.append((time.perf_counter_ns() - started) / 1000)
        assert result.value == payload, result


def _raw_codec_round(count: int, payload: str, out: list[float]) -> None:
    """The raw peer's and its client's Python work per round trip, with the pipe taken out."""
    for i in range(count):
        message = _request(i, payload)
        started = time.perf_counter_ns()
        body: bytes = msgpack.packb(message, use_bin_type=True)
        frame = HEADER.pack(len(body)) + body
        request = msgpack.unpackb(frame[HEADER.size :], raw=False)
        reply: bytes = msgpack.packb(reply_to(request), use_bin_type=True)
        answer = msgpack.unpackb((HEADER.pack(len(reply)) + reply)[HEADER.size :], raw=False)
        out.append((time.perf_counter_ns() - started) / 1000)
        assert answer["result"]["value"] == payload, answer


def _sync_round(
    round_trip: Callable[[dict[str, Any]], Any], count: int, payload: str, out: list[float]
) -> None:
    for i in range(count):
        request = _request(i, payload)
        started = time.perf_counter_ns()
        reply = round_trip(request)
        out.append((time.perf_counter_ns() - started) / 1000)
        assert reply == reply_to(request), reply


async def _subvisor_round(handle: WorkerHandle, count: int, payload: str, out: list[float]) -> None:
    for _ in range(count):
        started = time.perf_counter_ns()
        result = await handle.request(KERNEL_ECHO, EchoParams(value=payload))
        out.append((time.perf_counter_ns() - started) / 1000)
        assert result.value == payload, result


async def _trio_round(pipe: PipeStream, count: int, payload: str, out: list[float]) -> None:
    for i in range(count):
        request = _request(i, payload)
        started = time.perf_counter_ns()
        body: bytes = msgpack.packb(request, use_bin_type=True)
        await pipe.send_all(HEADER.pack(len(body)) + body)
        data = b""
        while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
            data += await pipe.receive_some(65536)
        reply = msgpack.unpackb(data[HEADER.size :], raw=False)
        out.append((time.perf_counter_ns() - started) / 1000)
        assert reply == reply_to(request), reply


async def _measure(
    raw: _RawPeer,
    mp_conn: MpConnection,
    trio_peer: _RawPeer,
    args: argparse.Namespace,
    payload: str,
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {method: [] for method in _METHODS}

    def mp_round_trip(request: dict[str, Any]) -> Any:
        mp_conn.send(request)
        return mp_conn.recv()

    # Our end of the trio peer's pipes, driven by trio like the supervisor's.
    trio_pipe = PipeStream(trio_peer.reader.fd, trio_peer.write_fd)
    async with Supervisor(SupervisorConfig(max_workers=2)) as sup:
        handle = await sup.spawn()

        async def one(method: str, count: int, out: list[float]) -> None:
            if method == "subvisor":
                await _subvisor_round(handle, count, payload, out)
            elif method == "trio_pipe":
                await _trio_round(trio_pipe, count, payload, out)
            elif method == "raw_pipe":
                _sync_round(raw.round_trip, count, payload, out)
            elif method == "protocol_cpu":
                _protocol_round(count, payload, out)
            elif method == "raw_codec_cpu":
                _raw_codec_round(count, payload, out)
            else:
                _sync_round(mp_round_trip, count, payload, out)

        for method in _METHODS:
            await one(method, max(0, args.warmup), [])
        for r in range(max(1, args.rounds)):
            order = _METHODS[r % len(_METHODS) :] + _METHODS[: r % len(_METHODS)]
            for method in order:
                await one(method, max(1, args.samples), samples[method])
        await handle.kill("benchmark done")
    return samples


def run(args: argparse.Namespace) -> Report:
    payload = "x" * max(0, args.payload_bytes)
    if args.cpus:
        # Inherited by the zygote (and so every worker) and both peers.
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})
    with _raw_peer() as raw, _mp_peer() as mp_conn, _raw_peer("--trio") as trio_peer:
        samples = trio.run(_measure, raw, mp_conn, trio_peer, args, payload)
    report: Report = {}
    for method in _METHODS:
        report[f"{method}_p50_us"] = rounded(percentile(samples[method], 50), 1)
    report["ratio_vs_raw"] = rounded(report["subvisor_p50_us"] / report["raw_pipe_p50_us"], 2)
    # The same echo with trio on both ends: what subvisor adds over trio itself.
    report["ratio_vs_trio_pipe"] = rounded(
        report["subvisor_p50_us"] / report["trio_pipe_p50_us"], 2
    )
    extra_cpu = report["protocol_cpu_p50_us"] - report["raw_codec_cpu_p50_us"]
    report["floor_ratio_vs_raw"] = rounded(
        (report["raw_pipe_p50_us"] + extra_cpu) / report["raw_pipe_p50_us"], 2
    )
    for method in _METHODS:
        report[f"{method}_p95_us"] = rounded(percentile(samples[method], 95), 1)
    report["ratio_vs_raw_p95"] = rounded(report["subvisor_p95_us"] / report["raw_pipe_p95_us"], 2)
    report["samples"] = len(samples["subvisor"])
    report["request_frame_bytes"] = len(encode_frame(_request(1, payload)))
    report["cpus"] = len(os.sched_getaffinity(0))
    return report
