"""``subvisor ps``, ``logs``, ``stop`` and ``bg``: look at and steer the tasks of a session.

A session whose supervisor is live answers on its control channel (live usage,
and the only way to stop a task); otherwise the SQLite store has the record.
Opening the store first ends what dead supervisors left running (S-SEC-6),
so a killed run never shows as running.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Literal

from rich.console import Console
from rich.text import Text

from protocol import ChatMessage

from ..state._paths import subvisor_home
from ..state._recovery import open_recovered_store
from ..state._store import SessionStore
from ..state._task_record import TaskRecord
from ..state._usage import UsageRollup
from ._console import quoted, shown
from ._control_channel import LiveSession
from ._control_client import ControlError, control_request, follow_task, live_sessions
from ._control_ops import BackgroundOp, StopOp, TaskOp, TasksOp, TranscriptOp
from ._run import tasks_table, wide_console

__all__ = ["background_command", "logs_command", "ps_command", "stop_command"]


def _open_store() -> SessionStore | None:
    return open_recovered_store(subvisor_home())


def _no_state(console: Console) -> int:
    console.print(
        f"[yellow]no subvisor state in {subvisor_home()}[/]: run `subvisor run` or "
        "`subvisor demo` first (or set SUBVISOR_HOME)"
    )
    return 1


@dataclass(frozen=True, slots=True)
class _SessionTasks:
    session_id: str
    status: str
    live: bool
    records: list[TaskRecord]
    usage: UsageRollup
    #: Why the session ended as it did (``interrupted``: why), when known.
    status_reason: str | None = None
    #: What live tasks do now (waiting for a model slot, streaming), by task id.
    activity: dict[str, str] = field(default_factory=dict)


def _live_tasks(session: LiveSession) -> _SessionTasks | None:
    try:
        reply = control_request(session.address, TasksOp())
    except (OSError, ControlError):
        return None  # it ended meanwhile: the store has the final state
    return _SessionTasks(
        session_id=reply["session_id"],
        status=reply["status"],
        live=True,
        records=[TaskRecord.model_validate(t) for t in reply["tasks"]],
        usage=UsageRollup.from_summary(reply["usage"]),
        activity={str(k): str(v) for k, v in (reply.get("activity") or {}).items()},
    )


def _stored_tasks(console: Console, session_id: str | None) -> _SessionTasks | None:
    store = _open_store()
    if store is None:
        _no_state(console)
        return None
    with store:
        session = store.get_session(session_id) if session_id else store.latest_root_session()
        if session is None:
            asked = quoted(repr(session_id))
            console.print(f"[red]no session {asked}[/]" if session_id else "no sessions yet")
            return None
        return _SessionTasks(
            session_id=session.session_id,
            status=session.status,
            live=False,
            records=store.tasks_for_session(session.session_id),
            usage=store.usage_rollup(session.session_id),
            status_reason=session.status_reason,
        )


def _latest_stored_at() -> float:
    store = _open_store()
    if store is None:
        return 0.0
    with store:
        latest = store.latest_root_session()
    return latest.created_at if latest is not None else 0.0


def ps_command(session_id: str | None, as_json: bool) -> int:
    """List the tasks of a session (default: the latest one, live or stored) and its usage."""
    console = wide_console()
    live = live_sessions(subvisor_home())
    found: _SessionTasks | None = None
    if session_id:
        target = next((s for s in live if s.session_id == session_id), None)
    else:
        # The latest session, whether its supervisor still runs or not.
        target = live[0] if live and live[0].started_at >= _latest_stored_at() else None
    if target is not None:
        found = _live_tasks(target)
    if found is None:
        found = _stored_tasks(console, session_id)
        if found is None:
            return 1
    if as_json:
        sys.stdout.write(
            json.dumps(
                {
                    "session_id": found.session_id,
                    "status": found.status,
                    "status_reason": found.status_reason,
                    "live": found.live,
                    "tasks": [r.model_dump(mode="json") for r in found.records],
                    "activity": found.activity,
                    "usage": found.usage.summary(),
                },
                indent=2,
            )
            + "\n"
        )
        return 0
    state = "live" if found.live else found.status
    if found.status_reason:
        state += f": {quoted(found.status_reason)}"
    title = f"tasks of session {found.session_id} ({state})"
    console.print(tasks_table(found.records, title, found.activity))
    console.print(f"usage: {found.usage.describe()}", highlight=False)
    return 0


def _find(store: SessionStore, console: Console, task_id: str) -> TaskRecord | None:
    try:
        record = store.find_task(task_id)
    except LookupError as exc:
        console.print(f"[red]{quoted(str(exc))}[/]")
        return None
    if record is None:
        console.print(
            f"[red]no task {quoted(repr(task_id))}[/]: `subvisor ps` lists the tasks of a session"
        )
    return record


@dataclass(frozen=True, slots=True)
class _LiveTask:
    session: LiveSession
    record: TaskRecord


def _find_live(task_id: str) -> _LiveTask | None:
    """The task (id or unique prefix) in a live session; ``None`` when no live session has it.

    Every live session is asked, so a task of a run whose state lives
    elsewhere (``subvisor stress``) is found too. Raises ``ControlError`` for
    an ambiguous prefix.
    """
    for session in live_sessions(subvisor_home()):
        try:
            reply = control_request(session.address, TaskOp(task_id=task_id))
        except OSError:
            continue
        except ControlError as exc:
            if exc.code == "unknown_task":
                continue
            raise
        return _LiveTask(session, TaskRecord.model_validate(reply["task"]))
    return None


def _live_transcript(live: _LiveTask) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    after = 0
    while True:
        reply = control_request(
            live.session.address, TranscriptOp(task_id=live.record.task_id, after_seq=after)
        )
        for item in reply["messages"]:
            item.pop("seq", None)
            messages.append(ChatMessage.model_validate(item))
        if reply["after_seq"] == after:
            return messages
        after = reply["after_seq"]


def _load_task(console: Console, task_id: str) -> tuple[TaskRecord, list[ChatMessage]] | None:
    """The task ``task_id`` (a unique prefix will do) and its transcript; None after an error."""
    try:
        live = _find_live(task_id)
    except ControlError as exc:
        console.print(f"[red]{quoted(str(exc))}[/]")
        return None
    if live is not None:
        try:
            return live.record, _live_transcript(live)
        except (OSError, ControlError):
            pass  # it ended meanwhile: read the store
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


def logs_command(task_id: str, follow: bool = False) -> int:
    """Print a subagent's transcript and its output; with ``follow``, follow it until it ends."""
    console = wide_console()
    if follow:
        try:
            live = _find_live(task_id)
        except ControlError as exc:
            console.print(f"[red]{quoted(str(exc))}[/]")
            return 1
        if live is not None and not live.record.is_terminal:
            try:
                return _follow(console, live)
            except KeyboardInterrupt:
                return 130  # Ctrl-C: the user stopped following, nothing went wrong
    found = _load_task(console, task_id)
    if found is None:
        return 1
    record, messages = found
    _print_header(console, record)
    for message in messages:
        _print_message(console, message)
    _print_output(console, record)
    return 0


