"""``subvisor stress --report FILE``: the run as a picture (PNG) or a page (HTML).

One figure: every agent as a lane (waiting for a worker, then running,
coloured by outcome, then a background agent's wait for its notification),
the live workers against ``max_concurrent_subagents``, and histograms of
launch-to-ready, run time and notification latency. The HTML page is
self-contained: the figure inline as SVG, the summary and each agent's
timings as tables, nothing fetched to view it.

matplotlib is an optional extra (``pip install 'subvisor[report]'``); it is
imported only here, and only when a report is written.
"""

from __future__ import annotations

import html
import importlib.util
import io
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..kernel import SubvisorError
from ._stress import AgentTiming, StressResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "REPORT_SUFFIXES",
    "ReportExtraMissingError",
    "check_report_path",
    "missing_report_extra",
    "outcome_colour",
    "write_report",
]

REPORT_SUFFIXES = (".html", ".png")
_INSTALL = "pip install 'subvisor[report]'"
_MISSING = f"the stress report needs matplotlib, which is not installed: {_INSTALL}"

#: Colours by outcome (Okabe-Ito, told apart with colour-blindness too).
_COMPLETED = "#009E73"
_BY_REASON = (
    ("SIGSEGV", "#D55E00"),  # segfault
    ("exited with code", "#E69F00"),  # exit
    ("memory cap", "#CC79A7"),  # oom
    ("idle watchdog", "#0072B2"),  # hang
    ("max_subagents_per_session", "#6A3D9A"),  # refused by the cap
)
_KILLED = "#56B4E9"
_OTHER = ("#882255", "#44AA99", "#999933", "#DDCC77")
_WAITING = "#D0D0D0"
_NOTIFYING = "#202020"
#: Above this many lanes the SVG carries them as one image, not a shape each.
_RASTER_LANES = 400
#: Up to this many lanes each is labelled with its agent's name.
_LABELLED_LANES = 40


class ReportExtraMissingError(SubvisorError, ImportError):
    """matplotlib (the ``report`` extra) is not installed."""


def check_report_path(path: Path) -> Path:
    """``path`` if a report can go there, else ValueError saying why (before a long run)."""
    if path.suffix.lower() not in REPORT_SUFFIXES:
        raise ValueError(
            f"--report {path}: the file name must end in .html (a page with the figure and "
            "tables) or .png (the figure)"
        )
    if not path.parent.resolve().is_dir():
        raise ValueError(f"--report {path}: no directory {path.parent}; create it first")
    return path


def missing_report_extra() -> str | None:
    """None when a report can be drawn, else what to install."""
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except ValueError:  # a module set to None in sys.modules, or without a spec
        found = False
    return None if found else _MISSING


def outcome_colour(outcome: str, others: dict[str, str] | None = None) -> str:
    """The lane colour of an ``AgentTiming.outcome`` (``others`` assigns unknown ones)."""
    if outcome == "completed":
        return _COMPLETED
    for needle, colour in _BY_REASON:
        if needle in outcome:
            return colour
    if outcome.startswith("killed"):
        return _KILLED
    if others is None:
        return _OTHER[0]
    return others.setdefault(outcome, _OTHER[len(others) % len(_OTHER)])


def write_report(result: StressResult, path: Path) -> None:
    """Write the report; its kind follows the suffix (``.html`` or ``.png``)."""
    check_report_path(path)
    try:
        figure = _figure(result)
    except ImportError as exc:
        raise ReportExtraMissingError(f"{_MISSING} ({exc})") from exc
    if path.suffix.lower() == ".png":
        figure.savefig(path, format="png", dpi=100, metadata={"Software": "subvisor stress"})
        return
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    path.write_text(_page(result, svg[svg.index("<svg") :]), encoding="utf-8")


# -- the figure ---------------------------------------------------------------------


