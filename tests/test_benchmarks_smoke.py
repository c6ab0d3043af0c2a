"""Smoke test of ``python -m benchmarks``: every benchmark runs at a tiny size.

Only the shape of the report is checked (required keys, positive numbers),
never a timing. ``ray`` runs in tests/distributed, on the cluster the Ray
tests share: a second cluster beside that one starves a 2-core machine.
"""

from __future__ import annotations

import pytest

from tests.support.benchmark_runs import BENCHMARK_CASES, check_benchmark_report, run_benchmarks


def test_list_names_every_benchmark() -> None:
    result = run_benchmarks("--list")
    assert result.returncode == 0, result.stderr
    names = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    assert names == set(BENCHMARK_CASES)


@pytest.mark.parametrize("name", sorted(set(BENCHMARK_CASES) - {"ray"}))
def test_benchmark_reports_its_keys(name: str) -> None:
    check_benchmark_report(name)


def test_the_relay_benchmark_streams_over_tls() -> None:
    """``relay --tls``: the same figures, the answers streamed over HTTPS (a throwaway CA)."""
    assert check_benchmark_report("relay", "--tls")["tls"] is True


def test_the_delegate_benchmark_runs_every_agent_past_the_session_cap() -> None:
    """``delegate --agents 201``: past ``max_subagents_per_session``'s default (200)
    every agent runs, so no per-agent figure is divided by agents that were refused."""
    report = check_benchmark_report("delegate", "--agents", "201", "--concurrency", "50")
    assert report["completed"] == 201, report
