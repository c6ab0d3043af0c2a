"""``subvisor ps``, ``logs`` and ``stop``: look at and stop the tasks of a session."""

from __future__ import annotations

import json
import sys

import trio
from rich.console import Console
from rich.markup import escape

from protocol import ChatMessage

from ._cli_run import tasks_table, wide_console
from ._control import control_socket_path, send_control_request
from ._paths import database_path, subvisor_home
from ._store import SessionStore
from ._tasks import TaskRecord

__all__ = ["background_command", "logs_command", "ps_command", "stop_command"]


def _open_store() -> SessionStore | None:
    path = database_path(subvisor_home())
    return SessionStore(path) if path.exists() else None


def _no_state(console: Console) -> int:
    console.print(
        f"[yellow]no subvisor state in {subvisor_home()}[/]: run `subvisor run` or "
        "`subvisor demo` first (or set SUBVISOR_HOME)"
    )
    return 1


def ps_command(session_id: str | None, as_json: bool) -> int:
    """List the tasks of a session (default: the latest root session)."""
    console = wide_console()
    store = _open_store()
    if store is None:
        return _no_state(console)
    with store:
        session = store.get_session(session_id) if session_id else store.latest_root_session()
        if session is None:
            console.print(f"[red]no session {session_id!r}[/]" if session_id else "no sessions yet")
            return 1
        records = store.tasks_for_session(session.session_id)
    if as_json:
        sys.stdout.write(
            json.dumps(
                {
                    "session_id": session.session_id,
                    "tasks": [r.model_dump(mode="json") for r in records],
                },
                indent=2,
            )
            + "\n"
        )
    else:
        console.print(
            tasks_table(records, f"tasks of session {session.session_id} ({session.status})")
        )
    return 0


def _find(store: SessionStore, console: Console, task_id: str) -> TaskRecord | None:
    try:
        record = store.find_task(task_id)
    except LookupError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        return None
    if record is None:
        console.print(f"[red]no task {task_id!r}[/]: `subvisor ps` lists the tasks of a session")
    return record


def _load_task(console: Console, task_id: str) -> tuple[TaskRecord, list[ChatMessage]] | None:
    """The task ``task_id`` (a unique prefix will do) and its transcript; None after an error."""
    store = _open_store()
    if store is None:
        _no_state(console)
        return None
    with store:
        record = _find(store, console, task_id)
        if record is None:
            return None
        messages = store.messages(record.child_session_id) if record.child_session_id else []
    return record, messages


def logs_command(task_id: str) -> int:
    """Print a subagent's transcript and its output."""
    console = wide_console()
    found = _load_task(console, task_id)
    if found is None:
        return 1
    record, messages = found
    console.rule(f"{record.task_id}: {record.description} ({record.status})")
    for message in messages:
        label = {"user": "user", "assistant": "assistant", "tool": "tool result"}[message.role]
        console.print(f"[bold]{label}[/]", highlight=False)
        if message.content:
            console.print(message.content, markup=False, highlight=False)
        for call in message.tool_calls:
            console.print(f"  -> {call.name} {json.dumps(call.input)}", markup=False)
    console.rule("output")
    try:
        with open(record.output_file, encoding="utf-8") as f:
            console.print(f.read() or "(empty)", markup=False, highlight=False)
    except OSError as exc:
        console.print(f"[yellow]cannot read {record.output_file}: {exc}[/]")
    if record.error:
        console.print(f"[red]error:[/] {record.error}", highlight=False)
    return 0


def stop_command(task_id: str) -> int:
    """Ask the running ``subvisor`` that owns a task to stop it."""
    return _control_command(task_id, "stop")


def background_command(task_id: str) -> int:
    """Ask the running ``subvisor`` to move a foreground agent to the background (S-RUN-5)."""
    return _control_command(task_id, "background")


def _control_command(task_id: str, op: str) -> int:
    console = wide_console()
    found = _load_task(console, task_id)
    if found is None:
        return 1
    record, _ = found
    if record.is_terminal:
        console.print(f"task {record.task_id} already ended: {record.status}")
        return 0 if op == "stop" else 1
    path = control_socket_path(subvisor_home(), record.parent_session_id)
    try:
        reply = trio.run(send_control_request, path, {"op": op, "task_id": record.task_id})
    except OSError:
        console.print(
            f"[red]task {record.task_id} is recorded as {record.status}, but no running subvisor "
            f"serves its session ({path} is gone)[/]: its supervisor has exited"
        )
        return 1
    if not reply.get("ok"):
        console.print(f"[red]{escape(str(reply.get('error')))}[/]")
        return 1
    done = "stopped" if op == "stop" else "moved to the background:"
    console.print(f"{done} {record.task_id} {reply.get('status') or ''}".rstrip())
    return 0