def _figure(result: StressResult) -> Figure:
    from matplotlib.figure import Figure

    lanes = sorted(result.timings, key=lambda t: (t.background, t.requested_s))
    lane_height = min(max(len(lanes) * 0.035, 2.5), 11.0)
    if len(lanes) <= _LABELLED_LANES:  # room for a label per lane
        lane_height = max(lane_height, len(lanes) * 0.16)
    figure = Figure(figsize=(14, lane_height + 5.2), layout="constrained")
    grid = figure.add_gridspec(3, 3, height_ratios=(lane_height, 1.5, 2.6))
    timeline = figure.add_subplot(grid[0, :])
    live = figure.add_subplot(grid[1, :], sharex=timeline)
    summary = result.summary
    figure.suptitle(
        f"subvisor stress: {summary['agents']} agents, max {summary['max_concurrent_subagents']} "
        f"at once. {summary['completed']} completed, {summary['failed']} failed, "
        f"lost {summary['lost']}, duplicates {summary['duplicates']}, "
        f"wall {summary['wall_s']:g} s\n"
        f"launch to ready p99 {_amount(summary['launch_to_ready_p99_ms'], 'ms')}, "
        f"notification p99 {_amount(summary['notification_p99_ms'], 'ms')}, "
        f"supervisor CPU {summary['supervisor_cpu_s']:g} s and peak RSS "
        f"{summary['supervisor_peak_rss_mb']:g} MB, "
        f"peak workers {summary['peak_concurrent_workers']}",
        fontsize=12,
    )
    _draw_lanes(timeline, lanes)
    _draw_live_workers(live, lanes, int(summary["max_concurrent_subagents"]))
    spawn = [(t.ready_s - t.requested_s) * 1000 for t in lanes if t.ready_s is not None]
    run = [t.ended_s - t.ready_s for t in lanes if t.ended_s is not None and t.ready_s is not None]
    notify = [
        (t.notified_s - t.ended_s) * 1000
        for t in lanes
        if t.notified_s is not None and t.ended_s is not None
    ]
    _draw_histogram(
        figure.add_subplot(grid[2, 0]),
        spawn,
        "spawn: launch to worker ready (ms)\nincludes waiting for a free slot",
        "ms",
    )
    _draw_histogram(figure.add_subplot(grid[2, 1]), run, "agent run time: ready to end (s)", "s")
    _draw_histogram(
        figure.add_subplot(grid[2, 2]),
        notify,
        "notification latency: background agent's end\nto its notification at the root (ms)",
        "ms",
    )
    return figure