def _print_header(console: Console, record: TaskRecord) -> None:
    # A rule's title is markup: the description is a Text, never parsed.
    console.rule(shown(f"{record.task_id}: {record.description} ({record.status})"))
    if record.sandbox is not None:
        colour = "red" if record.sandbox.requested and not record.sandbox.enforced else "dim"
        console.print(f"[{colour}]sandbox: {quoted(record.sandbox.summary)}[/]", highlight=False)
    if record.caps:
        console.print(f"[dim]caps: {quoted(record.caps)}[/]", highlight=False)


def _print_label(console: Console, role: str) -> None:
    label = {"user": "user", "assistant": "assistant", "tool": "tool result"}[role]
    console.print(f"[bold]{label}[/]", highlight=False)


def _print_message(console: Console, message: ChatMessage, streamed: str = "") -> None:
    """One message; ``streamed`` is its text's start, printed already (its label too)."""
    if not streamed:
        _print_label(console, message.role)
    content = message.content[len(streamed) :]
    if content or streamed:
        # soft_wrap: the text as it is, however it arrived (whole or streamed in pieces).
        console.print(shown(content, multiline=True), highlight=False, soft_wrap=True)
    for call in message.tool_calls:
        console.print(shown(f"  -> {call.name} {json.dumps(call.input)}"), soft_wrap=True)


def _print_output(console: Console, record: TaskRecord) -> None:
    console.rule("output")
    try:
        with open(record.output_file, encoding="utf-8") as f:
            console.print(shown(f.read() or "(empty)", multiline=True), highlight=False)
    except OSError as exc:
        console.print(f"[yellow]cannot read {quoted(record.output_file)}: {quoted(str(exc))}[/]")
    if record.error:
        console.print(Text.assemble(("error:", "red"), " ", shown(record.error)), highlight=False)


