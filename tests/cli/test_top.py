"""`subvisor top` on a live `subvisor run`, driven by Textual's headless pilot.

The session is a real `subvisor run` process (scripted model, real workers) with
its control channel's address file in a temporary SUBVISOR_HOME; the app runs in this process on
asyncio (pytest-trio does not run these: they are plain tests around
``asyncio.run``). S-OBS-1 (paged list, finished ones too, event-driven),
S-OBS-2 (transcript while the child runs), stop and background from the keyboard.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, RichLog, Static

from supervisor.cli._control_channel import LiveSession, address_file, write_address_file
from supervisor.cli._control_client import ControlClient, control_request, live_sessions
from supervisor.cli._control_ops import ControlRequest, ListOp
from supervisor.cli._top import TopApp
from tests.support.cli import run_cli, start_cli
from tests.support.delegation import (
    READ_README,
    agent_call,
    home_for,
    readme_project,
    write_scenario,
)
from tests.support.live_text import ANSWER, held_answer, streaming_setup
from tests.support.provider_server import ProviderServer


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return readme_project(tmp_path)


def _start_run(home: Path, project: Path, model: str) -> subprocess.Popen[str]:
    return start_cli(
        home,
        *("run", "--json", "--model", model, "go"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_live(home: Path, runner: subprocess.Popen[str]) -> LiveSession:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        live = live_sessions(home)
        if live:
            return live[0]
        assert runner.poll() is None, runner.communicate()
        time.sleep(0.05)
    raise AssertionError("the run never served its control channel")


async def _until(
    pilot: Pilot[None],
    condition: Callable[[], bool],
    what: str,
    state: Callable[[], object] = lambda: "",
) -> None:
    """Let the app work until ``condition`` holds (a hang guard, not a timing assertion);
    a hang says what it waited for and ``state()``."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what} {state()}"
        await pilot.pause(0.05)


def _table(app: TopApp) -> DataTable[object]:
    return app.query_one("#agents", DataTable)


def _rows(app: TopApp) -> dict[str, list[str]]:
    """What the table shows: agent id -> its cells as text."""
    table = _table(app)
    return {str(key.value): [str(cell) for cell in table.get_row(key)] for key in table.rows}


def _status(app: TopApp, description: str) -> str | None:
    for cells in _rows(app).values():
        if cells[2] == description:
            return cells[3]
    return None


def _cells_of(app: TopApp, description: str) -> list[str]:
    return next((cells for cells in _rows(app).values() if cells[2] == description), [])


def _select(app: TopApp, description: str) -> str:
    table = _table(app)
    for index, (agent_id, cells) in enumerate(_rows(app).items()):
        if cells[2] == description:
            table.move_cursor(row=index)
            return agent_id
    raise AssertionError(f"{description!r} is not on this page")


def _transcript_text(app: TopApp) -> str:
    return "\n".join(line.text for line in app.query_one("#transcript", RichLog).lines)


SCENARIO = {
    "root": [
        {
            "tool_calls": [
                agent_call("quick one", "read it", run_in_background=True),
                agent_call("quick two", "say hi", run_in_background=True),
                agent_call("sleeper", "wait here", run_in_background=True),
                agent_call("holder", "hold the root"),
            ]
        },
        {"text": "moved on: {{tool_result}}"},
    ]
    + [{"text": f"noted {n}"} for n in range(8)],
    "quick one": [{"tool_calls": [READ_README]}, {"text": "quick one read {{tool_result}}"}],
    "quick two": [{"text": "hi"}],
    "sleeper": [{"tool_calls": [READ_README]}, {"text": "never", "latency_ms": 600_000}],
    "holder": [{"text": "late", "latency_ms": 600_000}],
}


def test_top_follows_a_live_run_pages_reads_stops_and_backgrounds(
    tmp_path: Path, project: Path
) -> None:
    """Rows appear and change as agents start and end; n/p page (2 per page); enter opens a
    live transcript; s stops the selected worker; b moves the foreground one to the
    background; the header shows the rolled-up usage; the end of the run is shown."""
    home = home_for(tmp_path)
    runner = _start_run(home, project, write_scenario(tmp_path / "s.yaml", SCENARIO))
    try:
        session = _wait_live(home, runner)
        asyncio.run(_drive_top(session, runner))
        out, err = runner.communicate(timeout=60)
    finally:
        runner.kill()
    assert runner.returncode == 0, err
    report = json.loads(out)
    tasks = {t["description"]: t for t in report["tasks"]}
    assert tasks["sleeper"]["status"] == "killed"
    assert tasks["sleeper"]["error"] == "stopped by request"
    assert tasks["holder"]["background"] and tasks["holder"]["status"] == "killed"
    assert tasks["quick one"]["status"] == tasks["quick two"]["status"] == "completed"
    assert report["answer"].startswith("noted")


