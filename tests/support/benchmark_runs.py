"""Running ``python -m benchmarks`` at a tiny size, and what each report must hold.

Only the shape of a report is checked (required keys, positive numbers),
never a timing: wall-clock thresholds would make the suite flaky.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["BENCHMARK_CASES", "check_benchmark_report", "run_benchmarks"]

_ROOT = Path(__file__).resolve().parent.parent.parent

#: Each benchmark's tiny-size arguments, and the figures its report must hold.
BENCHMARK_CASES: dict[str, tuple[list[str], list[str]]] = {
    "spawn": (
        ["--samples", "3", "--warmup", "1"],
        [
            "zygote_p50_ms",
            "zygote_p95_ms",
            "zygote_sandboxed_p50_ms",
            "zygote_sandboxed_p95_ms",
            "exec_p50_ms",
            "exec_p95_ms",
            "mp_forkserver_p50_ms",
            "mp_forkserver_p95_ms",
            "mp_spawn_p50_ms",
            "mp_spawn_p95_ms",
            "zygote_speedup_vs_exec",
            "samples",
        ],
    ),
    "roundtrip": (
        ["--samples", "3", "--rounds", "2", "--warmup", "3"],
        [
            "subvisor_p50_us",
            "raw_pipe_p50_us",
            "mp_pipe_p50_us",
            "trio_pipe_p50_us",
            "protocol_cpu_p50_us",
            "raw_codec_cpu_p50_us",
            "ratio_vs_raw",
            "ratio_vs_trio_pipe",
            "floor_ratio_vs_raw",
            "subvisor_p95_us",
            "raw_pipe_p95_us",
            "mp_pipe_p95_us",
            "ratio_vs_raw_p95",
        ],
    ),
    "memory": (
        ["--n", "3", "--exec-n", "1"],
        ["idle_worker_uss_mb_p50", "idle_worker_uss_mb_p95", "workers", "exec_worker_uss_mb_p50"],
    ),
    "crash": (["--samples", "3", "--warmup", "0"], ["detect_p50_ms", "detect_p99_ms", "samples"]),
    "scale": (["--n", "5"], ["n", "all_ready_s", "supervisor_rss_mb"]),
    "mcp": (
        ["--samples", "3", "--warmup", "1"],
        ["samples", "direct_p50_ms", "mcp_p50_ms", "mcp_p99_ms", "tasklist_p50_ms"],
    ),
    "relay": (
        ["--agents", "2", "--chunks", "5", "--rate", "100"],
        [
            "n2_completed",
            "n2_chunks",
            "n2_cpu_us_per_chunk",
            "n2_stream_s_max",
            "n2_chunk_lag_p99_ms",
            "n2_launch_spread_s",
            "n2_loop_delay_p99_ms",
            "n2_collector_longest_ms",
            "n2_twin_completed",
            "n2_twin_wall_s",
        ],
    ),
    "delegate": (
        ["--agents", "4", "--concurrency", "2", "--latency-ms", "1", "--workflow-asks", "2"],
        [
            "agents",
            "completed",
            "wall_s",
            "per_agent_overhead_ms",
            "supervisor_cpu_s",
            "supervisor_cpu_per_agent_ms",
            "supervisor_user_cpu_per_agent_ms",
            "supervisor_sys_cpu_per_agent_ms",
            "children_user_cpu_per_agent_ms",
            "children_sys_cpu_per_agent_ms",
            "supervisor_start_cpu_ms",
            "supervisor_stop_cpu_ms",
            "child_page_faults_per_agent",
            "per_subagent_overhead_ms",
            "per_ask_same_actor_overhead_ms",
            "actor_vs_subagent",
        ],
    ),
    "ray": (
        ["--samples", "2", "--cold-samples", "1", "--idle", "2", "--agents", "4"],
        [
            "remote_spawn_p50_ms",
            "local_spawn_p50_ms",
            "cold_actor_p50_ms",
            "warm_actor_p50_ms",
            "remote_round_trip_p50_us",
            "actor_call_p50_us",
            "remote_idle_uss_ratio_vs_local",
            "remote_agents_per_s",
            "remote_supervisor_cpu_ms_per_agent",
            "nodes_used",
        ],
    ),
}


def run_benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks ARGS`` from the checkout, outside any supervisor tree."""
    env = {key: value for key, value in os.environ.items() if key != "SUBVISOR_TREE"}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def check_benchmark_report(name: str, *extra: str) -> dict[str, object]:
    """Run benchmark ``name`` at its tiny size; every figure it must report is a positive number
    (a launch spread may be 0).

    Returns the report.
    """
    args, keys = BENCHMARK_CASES[name]
    result = run_benchmarks(name, "--json", *args, *extra)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads(result.stdout)
    assert isinstance(report, dict)
    for key in keys:
        value = report.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), (key, report)
        # Two launches may fall within the same millisecond: a spread rounds to 0.
        assert value > 0 or (key.endswith("launch_spread_s") and value == 0), (key, report)
    if "agents" in report and "completed" in report:
        # Per-agent figures are divided by the agents asked for: all must have run.
        assert report["completed"] == report["agents"], report
    return report
