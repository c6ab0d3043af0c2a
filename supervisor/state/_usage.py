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

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from ._task_record import TaskUsage

__all__ = ["UsageRollup", "add_usage", "format_bytes", "sum_usage"]

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
