"""Model traffic at fleet scale: N subagents each streaming one answer through the gateway.

A scripted root fans out N subagents in one message (caps raised to N);
each subagent's profile names a local OpenAI-compatible server
(``benchmarks._stream_server``, a subprocess) that answers every call with
``--chunks`` chunks at ``--rate`` chunks per second, so one answer ideally
takes ``chunks / rate`` seconds. The scripted twin runs the same fan-out
with a scripted model that waits that long and streams nothing: the
difference is what relaying the chunks costs.

Per N:

- ``cpu_us_per_chunk``: CPU of the supervisor process and of the gateway's
  processes during the run, per chunk relayed (``supervisor_cpu_us_per_chunk``
  the supervisor's alone); ``relay_cpu_us_per_chunk`` the same less the
  twin's CPU (spawning, the store, teardown), so what the chunks alone cost.
  A gateway process's start (``gateway_processes_start_cpu_s``, once per
  supervisor) is left out of both.
- ``stream_s_p50``/``stream_s_max``: from a call's request to the end of its
  stream, against ``ideal_s``; ``stream_over_ideal`` is the max over ideal.
- ``chunk_lag_*_ms``: each chunk's server write to its arrival in the
  supervisor, where a live transcript takes it (the server stamps
  ``time.monotonic()``, the machine's one clock, into it).
- ``loop_delay_p50_ms``/``loop_delay_p99_ms``: how late the supervisor's
  event loop woke a task that sleeps ``_TICK_S`` over and over during the
  run (``twin_loop_delay_p99_ms`` the twin's): the part of the chunk lag,
  and of any launch, approval or notification, that waits for the
  supervisor's own loop rather than in front of it.
- ``full_collections``, ``collector_cpu_s`` and ``collector_longest_ms``:
  the supervisor's cyclic garbage collections during the root's turn (each stops
  its event loop): how many were full, their CPU in all, and the longest
  one's CPU.
- ``launch_spread_s``: first worker ready to last worker ready, and the twin's.
- ``gateway_cgroup``: whether the gateway processes had a cpu cgroup of their
  own, weighing four times the fleet (``HelperCgroup``); ``gateway_nice_ahead``:
  how many nice levels they ran ahead of the supervisor (5 where they may, 0
  where not). Both absent without them.
- ``wall_s`` and ``twin_wall_s``: the root's whole turn.

The chunk lag and stream times are read where the supervisor's gateway
hands each piece of text on (``_probing``), so they include reading, parsing
and relaying the chunk from a gateway process.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import trio

from protocol import ModelRequest, ModelStreamDelta, ResourceLimits
from supervisor import RootSession, Subvisor, SubvisorSettings
from supervisor.providers import GatewayConfig, ModelEvent, ModelGateway

from . import Report
from ._stats import percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS: dict[str, tuple[str, float]] = {}

_STAMP = re.compile(r"<(\d+\.\d{6})>")
_PROFILE = """---
name: streamer
description: Streams one answer.
model: {model}
tools: Read
---
Answer the prompt.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agents",
        default="50,200,500",
        help="comma-separated fleet sizes N, each one streaming subagent per N",
    )
    parser.add_argument("--chunks", type=int, default=200, help="chunks per answer")
    parser.add_argument("--rate", type=float, default=50.0, help="chunks per second per answer")
    parser.add_argument("--no-twin", action="store_true", help="skip the scripted twin")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS (a throwaway CA from trustme, trusted through SSL_CERT_FILE)",
    )


@dataclass
class _Probe:
    """What the lag probe saw: each piece of text with when it came, and per-call stream times.

    The stamps are read only after the run (``lags``): reading them as the
    text arrives would put the probe's own regular expression on the
    supervisor's loop, in the lag and the CPU figures it measures.
    """

    # Two lists of atoms, not one of pairs: the collector never walks them.
    times: list[float] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    streams: list[float] = field(default_factory=list)

    def lags(self) -> list[float]:
        """Each chunk's lag, in seconds: from its server write to its arrival."""
        return [
            came - float(stamp)
            for came, text in zip(self.times, self.texts, strict=True)
            for stamp in _STAMP.findall(text)
        ]


