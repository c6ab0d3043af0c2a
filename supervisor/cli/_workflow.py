"""``subvisor workflow run`` and ``subvisor workflow show``: workflow runs from the command line."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.table import Table

from ..delegation._settings import SubvisorSettings
from ..delegation._subvisor import Subvisor
from ..kernel import find_exception
from ..state._paths import database_path
from ..workflow import (
    ActorSite,
    AskRecord,
    RunRecord,
    WorkflowError,
    WorkflowFailedError,
    WorkflowJournal,
    run_workflow,
)
from ..workflow._typed import dump_value
from ._console import SafeConsole, quoted, shown
from ._interrupt import RunInterruptedError, interruptible
from ._run import wide_console

__all__ = ["WorkflowRunRequest", "run_report", "workflow_run_command", "workflow_show_command"]


@dataclass(frozen=True, slots=True)
class WorkflowRunRequest:
    """What ``subvisor workflow run`` was asked to do."""

    script: Path
    cwd: Path
    settings: SubvisorSettings
    inputs: dict[str, str] = field(default_factory=dict)
    amend: str | None = None
    model: str | None = None
    json: bool = False


def parse_inputs(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; raises ``WorkflowError`` on one without ``=``."""
    inputs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise WorkflowError(f"--input {pair!r} is not KEY=VALUE (for example --input diff=...)")
        inputs[key.strip()] = value
    return inputs


async def _run(request: WorkflowRunRequest, console: Console) -> tuple[str | None, Any]:
    started: list[str] = []

    def on_start(run_id: str, sites: list[ActorSite]) -> None:
        started.append(run_id)
        if not request.json:
            listed = ", ".join(site.describe() for site in sites) or "none found"
            console.print(
                f"run [bold]{quoted(run_id)}[/]  actor sites: {quoted(listed)}", highlight=False
            )

    configured = os.environ.get("SUBVISOR_MODEL") or request.settings.model
    async with interruptible() as interruption, Subvisor(request.settings) as host:
        with WorkflowJournal(database_path(host.home)) as journal:
            async with trio.open_nursery() as nursery:
                # Ctrl-C and SIGTERM cancel the run: its actors' workers are stopped.
                nursery.start_soon(interruption.stop_on_signal, host.stop_all, nursery.cancel_scope)
                outcome = await run_workflow(
                    host,
                    request.script,
                    journal=journal,
                    inputs=request.inputs,
                    amend=request.amend,
                    model=request.model,
                    parent_model=configured,
                    cwd=request.cwd,
                    on_start=on_start,
                )
                nursery.cancel_scope.cancel()
            if interruption.signum is not None:
                raise RunInterruptedError(interruption)
    return outcome.run_id, outcome.value


def workflow_run_command(request: WorkflowRunRequest) -> int:
    """Run a workflow script; print its result and its journal (or JSON). Exit code 0/1/2."""
    console = wide_console(stderr=request.json)
    errors = SafeConsole(stderr=True, soft_wrap=True)
    run_id: str | None = None
    code = 0
    try:
        run_id, value = trio.run(_run, request, console)
    except BaseException as exc:
        interrupted = find_exception(exc, RunInterruptedError)
        if isinstance(interrupted, RunInterruptedError):
            errors.print("[yellow]interrupted: every actor's worker was stopped[/]")
            return interrupted.exit_code
        if find_exception(exc, KeyboardInterrupt) is not None:
            errors.print("[yellow]interrupted: every actor's worker was stopped[/]")
            return 130
        failed = find_exception(exc, WorkflowFailedError)
        if isinstance(failed, WorkflowFailedError):
            run_id, value, code = failed.run_id, None, 1
            errors.print(f"[red]{quoted(str(failed))}[/]", highlight=False)
        else:
            refused = find_exception(exc, WorkflowError)
            if refused is None:
                raise
            errors.print(f"[red]{quoted(str(refused))}[/]", highlight=False)
            return 2
    with WorkflowJournal(database_path(request.settings.home)) as journal:
        run = journal.find_run(run_id) if run_id else None
        if run is None:
            return code or 1
        report = run_report(journal, run)
    if request.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return code
    if code == 0:
        console.print("[bold]result[/]")
        console.print(
            shown(json.dumps(dump_value(value), indent=2), multiline=True),
            highlight=False,
        )
        console.print()
    _print_report(console, report)
    return code


def workflow_show_command(run_id: str | None, as_json: bool, home: Path) -> int:
    """Show one run's actors and asks (cached or fresh, model, usage), or list recent runs."""
    console = wide_console()
    path = database_path(home)
    if not path.exists():
        console.print(
            f"[yellow]no subvisor state in {quoted(str(home))}[/]: run `subvisor workflow run"
            " SCRIPT` first"
        )
        return 1
    with WorkflowJournal(path) as journal:
        if run_id is None:
            runs = journal.latest_runs()
            if as_json:
                sys.stdout.write(json.dumps([_run_dict(r) for r in runs], indent=2) + "\n")
            else:
                console.print(_runs_table(runs))
            return 0
        try:
            run = journal.find_run(run_id)
        except WorkflowError as exc:
            console.print(f"[red]{quoted(str(exc))}[/]")
            return 1
        if run is None:
            console.print(
                f"[red]no workflow run {quoted(repr(run_id))}[/]; `subvisor workflow show` lists"
                " the runs"
            )
            return 1
        report = run_report(journal, run)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        _print_report(console, report)
    return 0


