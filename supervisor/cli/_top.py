"""``subvisor top``: a live view of one session's subagents (S-OBS-1, S-OBS-2).

A Textual app attached to a live supervisor's control channel. It redraws on
the session's lifecycle events (a subagent launched, started, finished a turn
or a tool call, ended), coalesced to a few redraws a second, and samples the
running workers' RSS and CPU% every ``resource_refresh_s``; it never polls
per token. Finished subagents stay listed; pages hold 20 by default, at most
100.

The open transcript follows its agent through the channel's ``follow`` op:
new messages as they are stored and, below them, the answer as it streams
(``text.streamed``, coalesced by the supervisor), from the events themselves.
Streamed text changes nothing in the table, so it never refetches a page.

Keys: ``n``/``p`` next/previous page, ``enter`` opens the selected agent's
transcript (read-only; it follows the agent live), ``escape`` closes it,
``s`` stops the selected agent, ``b`` moves a selected foreground agent to
the background, ``q`` quits.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from rich.console import Console
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.markup import escape as escape_markup
from textual.widgets import DataTable, Footer, RichLog, Static

from ..files._printable import printable
from ..state._paths import database_path, subvisor_home
from ..state._recovery import open_recovered_store
from ..state._store import MAX_PAGE_SIZE, SessionStore
from ..state._usage import UsageRollup, format_bytes
from ._console import quoted, shown
from ._control_client import AgentPage, AgentRow, ControlClient, ControlError, live_sessions
from ._control_ops import BackgroundOp, StopOp

__all__ = ["COLUMNS", "TopApp", "top_command"]

#: The table's columns: (key, label, width). Fixed widths: rows change, the layout does not.
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("agent", "agent id", 22),
    ("type", "type", 16),
    ("description", "description", 32),
    ("status", "status", 12),
    ("turns", "turns", 5),
    ("tokens", "tokens", 8),
    ("tools", "tool calls", 10),
    ("rss", "RSS", 7),
    ("cpu", "CPU%", 5),
    ("elapsed", "elapsed", 8),
)

#: Lifecycle events that change nothing the table or header shows: no page refetch.
_NOT_ON_THE_PAGE = frozenset({"text.streamed", "model.waiting"})

_STATUS_STYLES = {
    "running": "cyan",
    "pending": "white",
    "completed": "green",
    "failed": "red",
    "killed": "yellow",
    "interrupted": "magenta",
}


def _cells(row: AgentRow) -> tuple[str | Text, ...]:
    """A row's cells. What an agent or a record chose is a ``Text``, escaped: a ``str`` cell
    is Textual markup, and Textual writes control characters as they are."""
    status = row.status + (" bg" if row.background else "")
    description = printable(row.description or "")
    return (
        shown(row.agent_id),
        shown(row.type or "-"),
        Text(description if len(description) <= 32 else description[:31] + "…"),
        shown(status, style=_STATUS_STYLES.get(row.status, "")),
        str(row.turns),
        str(row.tokens),
        str(row.tool_calls),
        format_bytes(row.rss_bytes) if row.rss_bytes else "-",
        f"{row.cpu_percent:.0f}%" if row.cpu_percent is not None else "-",
        f"{row.elapsed_s:.1f}s",
    )


class TopApp(App[None]):
    """The live view of one session; ``address`` is its control channel's."""

    TITLE = "subvisor top"
    CSS = """
    #header { height: auto; padding: 0 1; background: $boost; }
    #agents { height: 1fr; }
    #pager { height: 1; padding: 0 1; color: $text-muted; }
    #transcript { height: 1fr; border-top: solid $accent; display: none; }
    #transcript.open { display: block; }
    #streaming { height: auto; max-height: 12; padding: 0 1; display: none; }
    #streaming.open { display: block; }
    #status { height: 1; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "next_page", "next page"),
        Binding("p", "prev_page", "prev page"),
        Binding("enter", "open_transcript", "transcript", show=True),
        Binding("escape", "close_transcript", "close transcript"),
        Binding("s", "stop", "stop agent"),
        Binding("b", "background", "to background"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        address: str,
        session_id: str,
        *,
        page_size: int = 20,
        redraw_interval_s: float = 0.25,
        resource_refresh_s: float = 2.0,
    ) -> None:
        super().__init__()
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page size must be from 1 to {MAX_PAGE_SIZE}, not {page_size}")
        self.client = ControlClient(address)
        self.session_id = session_id
        self.page_size = page_size
        self.page = 1
        #: The last page shown; ``None`` before the first answer.
        self.shown: AgentPage | None = None
        #: The agent whose transcript is open.
        self.transcript_agent: str | None = None
        #: Its answer streaming now, as shown below its transcript ("" when none).
        self.streaming = ""
        self._streaming_joined = True
        #: Set once the supervisor has gone (the view keeps its last state).
        self.session_ended = False
        self._redraw_interval_s = redraw_interval_s
        self._resource_refresh_s = resource_refresh_s
        self._dirty = asyncio.Event()

    def compose(self) -> ComposeResult:
        """Header, table, pager line, transcript pane, status line, key help."""
        yield Static(f"session {self.session_id}: connecting…", id="header")
        table: DataTable[str | Text] = DataTable(id="agents", cursor_type="row", zebra_stripes=True)
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        yield Static("", id="pager")
        yield RichLog(id="transcript", wrap=True, markup=False, auto_scroll=True)
        yield Static("", id="streaming")
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        """Start following the session: its first page once its events are subscribed."""
        self.run_worker(self._redraw_loop(), name="redraw", exclusive=False)
        self.run_worker(self._follow_events(), name="events", exclusive=False)
        self.run_worker(self._resource_ticks(), name="resources", exclusive=False)

    # -- following the session ------------------------------------------------------

    async def _follow_events(self) -> None:
        try:
            # The first page is read only once we are subscribed: a status that
            # changes between the two is then on the page or in an event.
            async for event in self.client.subscribe(on_subscribed=self._dirty.set):
                if event.get("event") in _NOT_ON_THE_PAGE:
                    continue  # the open transcript's follow shows streamed text
                self._apply(event)
                self._dirty.set()
        except (OSError, ControlError, ValueError) as exc:
            self.say(f"lost the session's events: {exc}")
        # Ended (or never subscribed): show what it was.
        self.session_ended = True
        self._dirty.set()

    def _apply(self, event: dict[str, Any]) -> None:
        """Show a status change at once, before the next page fetch (which may never come:
        the session can end right after its last agent)."""
        shown, agent = self.shown, event.get("agentId")
        changes: dict[str, Any] = {}
        if event.get("event") == "task.ended":
            changes = {"status": str(event.get("status")), "live": False}
        elif event.get("event") == "task.started":
            changes = {"status": "running"}
        elif event.get("event") == "task.backgrounded":
            changes = {"background": True}
        if shown is None or not changes:
            return
        old = next((row for row in shown.agents if row.agent_id == agent), None)
        if old is None:
            return
        counts = dict(shown.counts)
        if "status" in changes and changes["status"] != old.status:
            counts[old.status] = counts.get(old.status, 1) - 1
            counts[changes["status"]] = counts.get(changes["status"], 0) + 1
        rows = tuple(replace(row, **changes) if row is old else row for row in shown.agents)
        self.shown = replace(shown, agents=rows, counts={k: n for k, n in counts.items() if n})
        self._show_rows(rows)

    async def _redraw_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self.refresh_page()
            # Coalesce: a burst of events is one redraw.
            await asyncio.sleep(self._redraw_interval_s)

    async def _resource_ticks(self) -> None:
        # RSS and CPU% change without lifecycle events: sample the live rows now and then.
        while not self.session_ended:
            await asyncio.sleep(self._resource_refresh_s)
            if self.shown is not None and any(row.live for row in self.shown.agents):
                self._dirty.set()

    async def refresh_page(self) -> None:
        """Fetch the current page and redraw the header, table and pager."""
        if self.session_ended and self.shown is not None:
            self._show_header(self.shown)
            return
        try:
            page = await self.client.page(self.page, self.page_size)
        except (OSError, ControlError) as exc:
            self.session_ended = True
            self.say(f"the session has ended ({exc}); showing its last state")
            if self.shown is not None:
                self._show_header(self.shown)
            return
        if page.page > page.pages and page.page > 1:
            self.page = page.pages  # the last page shrank away (it cannot, but be safe)
            self._dirty.set()
        self.shown = page
        self._show_header(page)
        self._show_rows(page.agents)
        self.query_one("#pager", Static).update(
            f"page {page.page}/{page.pages} · {page.total} subagents · "
            f"{page.page_size} per page · n/p: next/previous page · enter: transcript"
        )

    def _show_header(self, page: AgentPage) -> None:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(page.counts.items()))
        state = "ENDED (supervisor exited)" if self.session_ended else page.session_status
        rollup = UsageRollup.from_summary(page.usage)
        self.query_one("#header", Static).update(
            Text.assemble(
                ("session ", "bold"),
                (printable(page.session_id), "bold cyan"),
                printable(
                    f"  {state}  ·  {page.total} subagents ({counts or 'none yet'})\n",
                    multiline=True,
                ),
                ("usage ", "bold"),
                rollup.describe(),
            )
        )

    def _show_rows(self, rows: tuple[AgentRow, ...]) -> None:
        table: DataTable[str | Text] = self.query_one("#agents", DataTable)
        keys = [row.agent_id for row in rows]
        current = [row_key.value for row_key in table.rows]
        if keys == current:
            for row in rows:
                for (column, _, _), value in zip(COLUMNS, _cells(row), strict=True):
                    table.update_cell(row.agent_id, column, value)
            return
        selected = self.selected_agent()
        table.clear()
        for row in rows:
            table.add_row(*_cells(row), key=row.agent_id)
        if selected in keys:
            table.move_cursor(row=keys.index(selected))

    # -- the transcript pane --------------------------------------------------------

    async def _follow_transcript(self, agent: str) -> None:
        pane = self.query_one("#transcript", RichLog)
        try:
            async for event in self.client.follow(agent):
                if agent != self.transcript_agent:
                    return  # closed, or another agent opened meanwhile
                kind = event.get("event")
                if kind == "message":
                    # The answer that streamed has landed whole: shown once, in the pane.
                    message = event["message"]
                    self._show_streaming("")
                    for line in _transcript_lines({"seq": event.get("seq"), **message}):
                        pane.write(line)
                elif kind == "text.streamed":
                    self._stream(str(event.get("text") or ""), int(event.get("offset") or 0))
                elif kind == "resync":
                    self._streaming_joined = False
                elif kind == "task.ended":
                    self._show_streaming("")
                    status = escape_markup(printable(str(event.get("status"))))
                    pane.border_subtitle = f"{status} · esc closes"
                    return
        except (OSError, ControlError, ValueError) as exc:
            if agent == self.transcript_agent:
                pane.write(shown(f"[transcript unavailable: {exc}]", style="yellow"))

    def _stream(self, text: str, offset: int) -> None:
        """Show a ``text.streamed`` event: the answer so far, below the transcript."""
        if offset == 0:
            self._streaming_joined = True
            self._show_streaming(text)
        elif self._streaming_joined and offset <= len(self.streaming):
            self._show_streaming(self.streaming[:offset] + text)
        else:
            # Text went missing (a resync): show the rest once its message lands.
            self._streaming_joined = False

    def _show_streaming(self, text: str) -> None:
        self.streaming = text
        live = self.query_one("#streaming", Static)
        live.update(
            Text.assemble(("── assistant (streaming)\n", "bold"), shown(text, multiline=True))
            if text
            else ""
        )
        live.set_class(bool(text), "open")

    def action_open_transcript(self) -> None:
        """Open the selected agent's transcript; it follows the agent live."""
        agent = self.selected_agent()
        if agent is None:
            self.say("no agent selected")
            return
        pane = self.query_one("#transcript", RichLog)
        pane.clear()
        pane.add_class("open")
        pane.border_title = f"transcript of {escape_markup(printable(agent))} (read-only, live)"
        pane.border_subtitle = "esc closes"
        self.transcript_agent = agent
        self._show_streaming("")
        # Exclusive: the agent open before stops being followed.
        self.run_worker(
            self._follow_transcript(agent), name="transcript", group="transcript", exclusive=True
        )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row opens its transcript."""
        self.action_open_transcript()

    def action_close_transcript(self) -> None:
        """Hide the transcript pane."""
        self.transcript_agent = None
        self.workers.cancel_group(self, "transcript")
        self.query_one("#transcript", RichLog).remove_class("open")
        self._show_streaming("")

    # -- paging and actions ---------------------------------------------------------

    def action_next_page(self) -> None:
        """Show the next page (if there is one)."""
        if self.shown is not None and self.page < self.shown.pages:
            self.page += 1
            self._dirty.set()

    def action_prev_page(self) -> None:
        """Show the previous page (if there is one)."""
        if self.page > 1:
            self.page -= 1
            self._dirty.set()

    def selected_agent(self) -> str | None:
        """The agent id of the highlighted row, if any."""
        table: DataTable[str | Text] = self.query_one("#agents", DataTable)
        if table.row_count == 0 or not table.is_valid_row_index(table.cursor_row):
            return None
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
        return key

    def action_stop(self) -> None:
        """Stop the selected agent (its worker is killed; its record says why)."""
        self._act("stop", "stopping", "stopped")

    def action_background(self) -> None:
        """Move the selected foreground agent to the background (S-RUN-5)."""
        self._act("background", "moving to the background", "moved to the background")

    def _act(self, op: Literal["stop", "background"], doing: str, done: str) -> None:
        agent = self.selected_agent()
        if agent is None:
            self.say("no agent selected")
            return
        if self.session_ended:
            self.say("the session has ended; nothing to do")
            return
        self.say(f"{doing} {agent}…")

        async def act() -> None:
            try:
                request = StopOp(task_id=agent) if op == "stop" else BackgroundOp(task_id=agent)
                reply = await self.client.request(request)
            except (OSError, ControlError) as exc:
                self.say(f"{op} {agent}: {exc}")
                return
            self.say(f"{done} {agent} ({reply.get('status')})")
            self._dirty.set()

        # A stop returns once the worker has ended: the view must not wait for it.
        self.run_worker(act(), name=f"{op}-{agent}", exclusive=False)

    def say(self, text: str) -> None:
        """Show a line in the status bar."""
        with contextlib.suppress(Exception):  # the app may be shutting down
            self.query_one("#status", Static).update(shown(text))


def _transcript_lines(message: dict[str, Any]) -> list[Text]:
    role = {"user": "user", "assistant": "assistant", "tool": "tool result"}.get(
        message.get("role", ""), str(message.get("role"))
    )
    lines = [shown(f"── {role} (#{message.get('seq')})", style="bold")]
    if message.get("content"):
        lines.append(shown(str(message["content"]), multiline=True))
    for call in message.get("tool_calls") or []:
        lines.append(shown(f"  → {call.get('name')} {call.get('input')}", style="cyan"))
    return lines


def top_command(session_id: str | None, page_size: int, console: Console) -> int:
    """Attach the live view to a session (default: the latest live one); the exit code."""
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        console.print(
            f"[red]--page-size must be from 1 to {MAX_PAGE_SIZE}, not {page_size}[/] (S-OBS-1)"
        )
        return 2
    home = subvisor_home()
    # S-SEC-6: what dead supervisors left is ended (and their run files removed) first.
    store = open_recovered_store(home)
    if store is not None:
        store.close()
    live = live_sessions(home)
    if session_id is None:
        if not live:
            console.print(
                f"[yellow]no live subvisor session in {home / 'run'}[/]: start one in another"
                " terminal (`subvisor run --model ... PROMPT`, `subvisor stress`, or"
                " `subvisor demo`), then run `subvisor top` again (SUBVISOR_HOME must match)"
            )
            return 1
        target = live[0]
    else:
        matches = [s for s in live if s.session_id.startswith(session_id)]
        exact = [s for s in matches if s.session_id == session_id]
        if len(exact or matches) != 1:
            console.print(_not_live(session_id, home, matches))
            return 1
        target = (exact or matches)[0]
    TopApp(target.address, target.session_id, page_size=page_size).run()
    return 0


def _not_live(session_id: str, home: Path, matches: list[Any]) -> str:
    if matches:
        listed = quoted(", ".join(s.session_id for s in matches))
        asked = quoted(repr(session_id))
        return f"[red]{asked} matches several live sessions ({listed})[/]: give more"
    path = database_path(home)
    if path.exists():
        with SessionStore(path) as store:
            if store.get_session(session_id) is not None:
                return (
                    f"[yellow]session {quoted(session_id)} is not live (its supervisor has"
                    f" exited)[/]: `subvisor ps {quoted(session_id)}` shows its final state"
                )
    return (
        f"[red]no live session {quoted(repr(session_id))} in {quoted(str(home / 'run'))}[/]:"
        " `subvisor top` without an id attaches to the latest live one"
    )