async def _drive_top(session: LiveSession, runner: subprocess.Popen[str]) -> None:
    app = TopApp(session.address, session.session_id, page_size=2, redraw_interval_s=0.05)
    async with app.run_test(size=(170, 40)) as pilot:
        # S-OBS-1: all four children are listed, two per page, finished ones too.
        await _until(
            pilot,
            lambda: (
                app.shown is not None
                and app.shown.total == 4
                and app.shown.counts.get("completed") == 2
                and app.shown.counts.get("running") == 2
            ),
            "two agents completed and two running",
        )
        assert app.shown is not None and app.shown.pages == 2
        first_page = _rows(app)
        assert len(first_page) == 2
        await pilot.press("n")
        await _until(
            pilot,
            lambda: (
                app.page == 2 and len(_rows(app)) == 2 and not set(_rows(app)) & set(first_page)
            ),
            "page 2",
        )
        second_page = _rows(app)
        assert len(second_page) == 2
        await pilot.press("n")  # there is no page 3
        await pilot.pause(0.2)
        assert app.page == 2
        await pilot.press("p")
        await _until(pilot, lambda: set(_rows(app)) == set(first_page), "back on page 1")
        shown = {cells[2]: cells for cells in {**first_page, **second_page}.values()}
        assert set(shown) == {"quick one", "quick two", "sleeper", "holder"}
        # An end shows at once (from its event); its counts come with the next fetch.
        if "quick one" not in (cells[2] for cells in first_page.values()):
            await pilot.press("n")
            await _until(pilot, lambda: _status(app, "quick one") is not None, "its page")
        await _until(
            pilot,
            lambda: (
                (cells := _cells_of(app, "quick one"))[3:4] == ["completed bg"] and cells[6] == "1"
            ),
            "quick one completed in the background after one tool call",
            lambda: _cells_of(app, "quick one"),
        )
        header = str(app.query_one("#header", Static).content)
        assert session.session_id in header and "root + 4 subagents" in header

        # Find the sleeper's page; S-OBS-2: its transcript while it runs.
        if _status(app, "sleeper") is None:
            await pilot.press("n")
            await _until(pilot, lambda: _status(app, "sleeper") is not None, "sleeper's page")
        sleeper = _select(app, "sleeper")
        pid = next(
            a["pid"]
            for a in control_request(session.address, ListOp(page_size=100))["agents"]
            if a["agentId"] == sleeper
        )
        worker = psutil.Process(pid)
        await pilot.press("enter")
        await _until(
            pilot,
            lambda: (
                "wait here" in _transcript_text(app) and "# demo project" in _transcript_text(app)
            ),
            "the sleeper's transcript",
        )
        assert app.transcript_agent == sleeper

        # s stops the selected agent: its worker process ends, its row says killed.
        await pilot.press("s")
        await _until(pilot, lambda: _status(app, "sleeper") == "killed bg", "sleeper killed")
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
        await pilot.press("escape")
        assert app.transcript_agent is None

        # b moves the foreground holder to the background; then s ends it too.
        if _status(app, "holder") is None:
            await pilot.press("p" if app.page == 2 else "n")
            await _until(pilot, lambda: _status(app, "holder") is not None, "holder's page")
        assert _status(app, "holder") == "running"
        _select(app, "holder")
        await pilot.press("b")
        await _until(pilot, lambda: _status(app, "holder") == "running bg", "holder in background")
        await pilot.press("s")
        await _until(pilot, lambda: _status(app, "holder") == "killed bg", "holder killed")

        # The run ends once its background agents have: the view keeps its last state.
        await _until(pilot, lambda: app.session_ended, "the session's end")
        await pilot.pause(0.2)
        assert "ENDED" in str(app.query_one("#header", Static).content)
        assert len(_rows(app)) == 2
        await pilot.press("q")


def test_top_without_a_live_session_says_how_to_start_one(tmp_path: Path) -> None:
    home = home_for(tmp_path)
    top = run_cli(home, "top", timeout=60)
    assert top.returncode == 1
    assert "no live subvisor session" in top.stderr and "subvisor run" in top.stderr


def test_top_refuses_more_than_100_per_page(tmp_path: Path) -> None:
    """S-OBS-1: at most 100 subagents per page."""
    top = run_cli(home_for(tmp_path), "top", "--page-size", "101", timeout=60)
    assert top.returncode == 2 and "from 1 to 100" in top.stderr


def test_live_sessions_removes_address_files_of_supervisors_that_are_gone(
    tmp_path: Path,
) -> None:
    """An address file whose socket nobody serves (its supervisor was SIGKILLed) is swept;
    one that does not parse is skipped, not trusted and not removed."""
    home = home_for(tmp_path)
    (home / "run").mkdir(parents=True)
    dead = LiveSession("sess_dead", "@subvisor-" + "0" * 32, pid=1, started_at=time.time())
    write_address_file(home, dead)
    garbled = address_file(home, "sess_garbled")
    garbled.write_text("not json")
    assert live_sessions(home) == []
    assert not address_file(home, "sess_dead").exists()
    assert garbled.exists()


