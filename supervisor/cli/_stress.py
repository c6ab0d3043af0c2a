"""``subvisor stress``: many scripted subagents, faults injected, and an audit of what was lost.

A root delegates N scripted subagents in one message (a mix of foreground
and background), each doing real tool calls on a temporary tree; a share of
them crash for real (segfault, exit, oom, hang). Afterwards every launched
agent must have exactly one terminal record, and every background one
exactly one notification: anything else is reported as lost or duplicated,
and the command fails. A launch beyond ``max_subagents_per_session`` must
instead be refused with the cap's error, and is counted as failed, not lost.

Per-agent timings (for ``--report``) are read from what the host keeps
anyway, after the run: recording them costs the run nothing.
"""

from __future__ import annotations

import contextlib
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil
import trio
from rich.console import Console

from protocol import ResourceLimits

from ..delegation._root import RootSession
from ..delegation._settings import SubvisorSettings
from ..delegation._subagents import SubagentRun
from ..delegation._subvisor import Subvisor
from ..files._untrusted_yaml import dump_yaml
from ..kernel import Supervisor
from ..state._paths import subvisor_home
from ..state._store import SessionStore
from ..state._task_record import TaskRecord
from ._control import serve_control
from ._interrupt import RunInterruptedError, interruptible

__all__ = [
    "FAULTS",
    "AgentTiming",
    "StressOptions",
    "StressProgress",
    "StressResult",
    "parse_latency",
    "progress_bar",
    "run_stress",
]

Fault = Literal["segfault", "exit", "oom", "hang"]
FAULTS: tuple[Fault, ...] = ("segfault", "exit", "oom", "hang")

#: How an Agent call refused by the per-session cap reads (``supervisor.delegation._agent_tool``).
_CAP_ERROR = "max_subagents_per_session"
REFUSED_REASON = f"refused: {_CAP_ERROR}"


def parse_latency(spec: str) -> tuple[float, float]:
    """``"N"`` or ``"LOW-HIGH"`` milliseconds as ``(low, high)``; ValueError says what is wrong."""
    low_text, dash, high_text = spec.strip().partition("-")
    try:
        low = float(low_text)
        high = float(high_text) if dash else low
    except ValueError:
        raise ValueError(
            f"--latency-ms must be N or LOW-HIGH in milliseconds (for example 10 or 5-50), "
            f"not {spec!r}"
        ) from None
    if not 0 <= low <= high:
        raise ValueError(f"--latency-ms {spec!r}: need 0 <= LOW <= HIGH")
    return low, high