@contextlib.contextmanager
def _probing(probe: _Probe) -> Iterator[None]:
    """Route ``ModelGateway.stream`` through ``probe`` while the block runs.

    Every gateway call streams through ``stream``, its text going to the
    caller's ``on_text`` as the gateway hands it on; the probe notes each
    piece with the time it came (its stamps are read after the run), and
    times the call from its start to its result.
    """
    original = ModelGateway.stream

    async def stream(
        self: ModelGateway, request: ModelRequest, **options: Any
    ) -> AsyncGenerator[ModelEvent, None]:
        started, streamed = time.monotonic(), False
        on_text = options.get("on_text")

        def stamped(text: str) -> None:
            nonlocal streamed
            probe.times.append(time.monotonic())
            probe.texts.append(text)
            streamed = True
            if on_text is not None:
                on_text(text)

        options["on_text"] = stamped
        async with aclosing(original(self, request, **options)) as events:
            async for event in events:
                if isinstance(event, ModelStreamDelta):
                    stamped(event.text)
                elif streamed:
                    # The caller stops at the result: time the stream now.
                    probe.streams.append(time.monotonic() - started)
                yield event

    ModelGateway.stream = stream  # type: ignore[method-assign]
    try:
        yield
    finally:
        ModelGateway.stream = original  # type: ignore[method-assign]


#: The loop-delay probe's period; its 200 wake-ups a second cost the supervisor
#: about 2 ms of CPU a second.
_TICK_S = 0.005


async def _probe_loop_delay(delays: list[float]) -> None:
    """Sleep ``_TICK_S`` again and again, noting how late each wake-up came."""
    while True:
        due = trio.current_time() + _TICK_S
        await trio.sleep_until(due)
        delays.append(trio.current_time() - due)


