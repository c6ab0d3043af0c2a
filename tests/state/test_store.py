"""The SQLite session store: sessions (S-RUN-2, S-OBS-1), transcripts, events, tasks."""

from __future__ import annotations

import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from protocol import ChatMessage, ToolCall
from supervisor.state._store import (
    SCHEMA_VERSION,
    AmbiguousTaskIdError,
    DuplicateSessionError,
    SessionStore,
    StoreError,
    UnknownSessionError,
)
from supervisor.state._task_record import TaskRecord


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "home" / "subvisor.db")


def make_task(task_id: str, parent: str = "sess_root", **fields: object) -> TaskRecord:
    return TaskRecord.model_validate(
        {
            "task_id": task_id,
            "kind": "local_agent",
            "parent_session_id": parent,
            "description": "find the bug",
            **fields,
        }
    )


def test_creates_parent_dir_wal_and_versioned_schema(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "subvisor.db"
    with SessionStore(path) as store:
        store.create_session("sess_root", parent_id=None, task_type="root")
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()
    with SessionStore(path) as reopened:
        row = reopened.get_session("sess_root")
    assert row is not None
    assert row.task_type == "root"


def test_refuses_a_database_from_a_newer_subvisor(tmp_path: Path) -> None:
    path = tmp_path / "subvisor.db"
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(StoreError, match="newer than this subvisor"):
        SessionStore(path)


def test_in_memory_store_works() -> None:
    with SessionStore(":memory:") as store:
        store.create_session("sess_root", parent_id=None, task_type="root")
        assert store.append_event("sess_root", "TurnStarted", {}) == 1


def test_child_session_round_trips_all_columns_s_run_2(store: SessionStore) -> None:
    store.create_session("sess_root", parent_id=None, task_type="root", cwd="/repo")
    created = store.create_session(
        "sess_subagent_agent_1",
        parent_id="sess_root",
        task_type="subagent_child",
        agent_type="Explore",
        description="map the repo",
        model="openai:gpt-4o",
        cwd="/repo",
    )
    assert store.get_session("sess_subagent_agent_1") == created
    assert created.parent_id == "sess_root"
    assert created.task_type == "subagent_child"
    assert created.status == "running"
    assert created.created_at == created.updated_at
    assert store.get_session("sess_missing") is None


def test_duplicate_session_id_is_refused(store: SessionStore) -> None:
    store.create_session("sess_root", parent_id=None, task_type="root")
    with pytest.raises(DuplicateSessionError, match="sess_root"):
        store.create_session("sess_root", parent_id=None, task_type="root")


def test_set_session_status(store: SessionStore) -> None:
    created = store.create_session("sess_root", parent_id=None, task_type="root")
    store.set_session_status("sess_root", "completed")
    row = store.get_session("sess_root")
    assert row is not None
    assert row.status == "completed"
    assert row.updated_at >= created.updated_at
    with pytest.raises(UnknownSessionError, match="sess_nope"):
        store.set_session_status("sess_nope", "completed")


def test_latest_root_session_ignores_children(store: SessionStore) -> None:
    assert store.latest_root_session() is None
    store.create_session("sess_old", parent_id=None, task_type="root")
    store.create_session("sess_new", parent_id=None, task_type="root")
    store.create_session("sess_child", parent_id="sess_new", task_type="subagent_child")
    latest = store.latest_root_session()
    assert latest is not None
    assert latest.session_id == "sess_new"


def test_child_list_is_paged_in_creation_order_with_finished_ones_s_obs_1(
    store: SessionStore,
) -> None:
    store.create_session("sess_root", parent_id=None, task_type="root")
    store.create_session("sess_other", parent_id=None, task_type="root")
    names = [f"sess_subagent_agent_{index:03}" for index in range(25)]
    for name in names:
        store.create_session(name, parent_id="sess_root", task_type="subagent_child")
    store.set_session_status(names[0], "completed")
    store.create_session("sess_elsewhere", parent_id="sess_other", task_type="subagent_child")
    # Same parent but not a subagent child: not listed.
    store.create_session("sess_fork", parent_id="sess_root", task_type="root")

    first = store.list_child_sessions("sess_root")
    second = store.list_child_sessions("sess_root", offset=20)
    assert [row.session_id for row in first] == names[:20]
    assert [row.session_id for row in second] == names[20:]
    assert first[0].status == "completed"
    assert store.count_child_sessions("sess_root") == 25
    assert store.count_child_sessions("sess_other") == 1


def test_child_page_size_is_clamped_to_1_through_100_s_obs_1(store: SessionStore) -> None:
    for index in range(105):
        store.create_session(f"sess_c{index:03}", parent_id="sess_root", task_type="subagent_child")
    assert len(store.list_child_sessions("sess_root", limit=500)) == 100
    assert len(store.list_child_sessions("sess_root", limit=0)) == 1
    assert [row.session_id for row in store.list_child_sessions("sess_root", offset=-3)][:1] == [
        "sess_c000"
    ]


def test_messages_round_trip_exactly_with_per_session_seq(store: SessionStore) -> None:
    store.create_session("sess_a", parent_id=None, task_type="root")
    store.create_session("sess_b", parent_id=None, task_type="root")
    transcript = [
        ChatMessage(role="user", content="list the files <now> & report"),
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=(
                ToolCall(
                    id="call_1", name="Glob", input={"pattern": "**/*.py", "n": [1, {"x": None}]}
                ),
                ToolCall(id="call_2", name="Read", input={}),
            ),
        ),
        ChatMessage(role="tool", content="no such file", tool_call_id="call_2", is_error=True),
        ChatMessage(role="assistant", content="done \u2713"),
    ]
    seqs = [store.append_message("sess_a", message) for message in transcript]
    assert seqs == [1, 2, 3, 4]
    assert store.append_message("sess_b", transcript[0]) == 1
    assert store.messages("sess_a") == transcript
    assert store.messages("sess_b") == transcript[:1]
    assert store.messages("sess_none") == []