class _LiveAnswer:
    """The answer streaming now, as printed: the text so far, on a line left open.

    Streamed text is a prefix of the message it becomes, so that message prints
    only what did not stream. Text of an answer joined mid-way (after a
    ``resync``) is not printed; its message then prints whole.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.text = ""
        self.joined = True

    def add(self, text: str, offset: int) -> None:
        if offset == 0:
            self.close()
            self.joined = True
            _print_label(self.console, "assistant")
        elif not self.joined or offset > len(self.text):
            self.joined = False
            return
        new = text[len(self.text) - offset :]
        self.text += new
        self.console.print(shown(new, multiline=True), end="", highlight=False, soft_wrap=True)

    def land(self, message: ChatMessage) -> None:
        """``message`` was stored: print what of it has not streamed."""
        streamed = self.text
        if message.role != "assistant" or not message.content.startswith(streamed):
            self.close()
            streamed = ""
        self.text = ""
        _print_message(self.console, message, streamed)

    def close(self) -> None:
        """End the open line of text that never became a message (a retried call)."""
        if self.text:
            self.console.print()
            self.text = ""

    def lost(self) -> None:
        """Some text was dropped: print no more of this answer."""
        self.joined = False


def _follow(console: Console, live: _LiveTask) -> int:
    """``logs -f``: the transcript so far, then as it grows, until the task ends."""
    answer = _LiveAnswer(console)
    seq = 0
    events = follow_task(live.session.address, live.record.task_id)
    try:
        reply = next(events)
    except (OSError, ControlError) as exc:
        console.print(f"[red]{quoted(str(exc))}[/]")
        return 1
    record = TaskRecord.model_validate(reply["task"])
    _print_header(console, record)
    try:
        for event in events:
            kind = event.get("event")
            if kind == "message":
                seq = int(event["seq"])
                answer.land(ChatMessage.model_validate(event["message"]))
            elif kind == "text.streamed":
                answer.add(str(event["text"]), int(event["offset"]))
            elif kind == "resync":
                answer.lost()
            elif kind == "task.ended":
                answer.close()
                return _followed_to_the_end(console, TaskRecord.model_validate(event["task"]))
    except OSError:
        pass  # the session ended meanwhile: the store has the rest
    answer.close()
    return _rest_from_the_store(console, record, seq)


def _followed_to_the_end(console: Console, record: TaskRecord) -> int:
    _print_output(console, record)
    console.print(f"task {record.task_id} ended: {record.status}", highlight=False)
    return 0


def _rest_from_the_store(console: Console, record: TaskRecord, seq: int) -> int:
    """The session ended before the task's end came: what the store has after ``seq``."""
    store = _open_store()
    if store is None:
        return _no_state(console)
    with store:
        stored = store.get_task(record.task_id) or record
        transcript = record.child_session_id
        messages = store.messages_after(transcript, after_seq=seq) if transcript else []
    for _, message in messages:
        _print_message(console, message)
    if not stored.is_terminal:
        console.print(
            f"[red]the session of task {record.task_id} ended without recording its end[/]:"
            " `subvisor ps` shows its state"
        )
        return 1
    return _followed_to_the_end(console, stored)


def stop_command(task_id: str) -> int:
    """Ask the running ``subvisor`` that owns a task to stop it."""
    return _control_command(task_id, "stop")


def background_command(task_id: str) -> int:
    """Ask the running ``subvisor`` to move a foreground agent to the background (S-RUN-5)."""
    return _control_command(task_id, "background")


def _control_command(task_id: str, op: Literal["stop", "background"]) -> int:
    console = wide_console()
    try:
        live = _find_live(task_id)
    except ControlError as exc:
        console.print(f"[red]{quoted(str(exc))}[/]")
        return 1
    if live is None:
        # No live session has it: the store says how it ended (or that its
        # supervisor died without recording an end).
        store = _open_store()
        if store is None:
            return _no_state(console)
        with store:
            record = _find(store, console, task_id)
        if record is None:
            return 1
        if record.is_terminal:
            console.print(f"task {record.task_id} already ended: {record.status}")
            return 0 if op == "stop" else 1
        console.print(
            f"[red]task {record.task_id} is recorded as {record.status}, but no running "
            f"subvisor serves its session {record.parent_session_id}[/]: its supervisor has exited"
        )
        return 1
    record = live.record
    if record.is_terminal:
        console.print(f"task {record.task_id} already ended: {record.status}")
        return 0 if op == "stop" else 1
    try:
        request = (
            StopOp(task_id=record.task_id) if op == "stop" else BackgroundOp(task_id=record.task_id)
        )
        reply = control_request(live.session.address, request)
    except (OSError, ControlError) as exc:
        console.print(f"[red]{quoted(str(exc))}[/]")
        return 1
    done = "stopped" if op == "stop" else "moved to the background:"
    console.print(f"{done} {record.task_id} {reply.get('status') or ''}".rstrip())
    return 0