@dataclass(frozen=True, slots=True)
class StressOptions:
    """What to run: the mix, the faults and the caps. Bad values raise ValueError."""

    agents: int
    #: Workers alive at once: the run's ``max_concurrent_subagents``.
    concurrency: int
    background_ratio: float = 0.5
    fault_rate: float = 0.0
    #: Some of ``FAULTS``.
    faults: tuple[str, ...] = FAULTS
    turns: int = 2
    #: Per model turn, milliseconds: ``N`` or ``LOW-HIGH`` (uniform).
    latency_ms: str = "10"
    seed: int = 0
    idle_timeout_s: float = 5.0
    #: None: as many as ``agents`` (none refused).
    max_subagents_per_session: int | None = None
    #: The Ray cluster to run the workers on (``--ray``); None: this machine.
    ray_address: str | None = None

    def __post_init__(self) -> None:
        checks = (
            (self.agents >= 1, f"--agents must be at least 1, not {self.agents}"),
            (self.concurrency >= 1, f"--concurrency must be at least 1, not {self.concurrency}"),
            (
                0 <= self.background_ratio <= 1,
                f"--background-ratio must be within 0..1, not {self.background_ratio}",
            ),
            (0 <= self.fault_rate <= 1, f"--fault-rate must be within 0..1, not {self.fault_rate}"),
            (self.turns >= 1, f"--turns must be at least 1, not {self.turns}"),
            (self.idle_timeout_s > 0, f"--idle-timeout must be over 0, not {self.idle_timeout_s}"),
            (
                self.max_subagents_per_session is None or self.max_subagents_per_session >= 1,
                "--max-subagents-per-session must be at least 1, not "
                f"{self.max_subagents_per_session}",
            ),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        unknown = [f for f in self.faults if f not in FAULTS]
        if unknown:
            raise ValueError(f"unknown fault(s) {', '.join(unknown)}: use {', '.join(FAULTS)}")
        parse_latency(self.latency_ms)

    @property
    def session_cap(self) -> int:
        """The run's ``max_subagents_per_session``."""
        return self.max_subagents_per_session or self.agents


@dataclass(frozen=True, slots=True)
class AgentTiming:
    """One planned agent's life, in seconds since the run started (None: never reached)."""

    name: str
    task_id: str | None
    background: bool
    #: The fault the scenario planned for it, if any.
    fault: str | None
    status: Literal["completed", "failed", "killed", "refused"]
    #: Why it failed (as in ``failed_by_reason``); None when it completed.
    reason: str | None
    #: The root's Agent call reached the host.
    requested_s: float
    #: Its worker process existed (a slot was free and the fork done).
    worker_started_s: float | None = None
    #: The worker's handshake was done; the agent runs from here.
    ready_s: float | None = None
    #: Its terminal record was written.
    ended_s: float | None = None
    #: Its worker process was reaped (the slot is free again).
    worker_exited_s: float | None = None
    #: Its notification reached the root (background agents only).
    notified_s: float | None = None

    @property
    def outcome(self) -> str:
        """``completed``, or the status and reason: ``failed: idle watchdog``."""
        return self.status if self.reason is None else f"{self.status}: {self.reason}"


@dataclass(frozen=True, slots=True)
class StressProgress:
    """Counts while a run goes on, for a progress bar."""

    #: Launches the run expects to go through (planned agents within the session cap).
    total: int
    launched: int
    #: Worker processes alive now.
    live_workers: int
    completed: int
    failed: int
    #: Agents whose model call waits for a gateway slot now.
    waiting_for_model: int = 0


@dataclass(frozen=True, slots=True)
class StressResult:
    """A finished run: the summary (``--json``) and each agent's timings (``--report``)."""

    options: StressOptions
    summary: dict[str, Any]
    timings: tuple[AgentTiming, ...] = field(default=())


ProgressCallback = Callable[[StressProgress], None]


def _scenario(
    options: StressOptions, rng: random.Random
) -> tuple[dict[str, Any], dict[str, str | None], dict[str, bool]]:
    low, high = parse_latency(options.latency_ms)
    calls: list[dict[str, Any]] = []
    planned: dict[str, str | None] = {}
    backgrounds: dict[str, bool] = {}
    scenario: dict[str, Any] = {}
    faults = options.faults
    for i in range(options.agents):
        name = f"agent {i}"
        background = rng.random() < options.background_ratio
        fault = rng.choice(faults) if faults and rng.random() < options.fault_rate else None
        planned[name] = fault
        backgrounds[name] = background
        calls.append(
            {
                "name": "Agent",
                "input": {
                    "description": name,
                    "prompt": f"inspect part {i}",
                    "run_in_background": background,
                },
            }
        )
        steps: list[dict[str, Any]] = []
        for turn in range(options.turns - 1):
            tool = (
                {"name": "Grep", "input": {"pattern": f"line {turn}", "path": f"f{i % 8}.txt"}}
                if turn % 2
                else {"name": "Read", "input": {"file_path": f"f{i % 8}.txt"}}
            )
            steps.append({"tool_calls": [tool], "latency_ms": rng.uniform(low, high)})
        steps.append({"text": f"agent {i} done", "latency_ms": rng.uniform(low, high)})
        if fault is not None:
            steps[min(len(steps) - 1, rng.randrange(len(steps)))]["fault"] = fault
        scenario[name] = steps
    root = [{"tool_calls": calls}, {"text": "launched"}] + [{"text": "noted"}] * (
        options.agents + 1
    )
    return {"agents": {"root": root, **scenario}}, planned, backgrounds


def _progress(runs: Mapping[str, SubagentRun], fleet: Supervisor, total: int) -> StressProgress:
    live = list(runs.values())
    ended = [run.record for run in live if run.done.is_set() and run.record is not None]
    completed = sum(record.status == "completed" for record in ended)
    return StressProgress(
        total=total,
        launched=len(live),
        live_workers=len(fleet.workers),
        completed=completed,
        failed=len(ended) - completed,
        waiting_for_model=sum(run.waiting_for_model for run in live),
    )


@dataclass
class _Peaks:
    """The highest figures seen while the stress run went on."""

    rss: int
    workers: int = 0
    waiting: int = 0


async def _sample_peaks(
    peaks: _Peaks,
    runs: Mapping[str, SubagentRun],
    fleet: Supervisor,
    report: Callable[[], None] | None,
) -> None:
    """Until cancelled: every 50 ms the peaks, every 200 ms a progress ``report``."""
    me = psutil.Process()
    tick = 0
    while True:
        peaks.workers = max(peaks.workers, len(fleet.workers))
        peaks.waiting = max(peaks.waiting, sum(run.waiting_for_model for run in runs.values()))
        peaks.rss = max(peaks.rss, me.memory_info().rss)
        if report is not None and tick % 4 == 0:
            report()
        tick += 1
        await trio.sleep(0.05)


def _run_timings(runs: Iterable[SubagentRun]) -> dict[str, dict[str, Any]]:
    """Each run's launch, readiness and worker times, by task id."""
    return {
        run.task_id: {
            "requested": run.started_at,
            "ready": run.ready_at,
            "worker_started": run.worker_started_at,
            "node": run.worker_node,
            "worker_wall": run.worker_wall_seconds,
        }
        for run in runs
    }


def _root_facts(root: RootSession, store: SessionStore) -> dict[str, Any]:
    """What the root's transcript and events say: notifications, refusals, call times."""
    messages = root.loop.messages
    notified_ids = [
        task_id
        for message in messages
        if message.role == "user"
        for task_id in re.findall(r"<task-id>(.*?)</task-id>", message.content)
    ]
    agent_calls = {
        call.id: str(call.input.get("description"))
        for message in messages
        if message.role == "assistant"
        for call in message.tool_calls
        if call.name == "Agent"
    }
    refusals = {
        agent_calls[message.tool_call_id]: message.content
        for message in messages
        if message.role == "tool"
        and message.is_error
        and message.tool_call_id in agent_calls
        and _CAP_ERROR in message.content
    }
    call_times: dict[str, dict[str, float]] = {}
    for event in store.events(root.session_id):
        if event.name in ("tool.started", "tool.finished"):
            call_id = event.data.get("call_id")
            if call_id in agent_calls:
                call_times.setdefault(agent_calls[call_id], {})[event.name] = event.ts
    return {"notified_ids": notified_ids, "refusals": refusals, "call_times": call_times}


async def _drive(
    work: Path, model: str, options: StressOptions, on_progress: ProgressCallback | None
) -> dict[str, Any]:
    settings = SubvisorSettings(
        home=work / "home",
        max_concurrent_subagents=options.concurrency,
        max_subagents_per_session=options.session_cap,
        subagent_limits=ResourceLimits(memory_mb=256, idle_timeout_s=options.idle_timeout_s),
        placement="ray" if options.ray_address is not None else "local",
        ray_address=options.ray_address or "auto",
    )
    peaks = _Peaks(rss=psutil.Process().memory_info().rss)
    expected = min(options.agents, options.session_cap)
    async with (
        interruptible() as interruption,
        Subvisor(settings) as host,
        contextlib.AsyncExitStack() as control,
    ):
        store, registry, runs, fleet = host.store, host.registry, host.runs, host.fleet
        root = RootSession(host, model=model, cwd=work / "tree")
        # `subvisor top` finds live sessions in the user's SUBVISOR_HOME, not the temporary one.
        await control.enter_async_context(
            serve_control(host, root.session_id, root=root, home=subvisor_home())
        )

        def report() -> None:
            if on_progress is not None:
                on_progress(_progress(runs, fleet, expected))

        # One instant on each clock the timings come from, to put them on one axis.
        clocks = {"epoch": time.time(), "monotonic": time.monotonic(), "trio": trio.current_time()}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_sample_peaks, peaks, runs, fleet, report if on_progress else None)
            # Ctrl-C and SIGTERM: every worker is stopped, then the run ends (S-SEC-6).
            nursery.start_soon(interruption.stop_on_signal, host.stop_all, nursery.cancel_scope)
            await root.run("stress")
            nursery.cancel_scope.cancel()
        if interruption.signum is not None:
            store.set_session_status(root.session_id, "interrupted", interruption.reason)
            raise RunInterruptedError(interruption)
        wall = time.monotonic() - clocks["monotonic"]
        report()
        return {
            "records": registry.list(root.session_id),
            "stored": store.tasks_for_session(root.session_id),
            "runs": _run_timings(runs.values()),
            "delivered": dict(root.queue.delivered_at),
            **_root_facts(root, store),
            "clocks": clocks,
            "wall_s": wall,
            "peak_workers": peaks.workers,
            "peak_waiting": peaks.waiting,
            "peak_rss": peaks.rss,
        }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _timings(
    result: dict[str, Any], planned: dict[str, str | None], backgrounds: dict[str, bool]
) -> list[AgentTiming]:
    clocks = result["clocks"]

    def since(value: float | None, clock: str) -> float | None:
        return None if value is None else value - clocks[clock]

    timings: list[AgentTiming] = []
    for record in result["records"]:
        run = result["runs"].get(record.task_id, {})
        worker_started = since(run.get("worker_started"), "trio")
        worker_wall = run.get("worker_wall")
        status: Literal["completed", "failed", "killed"] = (
            "completed"
            if record.status == "completed"
            else "killed"
            if record.status == "killed"
            else "failed"
        )
        timings.append(
            AgentTiming(
                name=record.description,
                task_id=record.task_id,
                background=record.background,
                fault=planned.get(record.description),
                status=status,
                reason=None if status == "completed" else _reason(record),
                # The root's Agent call: waiting for a turn or a slot counts.
                requested_s=_first(
                    since(
                        result["call_times"].get(record.description, {}).get("tool.started"),
                        "epoch",
                    ),
                    since(run.get("requested"), "monotonic"),
                    since(record.created_at, "epoch"),
                ),
                worker_started_s=worker_started,
                ready_s=since(run.get("ready"), "monotonic"),
                ended_s=since(record.ended_at, "epoch"),
                worker_exited_s=(
                    worker_started + worker_wall
                    if worker_started is not None and worker_wall is not None
                    else None
                ),
                notified_s=since(result["delivered"].get(record.task_id), "epoch"),
            )
        )
    for name in result["refusals"]:
        times = result["call_times"].get(name, {})
        finished = since(times.get("tool.finished"), "epoch")
        timings.append(
            AgentTiming(
                name=name,
                task_id=None,
                background=backgrounds.get(name, False),
                fault=planned.get(name),
                status="refused",
                reason=_CAP_ERROR,
                requested_s=_first(since(times.get("tool.started"), "epoch"), finished),
                ended_s=finished,
            )
        )
    order = {name: i for i, name in enumerate(planned)}
    timings.sort(key=lambda t: order.get(t.name, len(order)))
    return timings