def test_appending_to_an_unknown_session_fails_and_writes_nothing(store: SessionStore) -> None:
    with pytest.raises(UnknownSessionError, match="create_session must come first"):
        store.append_message("sess_ghost", ChatMessage(role="user", content="hi"))
    with pytest.raises(UnknownSessionError):
        store.append_event("sess_ghost", "TurnStarted", {})
    store.create_session("sess_ghost", parent_id=None, task_type="root")
    assert store.append_event("sess_ghost", "TurnStarted", {}) == 1


def test_a_session_this_store_created_appends_with_one_insert_each(store: SessionStore) -> None:
    """Its first message and event are seq 1 with no MAX(seq) query: the store made the
    session, so it knows there is nothing before them."""
    statements: list[str] = []
    store.create_session("sess_new", parent_id=None, task_type="root")
    store._db.set_trace_callback(statements.append)
    assert store.append_event("sess_new", "TurnStarted", {}) == 1
    assert store.append_message("sess_new", ChatMessage(role="user", content="hi")) == 1
    assert store.append_event("sess_new", "TurnEnded", {}) == 2
    store._db.set_trace_callback(None)
    assert [s.split()[0] for s in statements] == ["INSERT", "INSERT", "INSERT"]


def test_a_rolled_back_batch_leaves_no_gap_in_seq(store: SessionStore) -> None:
    """``seq`` has no gaps: what a rolled-back batch appended frees its numbers again."""
    store.create_session("sess_root", parent_id=None, task_type="root")
    assert store.append_event("sess_root", "E1", {}) == 1
    with pytest.raises(RuntimeError), store.batch():
        assert store.append_event("sess_root", "E2", {}) == 2
        assert store.append_message("sess_root", ChatMessage(role="user", content="x")) == 1
        raise RuntimeError("undo")
    assert store.append_event("sess_root", "E2 again", {}) == 2
    assert store.append_message("sess_root", ChatMessage(role="user", content="y")) == 1
    assert [row.name for row in store.events("sess_root")] == ["E1", "E2 again"]


def test_events_after_seq_and_limit(store: SessionStore) -> None:
    store.create_session("sess_root", parent_id=None, task_type="root")
    for index in range(5):
        store.append_event("sess_root", f"E{index}", {"index": index, "nested": {"a": [index]}})
    rows = store.events("sess_root")
    assert [row.seq for row in rows] == [1, 2, 3, 4, 5]
    assert rows[2].name == "E2"
    assert rows[2].data == {"index": 2, "nested": {"a": [2]}}
    assert [row.seq for row in store.events("sess_root", after_seq=2, limit=2)] == [3, 4]
    assert store.events("sess_root", after_seq=5) == []


def test_tasks_upsert_and_list_in_creation_order(store: SessionStore) -> None:
    first = make_task("agent_b", created_at=1.0)
    second = make_task("agent_a", created_at=2.0)
    store.save_task(second)
    store.save_task(first)
    store.save_task(make_task("agent_c", parent="sess_other"))
    changed = second.model_copy(update={"status": "running", "child_session_id": "sess_x"})
    store.save_task(changed)
    assert store.get_task("agent_a") == changed
    assert store.get_task("agent_zzz") is None
    assert [task.task_id for task in store.tasks_for_session("sess_root")] == [
        "agent_b",
        "agent_a",
    ]