# -- the report -----------------------------------------------------------------------


def _run_dict(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "script": run.script_path,
        "script_hash": run.script_hash,
        "amends": run.amends,
        "status": run.status,
        "model": run.parent_model,
        "run_model": run.run_model,
        "inputs": run.inputs,
        "sites": run.sites,
        "result": run.result,
        "error": run.error,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
    }


def _ask_dict(ask: AskRecord) -> dict[str, Any]:
    return {
        "ask_index": ask.ask_index,
        "source": ask.source,
        "status": ask.status,
        "model": ask.model,
        "schema": ask.schema_name,
        "prompt_hash": ask.prompt_hash,
        "prompt": ask.prompt,
        "answer": ask.answer,
        "error": ask.error,
        "replayed_from": ask.replayed_from,
        "model_calls": ask.model_calls,
        "tool_calls": ask.tool_calls,
        "input_tokens": ask.usage.input_tokens,
        "output_tokens": ask.usage.output_tokens,
        "started_at": ask.started_at,
        "ended_at": ask.ended_at,
    }


def run_report(journal: WorkflowJournal, run: RunRecord) -> dict[str, Any]:
    """A run, its actors and their asks, and totals: what ``show --json`` prints."""
    asks = journal.asks(run.run_id)
    actors: list[dict[str, Any]] = []
    for actor in journal.actors(run.run_id):
        mine = [a for a in asks if a.actor_key == actor.actor_key]
        actors.append(
            {
                "actor": actor.name,
                "key": actor.actor_key,
                "line": actor.line,
                "model": actor.model,
                "model_source": actor.model_source,
                "tools": list(actor.tools),
                "asks": len(mine),
                "cached": sum(a.source == "cached" for a in mine),
                "fresh": sum(a.source == "fresh" for a in mine),
                "failed": sum(a.status == "failed" for a in mine),
                "model_calls": sum(a.model_calls for a in mine),
                "input_tokens": sum(a.usage.input_tokens for a in mine),
                "output_tokens": sum(a.usage.output_tokens for a in mine),
                "ask_list": [_ask_dict(a) for a in mine],
            }
        )
    totals: dict[str, int] = {
        key: sum(actor[key] for actor in actors)
        for key in (
            "asks",
            "cached",
            "fresh",
            "failed",
            "model_calls",
            "input_tokens",
            "output_tokens",
        )
    }
    return {"run": _run_dict(run), "actors": actors, "totals": totals}


def _brief(text: str | None, limit: int = 60) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _runs_table(runs: list[RunRecord]) -> Table:
    table = Table(title="workflow runs (newest first)", title_justify="left")
    for column in ("run", "workflow", "status", "amends", "script"):
        table.add_column(column)
    for run in runs:
        table.add_row(
            *map(shown, (run.run_id, run.workflow, run.status, run.amends, run.script_path))
        )
    return table


def _print_report(console: Console, report: dict[str, Any]) -> None:
    run = report["run"]
    colour = {"completed": "green", "failed": "red"}.get(run["status"], "cyan")
    console.print(
        f"workflow [bold]{quoted(run['workflow'])}[/] run [bold]{quoted(run['run_id'])}[/]: "
        f"[{colour}]{quoted(run['status'])}[/]"
        + (f", amends {quoted(run['amends'])}" if run["amends"] else "")
        + f"  ({quoted(run['script'])})",
        highlight=False,
    )
    if run["error"]:
        console.print(f"[red]{quoted(run['error'])}[/]", highlight=False)
    actors = Table(title="actors", title_justify="left")
    for column in ("actor", "line", "model", "asks", "cached", "fresh", "model calls", "tokens"):
        actors.add_column(column)
    for actor in report["actors"]:
        actors.add_row(
            shown(actor["actor"] or f"<anonymous {actor['key']}>"),
            str(actor["line"]),
            shown(f"{actor['model']} ({actor['model_source']})"),
            str(actor["asks"]) + (f" ({actor['failed']} failed)" if actor["failed"] else ""),
            str(actor["cached"]),
            str(actor["fresh"]),
            str(actor["model_calls"]),
            f"{actor['input_tokens']}/{actor['output_tokens']}",
        )
    console.print(actors)
    asks = Table(title="asks", title_justify="left")
    for column in ("actor", "#", "source", "status", "model calls", "tokens", "prompt"):
        asks.add_column(column)
    asks.add_column("answer", overflow="fold")
    for actor in report["actors"]:
        for ask in actor["ask_list"]:
            source = "[cyan]cached[/]" if ask["source"] == "cached" else "[magenta]fresh[/]"
            status = "[green]answered[/]" if ask["status"] == "answered" else "[red]failed[/]"
            asks.add_row(
                shown(actor["actor"] or f"<anonymous {actor['key']}>"),
                str(ask["ask_index"]),
                source,
                status,
                str(ask["model_calls"]),
                f"{ask['input_tokens']}/{ask['output_tokens']}",
                shown(_brief(ask["prompt"])),
                shown(_brief(ask["answer"] if ask["status"] == "answered" else ask["error"])),
            )
    console.print(asks)
    totals = report["totals"]
    console.print(
        f"totals: {totals['asks']} asks ({totals['cached']} cached, {totals['fresh']} fresh"
        + (f", {totals['failed']} failed" if totals["failed"] else "")
        + f"), {totals['model_calls']} model calls, "
        f"{totals['input_tokens']} input / {totals['output_tokens']} output tokens",
        highlight=False,
    )
