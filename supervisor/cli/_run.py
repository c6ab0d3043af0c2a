"""``subvisor run`` and ``subvisor demo``: a root session from the command line."""

from __future__ import annotations

import html
import json
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import trio
from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from protocol import AgentOutcome, ChatMessage

from ..delegation._root import RootSession, root_usage
from ..delegation._settings import SubvisorSettings
from ..delegation._subagents import SubagentRun
from ..delegation._subvisor import Subvisor
from ..kernel import find_exception
from ..policy._approvals import (
    ApprovalHandler,
    QuestionHandler,
    TerminalApprovalHandler,
    fixed_approval_handler,
)
from ..providers import ModelError
from ..state._store import SessionStore
from ..state._task_record import TaskRecord
from ..state._tasks import TaskRegistry
from ..workflow import workflow_tools
from ._console import SafeConsole, quoted, shown
from ._control import serve_control
from ._interrupt import interruptible
from ._terminal import TerminalConsole

__all__ = [
    "RunRequest",
    "demo_scenario_path",
    "run_command",
    "sandbox_label",
    "tasks_table",
    "wide_console",
]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What ``subvisor run`` was asked to do."""

    prompt: str
    model: str
    cwd: Path
    settings: SubvisorSettings
    json: bool = False
    timeout_s: float | None = None
    #: Print every root message of the run, not only the final answer (the demo).
    narrate: bool = False
    #: Who answers permission asks: the person at the terminal, or a fixed answer.
    approve: Literal["ask", "allow", "deny"] = "deny"


def wide_console(*, stderr: bool = False) -> Console:
    """A console (``SafeConsole``); when output is not a terminal, wide enough for the task
    tables."""
    console = SafeConsole(stderr=stderr)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    return console


def demo_scenario_path() -> Path:
    """The scripted scenario shipped for ``subvisor demo``."""
    return Path(str(resources.files("supervisor") / "data" / "demo.yaml"))


def _elapsed(record: TaskRecord) -> str:
    end = record.ended_at or time.time()
    return f"{end - record.created_at:.1f}s"


def sandbox_label(record: TaskRecord) -> str:
    """The sandbox column: mode and network as enforced, or a loud NOT ENFORCED (S-SBX-2)."""
    report = record.sandbox
    if report is None:
        return "-"
    label = quoted(f"{report.mode}, net {report.network}")
    if report.requested and not report.enforced:
        return f"[bold red]NOT ENFORCED[/] ({label})"
    # What holds the caps over its tree (S-SEC-4): ``cgroup v1``, ``sampling``.
    _, by, rest = record.caps.partition(" by ")
    return f"{label}; caps: {quoted(rest.split(';')[0])}" if by else label


def tasks_table(
    records: list[TaskRecord], title: str, activity: Mapping[str, str] | None = None
) -> Table:
    """A table of subagent tasks for a terminal; ``activity`` notes what live ones do now.

    ``title`` is markup; every cell from a record is shown escaped (``shown``).
    """
    table = Table(title=title, title_justify="left")
    for column in (
        "agentId",
        "description",
        "type",
        "status",
        "sandbox",
        "tools",
        "tokens",
        "time",
    ):
        table.add_column(column)
    table.add_column("note", overflow="fold")
    colours = {
        "completed": "green",
        "failed": "red",
        "killed": "yellow",
        "interrupted": "magenta",
        "running": "cyan",
    }
    for r in sorted(records, key=lambda r: r.created_at):
        colour = colours.get(r.status, "white")
        table.add_row(
            shown(r.task_id),
            shown(r.description + (" (bg)" if r.background else "")),
            shown(r.subagent_type or "-"),
            shown(r.status, style=colour),
            sandbox_label(r),
            str(r.usage.tool_calls),
            str(r.usage.total_tokens),
            _elapsed(r),
            shown((activity or {}).get(r.task_id) or r.worker_exit or r.error or ""),
        )
    return table


def _live_table(registry: TaskRegistry, runs: Mapping[str, SubagentRun], session_id: str) -> Table:
    records = registry.list(session_id)
    activity: dict[str, str] = {}
    for r in records:
        run = runs.get(r.task_id)
        if run is not None and not r.is_terminal:
            r = r.model_copy(
                update={"usage": r.usage.model_copy(update={"tool_calls": run.tool_calls})}
            )
            if run.activity is not None:
                activity[r.task_id] = run.activity
    return tasks_table(records, "subagents", activity)


async def _show_progress(
    registry: TaskRegistry,
    runs: Mapping[str, SubagentRun],
    session_id: str,
    console: Console,
    terminal: TerminalConsole | None,
) -> None:
    def view() -> RenderableType:
        table = _live_table(registry, runs, session_id)
        return terminal.renderable(table) if terminal is not None else table

    with Live(view(), console=console, transient=True) as live:
        while True:
            await trio.sleep(0.2)
            live.update(view())


def _move_foreground(runs: Mapping[str, SubagentRun], session_id: str) -> int:
    """Move every running foreground subagent of the session to the background."""
    return sum(
        run.move_to_background()
        for run in list(runs.values())
        if run.launch.parent_session_id == session_id
    )


def _usage_summary(store: SessionStore, root: RootSession) -> dict[str, Any]:
    """Store the root's own usage, then report the session's rollup (what ``ps`` shows too)."""
    session = store.get_session(root.session_id)
    created_at = session.created_at if session is not None else time.time()
    store.record_usage(root.session_id, root_usage(root, created_at=created_at))
    return store.usage_rollup(root.session_id).summary()


async def _enforce_timeout(
    runs: Mapping[str, SubagentRun],
    timeout_s: float,
    timed_out: trio.Event,
    run_scope: trio.CancelScope,
) -> None:
    """After ``timeout_s``: stop every subagent (saying why), then end the root's turn.

    The subagents go first, so their records say "timed out" rather than
    "the parent turn was aborted".
    """
    await trio.sleep(timeout_s)
    timed_out.set()
    async with trio.open_nursery() as nursery:
        for run in list(runs.values()):
            nursery.start_soon(run.stop, f"the run timed out after {timeout_s:g} s")
    run_scope.cancel()


def _approval_handlers(
    approve: Literal["ask", "allow", "deny"], terminal: TerminalConsole | None
) -> tuple[ApprovalHandler | None, QuestionHandler | None]:
    """Who answers permission asks and questions, as ``--approve`` says."""
    if approve == "ask":
        if terminal is not None:
            # In the live view the keyboard has one owner: prompts are answered there.
            return terminal.approve, terminal.answer_question
        prompt = TerminalApprovalHandler()
        return prompt, prompt.answer_question
    if approve == "allow":
        return fixed_approval_handler("allow"), None
    # "deny": no handler; an ask is refused, naming the rule that would allow it.
    return None, None


def _task_report(r: TaskRecord) -> dict[str, Any]:
    """One task of the session, as ``--json`` reports it."""
    return {
        "agentId": r.task_id,
        "kind": r.kind,
        "parent_task_id": r.parent_task_id,
        "description": r.description,
        "subagent_type": r.subagent_type,
        "background": r.background,
        "status": r.status,
        "error": r.error,
        "sandbox": r.sandbox.model_dump() if r.sandbox is not None else None,
        "sandbox_enforced": r.sandbox is not None and r.sandbox.enforced,
        "usage": r.usage.model_dump(),
        "output_file": r.output_file,
    }


async def _run(
    request: RunRequest, console: Console
) -> tuple[int, dict[str, Any], list[TaskRecord]]:
    outcome: AgentOutcome | None = None
    status = "completed"
    keys = sys.stdin.isatty() and console.is_terminal and not request.json
    terminal = TerminalConsole() if keys else None
    handler, questions = _approval_handlers(request.approve, terminal)
    async with (
        interruptible() as interruption,
        Subvisor(request.settings, approval_handler=handler, question_handler=questions) as host,
    ):
        store, registry, runs = host.store, host.registry, host.runs
        root = RootSession(
            host, model=request.model, cwd=request.cwd, extra_tools=workflow_tools(host)
        )
        session_id = root.session_id
        async with serve_control(host, session_id, root=root):
            timed_out = trio.Event()
            async with trio.open_nursery() as nursery:
                # Ctrl-C and SIGTERM: every worker is stopped, then the root's turn ends.
                nursery.start_soon(interruption.stop_on_signal, host.stop_all, nursery.cancel_scope)
                if console.is_terminal and not request.json:
                    nursery.start_soon(
                        _show_progress, registry, runs, session_id, console, terminal
                    )
                if terminal is not None:
                    terminal.on_background = lambda: _move_foreground(runs, session_id)
                    nursery.start_soon(terminal.read_keys, sys.stdin.fileno())
                if request.timeout_s:
                    nursery.start_soon(
                        _enforce_timeout, runs, request.timeout_s, timed_out, nursery.cancel_scope
                    )
                outcome = await root.run(request.prompt)
                nursery.cancel_scope.cancel()
            if interruption.signum is not None:
                status, outcome = "interrupted", None
                store.set_session_status(session_id, status, interruption.reason)
            elif timed_out.is_set():
                status = "timeout"
        records = registry.list(session_id)
        narration = [text for text in map(_narrate, root.loop.messages) if text is not None]
        report = {
            "session_id": session_id,
            "status": status if outcome is None or status == "timeout" else outcome.status,
            "answer": outcome.text if outcome is not None else None,
            "narration": narration,
            "usage": _usage_summary(store, root),
            "tasks": [_task_report(r) for r in records],
        }
    code = 124 if status == "timeout" else 0
    if interruption.signum is not None:
        code = interruption.exit_code
    return code, report, records


_NARRATION_LINES = 12


def _clip_lines(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= _NARRATION_LINES:
        return text
    hidden = len(lines) - _NARRATION_LINES
    return "\n".join([*lines[:_NARRATION_LINES], f"   ... ({hidden} more lines)"])


def _narrate(message: ChatMessage) -> str | None:
    if message.role == "assistant" and message.content.strip():
        # Long tool results quoted in a message are clipped per section.
        return "\n\n".join(_clip_lines(part) for part in message.content.split("\n\n"))
    if message.role == "user" and "<workflow-question" in message.content:
        asked = re.finditer(
            r'<workflow-question id="(.*?)" run="(.*?)" actor="(.*?)">\n(.*?)\n', message.content
        )
        return "\n".join(
            f"[question {html.unescape(q.group(1))}] actor {html.unescape(q.group(3))} of "
            f"{html.unescape(q.group(2))} asks: {html.unescape(q.group(4))}"
            for q in asked
        )
    if message.role == "user" and "<task-notification>" in message.content:
        lines = []
        for fragment in message.content.split("<task-notification>")[1:]:
            summary = re.search(r"<summary>(.*?)</summary>", fragment, re.S)
            body = re.search(r"<(?:result|error)>(.*?)</(?:result|error)>", fragment, re.S)
            line = f"[notification] {html.unescape(summary.group(1)) if summary else ''}"
            if body:
                line += f": {_clip_lines(html.unescape(body.group(1)).strip())}"
            lines.append(line)
        return "\n".join(lines)
    return None


#: Said on stderr after Ctrl-C or SIGTERM; the exit code is 128 + the signal.
_INTERRUPTED = "[yellow]interrupted: every running subagent was stopped (killed)[/]"


def run_command(request: RunRequest) -> int:
    """Run a root session to completion and print its answer (or JSON); return the exit code."""
    console = wide_console(stderr=request.json)
    try:
        code, report, records = trio.run(_run, request, console)
    except BaseException as exc:
        # trio wraps what escapes a nursery in exception groups.
        if find_exception(exc, KeyboardInterrupt) is not None:
            SafeConsole(stderr=True).print(_INTERRUPTED)
            return 130
        model_error = find_exception(exc, ModelError)
        if model_error is None:
            raise
        SafeConsole(stderr=True, soft_wrap=True).print(
            f"[red]model error:[/] {quoted(str(model_error))}", highlight=False
        )
        return 1
    if report["status"] == "interrupted":
        SafeConsole(stderr=True).print(_INTERRUPTED)
    if request.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return code
    if request.narrate:
        for text in report["narration"]:
            console.print(shown(text, multiline=True), highlight=False)
            console.print()
    elif report["answer"] is not None:
        console.print(shown(report["answer"], multiline=True), highlight=False)
    if report["status"] == "timeout":
        console.print(f"[yellow]the run timed out after {request.timeout_s:g} s[/]")
    if records:
        console.print()
        console.print(tasks_table(records, f"subagents of session {report['session_id']}"))
    return code