class _CollectorProbe:
    """The supervisor's garbage collections while it is installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.full = 0
        self.cpu_s = 0.0
        self.longest_s = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        spent = time.thread_time() - self._started
        self.cpu_s += spent
        self.longest_s = max(self.longest_s, spent)
        self.full += info["generation"] == 2

    @contextlib.contextmanager
    def installed(self) -> Iterator[_CollectorProbe]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


@dataclass
class _Run:
    wall_s: float
    cpu_s: float
    completed: int
    launch_spread_s: float
    loop_delays: list[float]
    collector: _CollectorProbe
    gateway_cpu_s: float = 0.0
    gateway_start_cpu_s: float = 0.0
    #: How many nice levels its gateway processes ran ahead of the supervisor (None: no pool).
    gateway_ahead_by: int | None = None
    #: Whether they had a cpu cgroup of their own (None: no pool).
    gateway_cgroup: bool | None = None


def _write_fixture(work: Path, agents: int, model: str, latency_ms: float) -> None:
    (work / "tree").mkdir(exist_ok=True)
    agent_dir = work / "home" / "agents"
    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "streamer.md").write_text(_PROFILE.format(model=model))
    calls = [
        {
            "name": "Agent",
            "input": {
                "description": f"agent {i}",
                "prompt": "answer",
                "subagent_type": "streamer",
            },
        }
        for i in range(agents)
    ]
    scenario = {
        "agents": {
            "root": [{"tool_calls": calls}, {"text": "done"}],
            "streamer": [{"text": "a scripted answer", "latency_ms": latency_ms}],
        }
    }
    (work / "scenario.json").write_text(json.dumps(scenario))


async def _fan_out(work: Path, agents: int, base_url: str) -> _Run:
    settings = SubvisorSettings(
        home=work / "home",
        max_concurrent_subagents=agents,
        max_subagents_per_session=agents,
        subagent_limits=ResourceLimits(memory_mb=1024, idle_timeout_s=120),
        gateway=GatewayConfig.model_validate(
            {
                "max_concurrency": agents,
                "max_retries": 0,
                "providers": {
                    "bench": {
                        "api": "openai",
                        "base_url": base_url,
                        "read_timeout_s": 120,
                    }
                },
            }
        ),
    )
    cpu_before = _cpu_seconds()
    delays: list[float] = []
    async with Subvisor(settings) as host:
        root = RootSession(host, model=f"scripted:{work / 'scenario.json'}", cwd=work / "tree")
        started = time.perf_counter()
        with _CollectorProbe().installed() as collector:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_probe_loop_delay, delays)
                await root.run("delegate")
                nursery.cancel_scope.cancel()
        wall = time.perf_counter() - started
        records = host.registry.list(root.session_id)
        completed = sum(r.status == "completed" for r in records)
        ready = [run.ready_at for run in host.runs.values() if run.ready_at is not None]
        spread = max(ready) - min(ready) if ready else 0.0
        gateway_cpu = host.gateway.process_cpu_seconds(starting=False)
        gateway_start = host.gateway.process_cpu_seconds() - gateway_cpu
        pool = host.gateway.pool
        ahead = _nice_steps_ahead(pool.pids if pool else [])
        weighted = pool.cpu_weight_error == "" if pool and pool.pids else None
    cpu = _cpu_seconds() - cpu_before
    return _Run(
        wall,
        cpu,
        completed,
        spread,
        delays or [0.0],
        collector,
        gateway_cpu,
        gateway_start,
        ahead,
        weighted,
    )


def _nice_steps_ahead(pids: list[int]) -> int | None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    steps = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            steps.append(ours - os.getpriority(os.PRIO_PROCESS, pid))
    return min(steps) if steps else None


def _measure(agents: int, args: argparse.Namespace, base_url: str, twin: bool) -> Report:
    chunks = max(1, args.chunks)
    ideal_s = chunks / max(0.1, args.rate)
    report: Report = {}
    with tempfile.TemporaryDirectory(prefix="subvisor-relay-") as tmp:
        work = Path(tmp)
        _write_fixture(work, agents, "bench:gpt-bench", ideal_s * 1000)
        probe = _Probe()
        with _probing(probe):
            relay = trio.run(_fan_out, work, agents, base_url)
    lags = probe.lags()
    relayed = max(1, len(lags))
    report[f"n{agents}_completed"] = relay.completed
    report[f"n{agents}_chunks"] = len(lags)
    report[f"n{agents}_wall_s"] = rounded(relay.wall_s)
    report[f"n{agents}_ideal_s"] = rounded(ideal_s)
    streams = probe.streams or [0.0]
    report[f"n{agents}_stream_s_p50"] = rounded(percentile(streams, 50))
    report[f"n{agents}_stream_s_max"] = rounded(max(streams))
    report[f"n{agents}_stream_over_ideal"] = rounded(max(streams) / ideal_s, 2)
    lags = lags or [0.0]
    report[f"n{agents}_chunk_lag_mean_ms"] = rounded(sum(lags) / len(lags) * 1000, 2)
    report[f"n{agents}_chunk_lag_p99_ms"] = rounded(percentile(lags, 99) * 1000, 2)
    report[f"n{agents}_chunk_lag_max_ms"] = rounded(max(lags) * 1000, 2)
    report[f"n{agents}_cpu_s"] = rounded(relay.cpu_s + relay.gateway_cpu_s)
    report[f"n{agents}_gateway_processes_cpu_s"] = rounded(relay.gateway_cpu_s)
    # Once per supervisor, not per chunk: their imports, before their first call.
    report[f"n{agents}_gateway_processes_start_cpu_s"] = rounded(relay.gateway_start_cpu_s)
    report[f"n{agents}_supervisor_cpu_us_per_chunk"] = rounded(relay.cpu_s / relayed * 1e6, 1)
    report[f"n{agents}_cpu_us_per_chunk"] = rounded(
        (relay.cpu_s + relay.gateway_cpu_s) / relayed * 1e6, 1
    )
    report[f"n{agents}_loop_delay_p50_ms"] = rounded(percentile(relay.loop_delays, 50) * 1000)
    report[f"n{agents}_loop_delay_p99_ms"] = rounded(percentile(relay.loop_delays, 99) * 1000)
    report[f"n{agents}_full_collections"] = relay.collector.full
    report[f"n{agents}_collector_cpu_s"] = rounded(relay.collector.cpu_s)
    report[f"n{agents}_collector_longest_ms"] = rounded(relay.collector.longest_s * 1000)
    report[f"n{agents}_launch_spread_s"] = rounded(relay.launch_spread_s)
    if relay.gateway_ahead_by is not None:
        report[f"n{agents}_gateway_nice_ahead"] = relay.gateway_ahead_by
    if relay.gateway_cgroup is not None:
        report[f"n{agents}_gateway_cgroup"] = relay.gateway_cgroup
    if twin:
        with tempfile.TemporaryDirectory(prefix="subvisor-relay-twin-") as tmp:
            work = Path(tmp)
            scripted = f"scripted:{work / 'scenario.json'}"
            _write_fixture(work, agents, scripted, ideal_s * 1000)
            scripted_run = trio.run(_fan_out, work, agents, base_url)
        report[f"n{agents}_twin_completed"] = scripted_run.completed
        report[f"n{agents}_twin_wall_s"] = rounded(scripted_run.wall_s)
        report[f"n{agents}_twin_cpu_s"] = rounded(scripted_run.cpu_s)
        report[f"n{agents}_twin_launch_spread_s"] = rounded(scripted_run.launch_spread_s)
        report[f"n{agents}_twin_loop_delay_p99_ms"] = rounded(
            percentile(scripted_run.loop_delays, 99) * 1000
        )
        net = max(0.0, relay.cpu_s + relay.gateway_cpu_s - scripted_run.cpu_s)
        report[f"n{agents}_relay_cpu_us_per_chunk"] = rounded(net / relayed * 1e6, 1)
    return report


def run(args: argparse.Namespace) -> Report:
    sizes = [max(1, int(n)) for n in str(args.agents).split(",") if n.strip()]
    with tempfile.TemporaryDirectory(prefix="subvisor-relay-tls-") as keys:
        tls = _tls_files(Path(keys)) if args.tls else []
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks._stream_server",
                "--chunks",
                str(max(1, args.chunks)),
                "--rate",
                str(args.rate),
                *tls,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # A session of its own stands for a provider elsewhere: with autogroup
            # scheduling, in the benchmark's session its CPU (a quarter of a core
            # at N = 500) would come out of the supervisor's and the gateway's share.
            start_new_session=True,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            base_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1"
            report: Report = {
                "chunks_per_answer": max(1, args.chunks),
                "rate": args.rate,
                "tls": bool(tls),
            }
            # Trusted as a user's private CA would be, here and in the gateway's processes.
            trusting = {"SSL_CERT_FILE": str(Path(keys) / "ca.pem")} if tls else {}
            with mock.patch.dict(os.environ, trusting):
                for agents in sizes:
                    report.update(_measure(agents, args, base_url, twin=not args.no_twin))
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=10)
    return report


def _tls_files(folder: Path) -> list[str]:
    """A throwaway CA's certificate for 127.0.0.1, in ``folder``: the server's arguments."""
    try:
        import trustme
    except ImportError:
        raise SystemExit("relay --tls needs trustme: pip install -e '.[test]'") from None
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    issued.private_key_pem.write_to_path(str(folder / "key.pem"))
    return ["--cert", str(folder / "cert.pem"), "--key", str(folder / "key.pem")]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
