"""`subvisor stress --report FILE`: a timeline and histograms a person can read (issue 6)."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli._stress import StressOptions, StressResult, run_stress
from supervisor.cli._stress_report import (
    ReportExtraMissingError,
    check_report_path,
    outcome_colour,
    write_report,
)
from tests.support.cli import cli_env, run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def stress_run() -> StressResult:
    """A real run: 20 agents, every kind of fault, a session cap refusing two."""
    return run_stress(
        StressOptions(
            agents=20,
            concurrency=5,
            fault_rate=0.4,
            idle_timeout_s=1.0,
            max_subagents_per_session=18,
            seed=11,
        )
    )


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    return width, height


def test_png_report_is_a_real_figure(stress_run: StressResult, tmp_path: Path) -> None:
    path = tmp_path / "stress.png"
    write_report(stress_run, path)
    data = path.read_bytes()
    width, height = _png_size(data)
    assert width >= 1000 and height >= 600
    assert len(data) > 30_000  # drawn lanes and histograms, not an empty canvas


def test_html_report_is_self_contained_with_a_lane_per_agent(
    stress_run: StressResult, tmp_path: Path
) -> None:
    path = tmp_path / "stress.html"
    write_report(stress_run, path)
    page = path.read_text()
    assert page.startswith("<!doctype html>")
    assert page.count("<svg") == 1 and "<?xml" not in page
    assert 'data-lanes="20"' in page
    assert len(set(re.findall(r'id="lane-(\d+)"', page))) == 20
    assert page.count('<tr class="lane">') == 20
    # Nothing to fetch: no scripts, stylesheets or images from elsewhere.
    assert not re.search(r"<script|<link|<img|src=", page)
    # The outcome legend: every outcome of the run, with its colour and count.
    legend = page[page.index('<table class="legend">') : page.index("</table>")]
    outcomes = {t.outcome for t in stress_run.timings}
    assert {"completed", "refused: max_subagents_per_session"} <= outcomes
    for outcome in outcomes:
        assert f'<td class="outcome">{outcome}</td>' in legend
        assert outcome_colour(outcome) in legend
    assert "Nothing lost, nothing duplicated." in page


def test_report_of_many_agents_carries_the_lanes_as_one_image(
    stress_run: StressResult, tmp_path: Path
) -> None:
    """Hundreds of lanes stay a small page: drawn once, as an image inside the SVG."""
    lanes = stress_run.timings * 25
    many = dataclasses.replace(
        stress_run, timings=lanes, summary={**stress_run.summary, "agents": len(lanes)}
    )
    path = tmp_path / "many.html"
    write_report(many, path)
    page = path.read_text()
    assert 'data-lanes="500"' in page and "<image" in page
    assert 'id="lane-' not in page
    assert len(page) < 3_000_000


def test_every_outcome_has_its_own_colour() -> None:
    outcomes = [
        "completed",
        "failed: killed by signal SIGSEGV (segmentation fault)",
        "failed: exited with code 1",
        "failed: memory cap exceeded",
        "failed: idle watchdog",
        "refused: max_subagents_per_session",
        "killed: stopped",
    ]
    assert len({outcome_colour(o) for o in outcomes}) == len(outcomes)


def test_report_path_must_be_html_or_png_in_an_existing_directory(tmp_path: Path) -> None:
    assert check_report_path(tmp_path / "r.HTML") == tmp_path / "r.HTML"
    with pytest.raises(ValueError, match=r"must end in \.html .* or \.png"):
        check_report_path(tmp_path / "r.svg")
    with pytest.raises(ValueError, match="no directory"):
        check_report_path(tmp_path / "missing" / "r.png")


def test_without_the_report_extra_the_error_says_what_to_install(
    stress_run: StressResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    path = tmp_path / "r.png"
    with pytest.raises(ReportExtraMissingError, match=r"pip install 'subvisor\[report\]'"):
        write_report(stress_run, path)
    assert not path.exists()


_SMALL = ("--agents", "4", "--concurrency", "2", "--fault-rate", "0.5", "--faults", "exit")
_WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # as if the report extra were not installed
from supervisor.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_stress_command_without_the_extra_still_prints_the_run(tmp_path: Path) -> None:
    """The run is not lost: its result is printed, then the report's error, exit 2."""
    env = cli_env(tmp_path / "home")
    report = tmp_path / "r.html"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _WITHOUT_MATPLOTLIB,
            "stress",
            *_SMALL,
            "--json",
            "--report",
            str(report),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2
    assert json.loads(run.stdout)["agents"] == 4
    err = " ".join(run.stderr.split())
    assert err.count("pip install 'subvisor[report]'") == 2  # before the run, and after
    assert "running anyway" in err
    assert not report.exists()


def test_stress_command_writes_the_report(tmp_path: Path) -> None:
    report, page = tmp_path / "r.png", tmp_path / "r.html"
    reports = ("--report", str(report), "--report", str(page))
    run = run_cli(tmp_path / "home", "stress", *_SMALL, *reports)
    assert run.returncode == 0, run.stderr
    assert "lost" in run.stdout
    assert f"report: {report}" in " ".join(run.stderr.split())
    assert _png_size(report.read_bytes())[0] >= 1000
    assert 'data-lanes="4"' in page.read_text()  # the same run, drawn twice