def _draw_lanes(ax: Axes, lanes: Sequence[AgentTiming]) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    end_of_run = (
        max(
            (
                moment
                for t in lanes
                for moment in (t.requested_s, t.ended_s, t.worker_exited_s, t.notified_s)
                if moment is not None
            ),
            default=0.0,
        )
        or 1.0
    )
    sliver = end_of_run / 150  # an instant (a refusal) still shows
    height = 0.8 if len(lanes) <= 60 else 1.0
    others: dict[str, str] = {}
    waiting_y, waiting_left, waiting_width = [], [], []
    main_y, main_left, main_width, main_colour = [], [], [], []
    notify_y, notify_from, notify_to = [], [], []
    for y, t in enumerate(lanes):
        end = t.ended_s if t.ended_s is not None else end_of_run
        start = t.ready_s if t.ready_s is not None else t.requested_s
        if t.ready_s is not None:
            waiting_y.append(y)
            waiting_left.append(t.requested_s)
            waiting_width.append(t.ready_s - t.requested_s)
        main_y.append(y)
        main_left.append(start)
        main_width.append(max(end - start, sliver))
        main_colour.append(outcome_colour(t.outcome, others))
        if t.notified_s is not None and t.ended_s is not None:
            notify_y.append(y)
            notify_from.append(t.ended_s)
            notify_to.append(max(t.notified_s, t.ended_s + sliver))
    ax.barh(waiting_y, waiting_width, left=waiting_left, height=height, color=_WAITING, zorder=1)
    bars = ax.barh(main_y, main_width, left=main_left, height=height, color=main_colour, zorder=1)
    if len(lanes) > _RASTER_LANES:
        ax.set_rasterization_zorder(1.5)
    else:
        for y, bar in enumerate(bars):
            bar.set_gid(f"lane-{y}")  # one SVG group per agent
    ax.hlines(
        notify_y,
        notify_from,
        notify_to,
        colors=_NOTIFYING,
        linewidth=1.2 if len(lanes) <= 200 else 0.6,
        zorder=1,
    )
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # the first launch on top
    ax.set_xlim(0, end_of_run * 1.01)
    ax.set_ylabel("agents, one lane each")
    ax.set_title(
        "Timeline of the agents: grey = launched, waiting for a slot and a worker; colour = "
        "running, until its outcome\nblack = a background agent's end until the root got its "
        "notification (refused launches: a short bar at the moment of refusal)",
        fontsize=10,
    )
    ax.tick_params(labelbottom=True)
    ax.set_xlabel("seconds since the run started")
    foreground = sum(not t.background for t in lanes)
    if len(lanes) <= _LABELLED_LANES:
        ax.set_yticks(
            range(len(lanes)),
            [f"{t.name} ({'bg' if t.background else 'fg'})" for t in lanes],
            fontsize=7,
        )
    else:
        groups = [(foreground, "foreground"), (len(lanes) - foreground, "background")]
        ticks = [foreground / 2 - 0.5, foreground + (len(lanes) - foreground) / 2 - 0.5]
        ax.set_yticks(ticks, [f"{name}\n({count})" for count, name in groups])
    if 0 < foreground < len(lanes):
        ax.axhline(foreground - 0.5, color="#555555", linewidth=0.8, linestyle="--")
    counts = Counter(t.outcome for t in lanes)
    handles: list[Patch | Line2D] = [
        Patch(color=outcome_colour(outcome, others), label=f"{outcome} ({count})")
        for outcome, count in sorted(counts.items(), key=lambda item: -item[1])
    ]
    handles.append(Patch(color=_WAITING, label="launched, its worker not ready yet"))
    handles.append(Line2D([], [], color=_NOTIFYING, label="end to notification (background)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8)


def _draw_live_workers(ax: Axes, lanes: Sequence[AgentTiming], cap: int) -> None:
    edges = sorted(
        (edge, step)
        for t in lanes
        if t.worker_started_s is not None and t.worker_exited_s is not None
        for edge, step in ((t.worker_started_s, 1), (t.worker_exited_s, -1))
    )
    times, counts, live = [0.0], [0], 0
    for edge, step in edges:
        live += step
        times.append(edge)
        counts.append(live)
    ax.step(times, counts, where="post", color="#0072B2", linewidth=1.0, label="live workers")
    ax.axhline(
        cap, color="#D55E00", linestyle="--", linewidth=1.0, label=f"max_concurrent_subagents {cap}"
    )
    ax.set_ylim(0, max(cap, *counts) * 1.2)
    ax.set_ylabel("workers")
    ax.set_xlabel("seconds since the run started")
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8)


def _draw_histogram(ax: Axes, values: Sequence[float], title: str, unit: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(unit)
    ax.set_ylabel("agents")
    if not values:
        ax.text(0.5, 0.5, "none in this run", ha="center", va="center", transform=ax.transAxes)
        return
    from matplotlib.ticker import MaxNLocator

    ax.hist(values, bins=min(40, max(5, len(values) // 5)), color="#7FA7C9")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    ordered = sorted(values)
    for q, style in ((50, "--"), (99, ":")):
        value = ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
        ax.axvline(value, color="#202020", linestyle=style, label=f"p{q} {_amount(value, unit)}")
    ax.legend(fontsize=8)


def _amount(value: float, unit: str) -> str:
    return f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"


# -- the page -----------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #202020; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.swatch { display: inline-block; width: 1em; height: 1em; vertical-align: middle; }
.ok { color: #007a58; } .bad { color: #b00020; }
figure { margin: 0; } figure svg { max-width: 100%; height: auto; }
"""


def _page(result: StressResult, svg: str) -> str:
    summary, lanes = result.summary, result.timings
    e = html.escape
    clean = not summary["lost"] and not summary["duplicates"]
    verdict = (
        '<p class="ok">Nothing lost, nothing duplicated.</p>'
        if clean
        else f'<p class="bad">LOST {summary["lost"]}, DUPLICATED {summary["duplicates"]}.</p>'
    )
    rows = "".join(f"<tr><th>{e(key)}</th>{_cell(value)}</tr>" for key, value in summary.items())
    others: dict[str, str] = {}
    counts = Counter(t.outcome for t in lanes)
    legend = "".join(
        f'<tr><td><span class="swatch" style="background:{outcome_colour(outcome, others)}">'
        f'</span></td><td class="outcome">{e(outcome)}</td><td class="n">{count}</td></tr>'
        for outcome, count in sorted(counts.items(), key=lambda item: -item[1])
    )
    agents = "".join(_agent_row(t) for t in lanes)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>subvisor stress: {summary["agents"]} agents</title>
<style>{_STYLE}</style></head>
<body>
<h1>subvisor stress: {summary["agents"]} agents</h1>
{verdict}
<h2>Outcomes</h2>
<table class="legend"><tr><th></th><th>outcome</th><th>agents</th></tr>{legend}</table>
<figure data-lanes="{len(lanes)}">{svg}</figure>
<h2>Summary</h2>
<table class="summary">{rows}</table>
<details><summary>Each agent's timings (seconds since the run started)</summary>
<table class="agents"><tr><th>agent</th><th>task id</th><th>mode</th><th>planned fault</th>
<th>outcome</th><th>launched</th><th>worker started</th><th>ready</th><th>ended</th>
<th>notified</th></tr>{agents}</table></details>
</body></html>
"""


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        inner = "".join(
            f"<tr><td>{html.escape(str(k))}</td><td class='n'>{v}</td></tr>"
            for k, v in value.items()
        )
        return f"<td><table>{inner}</table></td>"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"<td class='n'>{value}</td>"
    return f"<td>{html.escape(str(value))}</td>"


def _agent_row(t: AgentTiming) -> str:
    def at(value: float | None) -> str:
        return "" if value is None else f"{value:.3f}"

    return (
        f'<tr class="lane"><td>{html.escape(t.name)}</td><td>{t.task_id or ""}</td>'
        f"<td>{'background' if t.background else 'foreground'}</td><td>{t.fault or ''}</td>"
        f"<td>{html.escape(t.outcome)}</td><td class='n'>{at(t.requested_s)}</td>"
        f"<td class='n'>{at(t.worker_started_s)}</td><td class='n'>{at(t.ready_s)}</td>"
        f"<td class='n'>{at(t.ended_s)}</td><td class='n'>{at(t.notified_s)}</td></tr>"
    )
