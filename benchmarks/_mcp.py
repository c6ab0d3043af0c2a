"""What MCP adds to an Agent call: ``subvisor mcp`` on stdio against the library.

Both sides launch the same scripted Explore subagent, one foreground call at
a time: a real worker that answers at once. The direct side calls
``AgentTool.invoke`` in this process; the MCP side calls ``Agent`` through
the ``mcp`` SDK's client on a ``subvisor mcp`` child over stdio. The calls
alternate, one of each per round, so drift on a shared machine hits both
alike; the added latency is the difference of their percentiles (and the
median of the per-round differences, which drift moves less). A
``TaskList`` round trip (no subagent) shows the bare MCP cost per call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import trio
from mcp import Client, StdioServerParameters

from protocol import ResourceLimits
from supervisor import RootSession, Subvisor, SubvisorSettings

from . import Report
from ._stats import percentile, rounded

__all__ = ["TARGETS", "add_arguments", "run"]

TARGETS = {"added_p50_ms": ("<=", 5.0)}

_CALL = {"description": "bench", "prompt": "answer", "subagent_type": "Explore"}
_SCENARIO = {"agents": {"bench": [{"text": "done"}]}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=100, help="calls measured on each side")
    parser.add_argument("--warmup", type=int, default=5, help="calls not measured, each side")


def _server(work: Path, model: str) -> StdioServerParameters:
    checkout = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k not in ("SUBVISOR_TREE", "SUBVISOR_MODEL")}
    env["SUBVISOR_HOME"] = str(work / "mcp-home")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
    args = ["-m", "supervisor.cli", "mcp", "--model", model, "--cwd", str(work / "tree")]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


async def _measure(work: Path, samples: int, warmup: int) -> dict[str, list[float]]:
    model = f"scripted:{work / 'scenario.json'}"
    settings = SubvisorSettings(
        home=work / "direct-home", subagent_limits=ResourceLimits(idle_timeout_s=120)
    )
    times: dict[str, list[float]] = {"direct": [], "mcp": [], "tasklist": []}
    async with Subvisor(settings) as host, Client(_server(work, model)) as client:
        tool = RootSession(host, model=model, cwd=work / "tree").agent_tool
        for round_ in range(warmup + samples):
            started = time.perf_counter()
            direct = await tool.invoke(_CALL)
            direct_s = time.perf_counter() - started
            started = time.perf_counter()
            served = await client.call_tool("Agent", _CALL)
            mcp_s = time.perf_counter() - started
            started = time.perf_counter()
            await client.call_tool("TaskList", {})
            tasklist_s = time.perf_counter() - started
            if direct.is_error or served.is_error:
                raise RuntimeError(f"a benchmark call failed: {direct.text!r} / {served!r}")
            if round_ >= warmup:
                times["direct"].append(direct_s * 1000)
                times["mcp"].append(mcp_s * 1000)
                times["tasklist"].append(tasklist_s * 1000)
    return times


def run(args: argparse.Namespace) -> Report:
    samples, warmup = max(1, args.samples), max(0, args.warmup)
    with tempfile.TemporaryDirectory(prefix="subvisor-mcp-bench-") as tmp:
        work = Path(tmp)
        (work / "tree").mkdir()
        (work / "tree" / "README.md").write_text("# bench\n")
        (work / "scenario.json").write_text(json.dumps(_SCENARIO))
        times = trio.run(_measure, work, samples, warmup)
    direct, mcp, tasklist = times["direct"], times["mcp"], times["tasklist"]
    paired = [m - d for m, d in zip(mcp, direct, strict=True)]
    return {
        "samples": samples,
        "direct_p50_ms": rounded(percentile(direct, 50)),
        "direct_p99_ms": rounded(percentile(direct, 99)),
        "mcp_p50_ms": rounded(percentile(mcp, 50)),
        "mcp_p99_ms": rounded(percentile(mcp, 99)),
        # What MCP adds to one Agent call (may read below 0 within noise).
        "added_p50_ms": rounded(percentile(mcp, 50) - percentile(direct, 50)),
        "added_p99_ms": rounded(percentile(mcp, 99) - percentile(direct, 99)),
        # The same, round by round (each MCP call against the direct call beside it).
        "added_paired_p50_ms": rounded(percentile(paired, 50)),
        # One MCP round trip that launches nothing.
        "tasklist_p50_ms": rounded(percentile(tasklist, 50)),
        "tasklist_p99_ms": rounded(percentile(tasklist, 99)),
    }
