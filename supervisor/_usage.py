"""Usage accounting: what a session cost, its own agent and all its subagents together.

One rule, field by field: a session's total is its own usage plus the sum of
its subagents' (tokens, calls, wall and CPU time, peak RSS). Peak RSS sums
to the memory the session's processes peaked at together, an upper bound of
its footprint.

A subagent's usage is stored when its task ends; the root's when its run
ends. While a run is live the control channel adds the running agents'
usage so far (``SubagentRun.live_usage``).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import psutil
from pydantic import BaseModel, ConfigDict

from ._tasks import TaskUsage

if TYPE_CHECKING:
    from ._root import RootSession

__all__ = ["UsageRollup", "add_usage", "format_bytes", "root_usage", "sum_usage"]

_SUMMED = tuple(TaskUsage.model_fields)


def add_usage(a: TaskUsage, b: TaskUsage) -> TaskUsage:
    """Field by field sum of two usages."""
    return TaskUsage(**{name: getattr(a, name) + getattr(b, name) for name in _SUMMED})


def sum_usage(usages: Iterable[TaskUsage]) -> TaskUsage:
    """The field by field sum of any number of usages (zero for none)."""
    total = TaskUsage()
    for usage in usages:
        total = add_usage(total, usage)
    return total


class UsageRollup(BaseModel):
    """A session's usage: its own agent's, its subagents' summed, and both together."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    own: TaskUsage = TaskUsage()
    subagents: TaskUsage = TaskUsage()
    #: How many subagents the sum covers.
    subagent_count: int = 0

    @property
    def total(self) -> TaskUsage:
        """Own usage plus every subagent's."""
        return add_usage(self.own, self.subagents)

    def summary(self) -> dict[str, Any]:
        """The JSON shape of ``run --json``, ``ps --json`` and the control channel."""
        total = self.total
        return {
            "session_id": self.session_id,
            "root": self.own.model_dump(),
            "subagents": self.subagents.model_dump(),
            "subagent_count": self.subagent_count,
            "total": total.model_dump(),
            "total_tokens": total.total_tokens,
        }

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> UsageRollup:
        """Read back what ``summary`` wrote (a client of the control channel)."""
        return cls(
            session_id=summary["session_id"],
            own=TaskUsage.model_validate(summary["root"]),
            subagents=TaskUsage.model_validate(summary["subagents"]),
            subagent_count=summary["subagent_count"],
        )

    def describe(self) -> str:
        """One line for a person: the totals, then what the subagents account for."""
        total = self.total
        return (
            f"tokens {total.total_tokens} (in {total.input_tokens}, out {total.output_tokens}, "
            f"cache {total.cache_read_tokens + total.cache_write_tokens})"
            f"  model calls {total.model_calls}  tool calls {total.tool_calls}"
            f"  cpu {total.cpu_seconds:.1f}s  peak RSS (sum) {format_bytes(total.peak_rss_bytes)}"
            f"  (root + {self.subagent_count} subagents;"
            f" subagents {self.subagents.total_tokens} tokens)"
        )


def format_bytes(count: int) -> str:
    """``512.0M`` style, for tables."""
    value = float(count)
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def root_usage(root: RootSession, *, created_at: float) -> TaskUsage:
    """The root agent's own usage so far.

    The root runs inside the supervisor process, so its CPU time and peak
    RSS are that process's (which also hosts the model gateway for every
    agent); ``created_at`` (epoch seconds) starts its wall time.
    """
    loop = root.loop
    cpu = psutil.Process().cpu_times()
    return TaskUsage(
        input_tokens=loop.usage.input_tokens,
        output_tokens=loop.usage.output_tokens,
        cache_read_tokens=loop.usage.cache_read_tokens,
        cache_write_tokens=loop.usage.cache_write_tokens,
        model_calls=loop.model_calls,
        tool_calls=loop.tool_calls,
        duration_ms=max(0, round((time.time() - created_at) * 1000)),
        cpu_seconds=round(cpu.user + cpu.system, 3),
        # ru_maxrss is in KiB on Linux.
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