def test_find_task_by_id_or_unique_prefix(store: SessionStore) -> None:
    store.save_task(make_task("agent_1234"))
    store.save_task(make_task("agent_1299"))
    store.save_task(make_task("agent_12"))
    found = store.find_task("agent_123")
    assert found is not None
    assert found.task_id == "agent_1234"
    exact = store.find_task("agent_12")
    assert exact is not None
    assert exact.task_id == "agent_12"
    with pytest.raises(AmbiguousTaskIdError, match="agent_1234, agent_1299"):
        store.find_task("agent_1")
    assert store.find_task("bash_") is None
    assert store.find_task("") is None
    # A LIKE wildcard in the prefix is taken literally.
    assert store.find_task("agent%") is None


def test_s_srv_5_a_sessions_lookup_never_finds_or_names_another_sessions_tasks(
    store: SessionStore,
) -> None:
    """Scoped to a session, an exact id of another session's task is not found, and an
    ambiguous prefix names only the session's own candidates."""
    store.save_task(make_task("agent_1234"))
    store.save_task(make_task("agent_1299", parent="sess_other"))
    store.save_task(make_task("agent_1300", parent="sess_other"))
    assert store.find_task("agent_1299", parent_session_id="sess_root") is None
    mine = store.find_task("agent_1", parent_session_id="sess_root")
    assert mine is not None and mine.task_id == "agent_1234"
    with pytest.raises(AmbiguousTaskIdError) as raised:
        store.find_task("agent_1", parent_session_id="sess_other")
    assert "agent_1234" not in str(raised.value)


def test_notification_claim_is_once_and_survives_a_stale_save_s_note_3(
    store: SessionStore,
) -> None:
    stale = make_task("agent_1")
    store.save_task(stale)
    assert store.claim_notification("agent_1") is True
    assert store.claim_notification("agent_1") is False
    store.save_task(stale.model_copy(update={"status": "completed"}))
    reloaded = store.get_task("agent_1")
    assert reloaded is not None
    assert reloaded.notified is True
    assert reloaded.status == "completed"
    assert store.claim_notification("agent_1") is False
    assert store.claim_notification("agent_missing") is False


async def test_reader_instance_sees_writer_instance_commits(tmp_path: Path) -> None:
    """Two stores on one file (``subvisor ps`` beside ``subvisor run``), interleaved."""
    path = tmp_path / "subvisor.db"
    writer = SessionStore(path)
    reader = SessionStore(path)
    writer.create_session("sess_root", parent_id=None, task_type="root")
    seen: list[int] = []

    async def write() -> None:
        for index in range(50):
            writer.append_event("sess_root", "Tick", {"index": index})
            await trio.lowlevel.checkpoint()

    async def read() -> None:
        while len(seen) < 50:
            seen.extend(row.seq for row in reader.events("sess_root", after_seq=len(seen)))
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        nursery.start_soon(write)
    assert seen == list(range(1, 51))
    writer.close()
    reader.close()


async def test_reader_process_store_during_writer_process(tmp_path: Path) -> None:
    """A second process writes while this one reads: WAL plus busy timeout, no lock errors."""
    path = tmp_path / "subvisor.db"
    count = 300
    script = textwrap.dedent(
        f"""
        from supervisor.state._store import SessionStore
        with SessionStore({str(path)!r}) as store:
            store.create_session("sess_root", parent_id=None, task_type="root")
            for index in range({count}):
                store.append_event("sess_root", "Tick", {{"index": index}})
        """
    )
    reader = SessionStore(path)
    process = await trio.lowlevel.open_process([sys.executable, "-c", script])
    seen: list[int] = []
    while True:
        exited = process.poll() is not None
        seen.extend(row.data["index"] for row in reader.events("sess_root", after_seq=len(seen)))
        if exited:
            break
        await trio.sleep(0.001)
    assert process.returncode == 0
    assert seen == list(range(count))
    reader.close()


def test_sqlite_reader_connection_does_not_block_writer(tmp_path: Path) -> None:
    """An open read transaction (a long ``ps`` query) does not stop the writer (WAL)."""
    path = tmp_path / "subvisor.db"
    writer = SessionStore(path)
    writer.create_session("sess_root", parent_id=None, task_type="root")
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    assert raw.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    assert writer.append_event("sess_root", "Tick", {}) == 1
    # The reader's snapshot is stable until it ends its transaction.
    assert raw.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    raw.execute("COMMIT")
    assert raw.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 1
    raw.close()
    writer.close()