def _first(*values: float | None) -> float:
    return next((value for value in values if value is not None), 0.0)


def _reason(record: TaskRecord) -> str:
    if record.status == "killed":
        return record.error or "stopped"
    return (record.worker_exit or record.error or "unknown").split(":")[0]


def _peak_live_workers(timings: list[AgentTiming]) -> int:
    # Exact, from each worker's lifetime; an exit sorts before a start at the
    # same instant, as the slot is released before the next worker can start.
    edges = sorted(
        (edge, step)
        for t in timings
        if t.worker_started_s is not None and t.worker_exited_s is not None
        for edge, step in ((t.worker_started_s, 1), (t.worker_exited_s, -1))
    )
    live = peak = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    return peak


def run_stress(options: StressOptions, on_progress: ProgressCallback | None = None) -> StressResult:
    """Run a stress session; ``summary["lost"]`` and ``["duplicates"]`` must be 0."""
    rng = random.Random(options.seed)
    with tempfile.TemporaryDirectory(prefix="subvisor-stress-") as tmp:
        work = Path(tmp)
        tree = work / "tree"
        tree.mkdir()
        for i in range(8):
            (tree / f"f{i}.txt").write_text("".join(f"line {n}\n" for n in range(20)))
        scenario, planned, backgrounds = _scenario(options, rng)
        (work / "scenario.yaml").write_text(dump_yaml(scenario))
        cpu_before = psutil.Process().cpu_times()
        result = trio.run(_drive, work, f"scripted:{work / 'scenario.yaml'}", options, on_progress)
        cpu_after = psutil.Process().cpu_times()
    records = result["records"]
    refusals: dict[str, str] = result["refusals"]
    per_name = Counter(r.description for r in records)
    terminal = [r for r in records if r.is_terminal]
    background = [r for r in records if r.background]
    counts = Counter(result["notified_ids"])
    duplicates = (
        sum(n - 1 for n in counts.values() if n > 1)
        + sum(n - 1 for n in per_name.values() if n > 1)
        + sum(1 for name in refusals if name in per_name)
    )
    lost = sorted(
        [name for name in planned if name not in per_name and name not in refusals]
        + [r.task_id for r in records if not r.is_terminal]
        + [r.task_id for r in background if counts[r.task_id] != 1]
    )
    stored = {r.task_id: r.status for r in result["stored"]}
    lost += sorted(r.task_id for r in records if stored.get(r.task_id) != r.status)
    failed = Counter(_reason(r) for r in terminal if r.status != "completed")
    if refusals:
        failed[REFUSED_REASON] = len(refusals)
    timings = _timings(result, planned, backgrounds)
    spawn = [(t.ready_s - t.requested_s) * 1000 for t in timings if t.ready_s is not None]
    notify = [
        (t.notified_s - t.ended_s) * 1000
        for t in timings
        if t.notified_s is not None and t.ended_s is not None
    ]
    summary = {
        "agents": options.agents,
        "concurrency": options.concurrency,
        "max_concurrent_subagents": options.concurrency,
        "max_subagents_per_session": options.session_cap,
        "completed": sum(r.status == "completed" for r in terminal),
        "failed": sum(failed.values()),
        "failed_by_reason": dict(failed),
        "refused": len(refusals),
        "refused_error": next(iter(refusals.values()), None),
        "faults_planned": sum(fault is not None for fault in planned.values()),
        "background": len(background),
        "notifications": len(result["notified_ids"]),
        "duplicates": duplicates,
        "lost": len(lost),
        "lost_ids": lost[:20],
        "wall_s": round(result["wall_s"], 3),
        # From the root's Agent call to the worker's handshake: waiting for a
        # slot under max_concurrent_subagents is part of it.
        "launch_to_ready_p50_ms": round(_percentile(spawn, 50), 2),
        "launch_to_ready_p99_ms": round(_percentile(spawn, 99), 2),
        "launch_to_ready_mean_ms": round(statistics.fmean(spawn), 2) if spawn else 0.0,
        # From a background agent's end to its notification reaching the root.
        "notification_p50_ms": round(_percentile(notify, 50), 2),
        "notification_p99_ms": round(_percentile(notify, 99), 2),
        "placement": "ray" if options.ray_address is not None else "local",
        # Workers each node ran (``local``: this machine), by node id prefix.
        "workers_per_node": dict(
            Counter(
                (run["node"] or "local")[:8]
                for run in result["runs"].values()
                if run["worker_started"] is not None
            )
        ),
        "peak_concurrent_workers": max(result["peak_workers"], _peak_live_workers(timings)),
        # Agents waiting at once for a gateway model slot (gateway.max_concurrency).
        "peak_waiting_for_model_slot": result["peak_waiting"],
        "supervisor_cpu_s": round(
            (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system), 3
        ),
        "supervisor_peak_rss_mb": round(result["peak_rss"] / 2**20, 1),
        "workers_peak_rss_sum_mb": round(sum(r.usage.peak_rss_bytes for r in records) / 2**20, 1),
    }
    return StressResult(options=options, summary=summary, timings=tuple(timings))


@contextlib.contextmanager
def progress_bar(console: Console) -> Iterator[ProgressCallback]:
    """A live bar on ``console``: agents ended of those expected, launched, workers, failures."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("[bold]stress[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("agents", total=None, counts="starting")

        def update(state: StressProgress) -> None:
            progress.update(
                task,
                total=state.total,
                completed=state.completed + state.failed,
                counts=(
                    f"launched {state.launched}  workers {state.live_workers}  "
                    + (
                        f"[yellow]waiting for a model slot {state.waiting_for_model}[/]  "
                        if state.waiting_for_model
                        else ""
                    )
                    + f"[green]completed {state.completed}[/]  [red]failed {state.failed}[/]"
                ),
            )

        yield update
