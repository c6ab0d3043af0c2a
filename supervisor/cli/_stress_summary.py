"""How a ``subvisor stress`` summary reads on a terminal: tables, as ``ps`` shows tasks.

``--json`` prints the summary itself; these tables say the same in words, with
units, and with what went wrong in red. A figure the run did not have (no
background agent, so no notification latency) reads ``-``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table

__all__ = ["stress_summary"]


def stress_summary(summary: dict[str, Any]) -> Group:
    """The run's outcome and measures, then its failures by reason (when there were any)."""
    agents = summary["agents"]
    table = Table(title=f"stress: {agents} subagents", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("note", overflow="fold")
    concurrency = summary["max_concurrent_subagents"]
    table.add_row(
        "agents",
        str(agents),
        f"at most {concurrency} at once, {summary['max_subagents_per_session']} per session",
    )
    table.add_row("completed", f"[green]{summary['completed']}[/]", "")
    refused = summary["refused"]
    table.add_row(
        "failed",
        _bad(summary["failed"]),
        f"{summary['faults_planned']} faults planned" + (f", {refused} refused" if refused else ""),
    )
    table.add_row("refused", str(refused), escape(summary["refused_error"] or ""))
    table.add_row(
        "background", str(summary["background"]), f"{summary['notifications']} notifications"
    )
    lost_ids = summary["lost_ids"]
    table.add_row("lost", _bad(summary["lost"], good="green"), escape(", ".join(lost_ids)))
    table.add_row("duplicates", _bad(summary["duplicates"], good="green"), "")
    table.add_row("wall time", f"{summary['wall_s']:.2f} s", "")
    spawn_p50, spawn_p99 = summary["launch_to_ready_p50_ms"], summary["launch_to_ready_p99_ms"]
    table.add_row(
        "launch to ready",
        _ms(spawn_p50),
        f"p99 {_ms(spawn_p99)}, mean {_ms(summary['launch_to_ready_mean_ms'])}; "
        "waiting for a slot included",
    )
    notified = summary["notifications"] > 0
    table.add_row(
        "notification",
        _ms(summary["notification_p50_ms"]) if notified else "-",
        f"p99 {_ms(summary['notification_p99_ms'])}; from a background agent's end to the root"
        if notified
        else "no background agent",
    )
    table.add_row(
        "peak workers", str(summary["peak_concurrent_workers"]), f"of {concurrency} allowed"
    )
    table.add_row(
        "supervisor",
        f"{summary['supervisor_cpu_s']:.2f} s CPU",
        f"peak RSS {summary['supervisor_peak_rss_mb']:.1f} MB",
    )
    table.add_row(
        "workers' peak RSS", f"{summary['workers_peak_rss_sum_mb']:.1f} MB", "summed over workers"
    )
    failed_by_reason: dict[str, int] = summary["failed_by_reason"]
    if not failed_by_reason:
        return Group(table)
    reasons = Table(title="failed, by reason", title_justify="left")
    reasons.add_column("reason", overflow="fold")
    reasons.add_column("agents", justify="right")
    for reason, count in sorted(failed_by_reason.items(), key=lambda item: (-item[1], item[0])):
        reasons.add_row(escape(reason), str(count))
    return Group(table, "", reasons)


def _bad(count: int, *, good: str = "default") -> str:
    """``count`` in red when it is not 0."""
    return f"[{'red' if count else good}]{count}[/]"


def _ms(value: float) -> str:
    return f"{value:.1f} ms"