def test_a_stale_address_file_gives_one_line(tmp_path: Path) -> None:
    """`subvisor top SESSION` whose address file names a socket nobody serves: one line, exit 1."""
    home = home_for(tmp_path)
    (home / "run").mkdir(parents=True)
    write_address_file(
        home, LiveSession("sess_dead", "@subvisor-" + "0" * 32, pid=1, started_at=time.time())
    )
    top = run_cli(home, "top", "sess_dead", timeout=60)
    assert top.returncode == 1
    assert "no live session 'sess_dead'" in top.stderr and "Traceback" not in top.stderr
    assert len(top.stderr.strip().splitlines()) == 1, top.stderr


class _CountingClient(ControlClient):
    """The app's client, counting its requests by op and the lifecycle events it got."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.requests: Counter[str] = Counter()
        self.in_flight = 0
        self.events: Counter[str] = Counter()
        self.streamed_by: Counter[str] = Counter()

    async def request(self, request: ControlRequest) -> dict[str, Any]:
        self.requests[request.op] += 1
        self.in_flight += 1
        try:
            return await super().request(request)
        finally:
            self.in_flight -= 1

    async def subscribe(
        self, on_subscribed: Callable[[], None] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        async for event in super().subscribe(on_subscribed):
            self.events[event["event"]] += 1
            if event["event"] == "text.streamed":
                self.streamed_by[event["agentId"]] += 1
            yield event


def _idle(app: TopApp, client: _CountingClient) -> bool:
    """Nothing left to redraw and no request on its way."""
    return not app._dirty.is_set() and client.in_flight == 0


STREAMERS = 3


def test_top_shows_streamed_text_from_the_events_without_refetching(tmp_path: Path) -> None:
    """Issue 19, S-OBS-2: while agents stream, `top` applies each text.streamed event
    itself: not one page (`list`) or transcript request more, however many arrive; the
    open transcript shows the answer as it streams, then the stored message once."""
    start, finish = threading.Event(), threading.Event()
    with ProviderServer() as server:
        server.enqueue(*(held_answer((0, start), (2, finish)) for _ in range(STREAMERS)))
        home, project, model = streaming_setup(tmp_path, server, agents=STREAMERS)
        runner = _start_run(home, project, model)
        try:
            session = _wait_live(home, runner)
            counts = asyncio.run(_drive_streaming_top(session, server, start, finish))
            out, err = runner.communicate(timeout=60)
        finally:
            start.set()
            finish.set()
            runner.kill()
    assert runner.returncode == 0, err
    tasks = json.loads(out)["tasks"]
    assert [t["status"] for t in tasks] == ["completed"] * STREAMERS
    assert counts["text.streamed"] >= STREAMERS
    assert counts["refetches while streaming"] == 0
    assert counts["transcript requests"] == 0


async def _drive_streaming_top(
    session: LiveSession, server: ProviderServer, start: threading.Event, finish: threading.Event
) -> dict[str, int]:
    app = TopApp(session.address, session.session_id, redraw_interval_s=0, resource_refresh_s=3600)
    client = app.client = _CountingClient(session.address)
    async with app.run_test(size=(170, 40)) as pilot:
        # Every streamer runs, its model call held before the first piece of its answer.
        await _until(
            pilot,
            lambda: (
                app.shown is not None
                and app.shown.counts.get("running") == STREAMERS
                and len(server.requests) == STREAMERS
            ),
            "every streamer in its model call",
            lambda: (
                f"(shown: {app.shown and app.shown.counts}; model requests: "
                f"{len(server.requests)}; control requests: {dict(client.requests)}; "
                f"events: {dict(client.events)})"
            ),
        )
        _select(app, "stream 0")
        await pilot.press("enter")
        await _until(pilot, lambda: "say it" in _transcript_text(app), "the open transcript")
        await _until(pilot, lambda: _idle(app, client), "the view settled")
        before = client.requests["list"]
        start.set()
        # The first piece of each answer is published at once; the rest is held.
        await _until(
            pilot, lambda: len(client.streamed_by) == STREAMERS, "text from every streamer"
        )
        # What streamed before the hold (one network read or two), the rest still held.
        await _until(pilot, lambda: app.streaming.startswith(ANSWER[0]), "the streaming answer")
        assert ANSWER[2] not in app.streaming
        assert ANSWER[0] not in _transcript_text(app)
        await _until(pilot, lambda: _idle(app, client), "the view settled")
        refetches_while_streaming = client.requests["list"] - before
        finish.set()
        whole = "".join(ANSWER)
        await _until(pilot, lambda: whole in _transcript_text(app), "the answer stored")
        await _until(pilot, lambda: app.session_ended, "the session's end")
        assert _transcript_text(app).count(whole) == 1
        assert app.streaming == ""
        await pilot.press("q")
    return {
        "text.streamed": client.events["text.streamed"],
        "refetches while streaming": refetches_while_streaming,
        "transcript requests": client.requests["transcript"],
    }
