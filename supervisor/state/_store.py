"""``SessionStore``: the SQLite database of sessions, transcripts, events and tasks.

Invariants:

- One process writes (the supervisor); any number read (``subvisor ps`` while
  ``subvisor run`` works). WAL lets readers proceed during a write, and the
  busy timeout covers the short moments a checkpoint or the schema setup
  holds the lock.
- Every write commits before the call returns. Writes are small (one row,
  sometimes two), so a trio program calls the store synchronously; there is
  no thread and no background flush that a crash could lose.
- ``seq`` numbers messages and events per session, from 1, without gaps.
- A task's ``notified`` flag only ever goes from false to true
  (``claim_notification``), whatever a later ``save_task`` of a stale copy
  says (S-NOTE-3).
- Every session and task row names its ``owner``, the process that wrote
  it (``ProcessIdentity``): a row still ``running`` whose owner is gone is
  what ``interrupt_owned`` ends (S-SEC-6). Only a dead owner's rows are
  ended that way, and a dead owner writes no more, so that update races no
  writer but another recovering reader, which then finds nothing left.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from protocol import ChatMessage

from ..kernel import EventBudget, SubvisorError, text_size
from ._process_identity import this_process
from ._task_record import TaskRecord, TaskUsage
from ._usage import UsageRollup, sum_usage

__all__ = [
    "BUSY_TIMEOUT_MS",
    "MAX_PAGE_SIZE",
    "SCHEMA_VERSION",
    "AmbiguousTaskIdError",
    "DuplicateSessionError",
    "EventRow",
    "SessionRow",
    "SessionStore",
    "SessionTaskType",
    "StoreError",
    "UnknownSessionError",
    "connect_database",
]

#: The schema this code writes (``PRAGMA user_version``). 2 added ``session_usage``;
#: 3 the ``owner`` of sessions and tasks and a session's ``status_reason``. Every
#: table and index is ``CREATE ... IF NOT EXISTS`` and added columns are listed in
#: ``_ADDED_COLUMNS``, so an older database migrates by running the schema again.
SCHEMA_VERSION = 3

#: Milliseconds a connection waits for a lock held by another connection.
BUSY_TIMEOUT_MS = 5_000

#: The most children one page of ``list_child_sessions`` returns (S-OBS-1).
MAX_PAGE_SIZE = 100

#: A session's place in the tree: the user's root session or a subagent's (S-RUN-2).
#: A workflow the root created has a session too, its actors' parent in listings.
SessionTaskType = Literal["root", "subagent_child", "workflow"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id  TEXT PRIMARY KEY,
    parent_id   TEXT,
    task_type   TEXT NOT NULL,
    agent_type  TEXT,
    description TEXT,
    model       TEXT,
    cwd         TEXT,
    status      TEXT NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    owner       TEXT,
    status_reason TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    seq        INTEGER NOT NULL,
    name       TEXT NOT NULL,
    data       TEXT NOT NULL,
    ts         REAL NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS tasks (
    task_id           TEXT PRIMARY KEY,
    parent_session_id TEXT NOT NULL,
    kind              TEXT NOT NULL,
    status            TEXT NOT NULL,
    notified          INTEGER NOT NULL,
    created_at        REAL NOT NULL,
    record            TEXT NOT NULL,
    owner             TEXT
);
CREATE TABLE IF NOT EXISTS session_usage (
    session_id TEXT PRIMARY KEY REFERENCES sessions (session_id),
    usage      TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

#: Created after ``_ADDED_COLUMNS`` exist: some index them.
_INDEXES = """
CREATE INDEX IF NOT EXISTS sessions_by_parent ON sessions (parent_id, task_type);
CREATE INDEX IF NOT EXISTS tasks_by_parent ON tasks (parent_session_id);
CREATE INDEX IF NOT EXISTS sessions_running ON sessions (owner) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS tasks_unended ON tasks (owner) WHERE status IN ('pending', 'running');
"""

#: Columns later schema versions added to existing tables: (table, column, type).
_ADDED_COLUMNS = (
    ("sessions", "owner", "TEXT"),
    ("sessions", "status_reason", "TEXT"),
    ("tasks", "owner", "TEXT"),
)

#: What a task that has not ended is: ``pending`` or ``running``.
_UNENDED = "status IN ('pending', 'running')"

#: ``json.dumps(data, separators=(",", ":"))`` without a new encoder per call
#: (``json.dumps`` caches one only for its default arguments).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))

#: The INSERT of one appended row, and the query of the next ``seq``, per table.
_APPEND_SQL = {
    "messages": "INSERT INTO messages (session_id, seq, message, created_at) VALUES (?, ?, ?, ?)",
    "events": "INSERT INTO events (session_id, seq, name, data, ts) VALUES (?, ?, ?, ?, ?)",
}
_NEXT_SEQ_SQL = {
    table: f"SELECT COALESCE(MAX(seq), 0) + 1 FROM {table} WHERE session_id = ?"
    for table in _APPEND_SQL
}

_SESSION_COLUMNS = (
    "session_id, parent_id, task_type, agent_type, description, model, cwd, status,"
    " created_at, updated_at, status_reason"
)


def connect_database(path: Path | str) -> sqlite3.Connection:
    """A connection to the state database at ``path`` (WAL, waits out other writers).

    Creates the parent dir unless ``path`` is ``":memory:"``. With
    ``isolation_level=None`` the sqlite3 module opens no implicit
    transactions: callers that write several statements begin one explicitly.
    """
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    return db


class _Transaction:
    """``with``: one write transaction, or a part of the one already open.

    A class rather than a generator context manager: every batch of events
    opens one, and this is the supervisor's hottest path to the store.
    """

    __slots__ = ("_began", "_db", "_next_seq")

    def __init__(self, db: sqlite3.Connection, next_seq: dict[tuple[str, str], int]) -> None:
        self._db = db
        self._next_seq = next_seq
        self._began = False

    def __enter__(self) -> None:
        if not self._db.in_transaction:
            # IMMEDIATE takes the write lock up front, so a seq read inside the
            # transaction cannot be raced by another writer.
            self._db.execute("BEGIN IMMEDIATE")
            self._began = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._began:
            self._began = False
            if exc_type is None:
                self._db.execute("COMMIT")
                return
            # Any exception (a cancellation too) undoes the whole transaction,
            # and the seqs it used are free again: the counters are re-read.
            self._db.execute("ROLLBACK")
            self._next_seq.clear()


class StoreError(SubvisorError):
    """The session store cannot do what was asked."""


class UnknownSessionError(StoreError, LookupError):
    """No session with that id is in the store."""


class DuplicateSessionError(StoreError):
    """A session with that id already exists."""


class AmbiguousTaskIdError(StoreError, LookupError):
    """A task id prefix matches more than one task."""


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One stored session; ``created_at``/``updated_at`` are epoch seconds."""

    session_id: str
    parent_id: str | None
    task_type: SessionTaskType
    agent_type: str | None
    description: str | None
    model: str | None
    cwd: str | None
    status: str
    created_at: float
    updated_at: float
    #: Why the session ended as it did, when that is not plain (``interrupted``).
    status_reason: str | None = None


@dataclass(frozen=True, slots=True)
class EventRow:
    """One stored event of a session: its ``seq``, ``name``, JSON ``data`` and ``ts``."""

    seq: int
    name: str
    data: dict[str, Any]
    ts: float


class SessionStore:
    """Sessions, transcripts, events and tasks in one SQLite file (WAL).

    ``path`` may be ``":memory:"``; otherwise its parent dir is created. Use
    as a context manager or call ``close()``.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = path if path == ":memory:" else Path(path)
        self._db = connect_database(self.path)
        self._db.execute("PRAGMA foreign_keys = ON")
        self._next_seq: dict[tuple[str, str], int] = {}
        #: Sessions this store created and has not ended (``interrupt_created_sessions``).
        self._created: set[str] = set()
        self._create_schema()

    def _create_schema(self) -> None:
        # A reader (``subvisor ps``) of an existing database takes no write
        # lock: only an empty or older database gets the schema written.
        if self._user_version() == SCHEMA_VERSION:
            return
        with self._write():
            version = self._user_version()
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this subvisor "
                    f"understands ({SCHEMA_VERSION}): upgrade subvisor, or point "
                    "SUBVISOR_HOME at another directory"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            for table, column, kind in _ADDED_COLUMNS:
                present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            for statement in _INDEXES.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _user_version(self) -> int:
        row = self._db.execute("PRAGMA user_version").fetchone()
        return int(row[0])

    def _write(self) -> _Transaction:
        """One write transaction, committed on exit, rolled back on error.

        Nested uses join the outermost transaction (see ``batch``).
        """
        return _Transaction(self._db, self._next_seq)

    def batch(self) -> _Transaction:
        """Make every write in the block one transaction: one commit for a burst of events."""
        return _Transaction(self._db, self._next_seq)

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        parent_id: str | None,
        task_type: SessionTaskType,
        agent_type: str | None = None,
        description: str | None = None,
        model: str | None = None,
        cwd: str | None = None,
    ) -> SessionRow:
        """Store a new session with status ``running`` (S-RUN-2), owned by this process.

        Raises ``DuplicateSessionError`` when the id is taken.
        """
        now = time.time()
        row = SessionRow(
            session_id=session_id,
            parent_id=parent_id,
            task_type=task_type,
            agent_type=agent_type,
            description=description,
            model=model,
            cwd=cwd,
            status="running",
            created_at=now,
            updated_at=now,
        )
        try:
            self._db.execute(
                f"INSERT INTO sessions ({_SESSION_COLUMNS}, owner)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    row.session_id,
                    row.parent_id,
                    row.task_type,
                    row.agent_type,
                    row.description,
                    row.model,
                    row.cwd,
                    row.status,
                    row.created_at,
                    row.updated_at,
                    row.status_reason,
                    str(this_process()),
                ),
            )
        except sqlite3.IntegrityError as error:
            raise DuplicateSessionError(
                f"session {session_id!r} already exists; every session needs a new id"
            ) from error
        self._created.add(session_id)
        # A new session has no messages or events (their foreign key names
        # it): its first of each is seq 1, with no MAX(seq) query to learn it.
        for table in _APPEND_SQL:
            self._next_seq[table, session_id] = 1
        return row

    def get_session(self, session_id: str) -> SessionRow | None:
        """The session with that id, or ``None``."""
        row = self._db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return None if row is None else SessionRow(*row)

    def set_session_status(self, session_id: str, status: str, reason: str | None = None) -> None:
        """Set a session's status, why (``reason``, may be ``None``) and ``updated_at``.

        Raises ``UnknownSessionError`` when there is no such session.
        """
        cursor = self._db.execute(
            "UPDATE sessions SET status = ?, status_reason = ?, updated_at = ?"
            " WHERE session_id = ?",
            (status, reason, time.time(), session_id),
        )
        if cursor.rowcount == 0:
            raise _unknown_session(session_id)
        if status != "running":
            self._created.discard(session_id)

    def latest_root_session(self) -> SessionRow | None:
        """The most recently created root session, or ``None``."""
        row = self._db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE task_type = 'root'"
            " ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        return None if row is None else SessionRow(*row)

    def list_child_sessions(
        self, parent_id: str, *, offset: int = 0, limit: int = 20
    ) -> list[SessionRow]:
        """One page of a session's subagent children, finished ones included (S-OBS-1).

        A workflow the session created is listed too, its actors (subagents)
        after it. Ordered by creation; ``limit`` is clamped to 1..100, ``offset`` to >= 0.
        """
        limit = min(max(limit, 1), MAX_PAGE_SIZE)
        offset = max(offset, 0)
        rows = self._db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions"
            " WHERE parent_id = ? AND task_type IN ('subagent_child', 'workflow')"
            " ORDER BY rowid LIMIT ? OFFSET ?",
            (parent_id, limit, offset),
        ).fetchall()
        return [SessionRow(*row) for row in rows]

    def count_child_sessions(self, parent_id: str) -> int:
        """How many children ``list_child_sessions`` pages through (subagents, workflows)."""
        row = self._db.execute(
            "SELECT COUNT(*) FROM sessions"
            " WHERE parent_id = ? AND task_type IN ('subagent_child', 'workflow')",
            (parent_id,),
        ).fetchone()
        return int(row[0])

    # -- messages and events ----------------------------------------------

    def append_message(
        self, session_id: str, message: ChatMessage, *, budget: EventBudget | None = None
    ) -> int:
        """Append a message to a session's transcript; returns its ``seq``.

        With a ``budget`` (the worker it comes from) its size is charged
        first, and an ``EventBudgetExceededError`` leaves the transcript as it was.
        """
        text = message.model_dump_json()
        if budget is not None:
            budget.charge(size=text_size(text))
        return self._append("messages", session_id, (text, time.time()))

    def messages(self, session_id: str) -> list[ChatMessage]:
        """A session's transcript, in order."""
        rows = self._db.execute(
            "SELECT message FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        return [ChatMessage.model_validate_json(row[0]) for row in rows]

    def append_event(
        self,
        session_id: str,
        name: str,
        data: dict[str, Any],
        *,
        budget: EventBudget | None = None,
    ) -> int:
        """Append an event to a session; ``data`` must be JSON-serializable. Returns its ``seq``.

        With a ``budget`` (the worker it comes from) its size is charged
        first, and an ``EventBudgetExceededError`` leaves the events as they were.
        """
        text = _COMPACT_JSON.encode(data)
        if budget is not None:
            budget.charge(size=len(text) + text_size(name))  # json.dumps escapes to ASCII
        return self._append("events", session_id, (name, text, time.time()))

    def events(
        self, session_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRow]:
        """A session's events with ``seq > after_seq``, in order, at most ``limit``."""
        rows = self._db.execute(
            "SELECT seq, name, data, ts FROM events WHERE session_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (session_id, after_seq, -1 if limit is None else limit),
        ).fetchall()
        return [EventRow(seq, name, json.loads(data), ts) for seq, name, data, ts in rows]

    def messages_after(
        self, session_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[tuple[int, ChatMessage]]:
        """A session's messages with ``seq > after_seq``, in order, with their ``seq`` (S-OBS-2)."""
        rows = self._db.execute(
            "SELECT seq, message FROM messages WHERE session_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (session_id, after_seq, -1 if limit is None else limit),
        ).fetchall()
        return [(seq, ChatMessage.model_validate_json(message)) for seq, message in rows]

    def last_message_seq(self, session_id: str) -> int:
        """The ``seq`` of a session's latest message; 0 when it has none."""
        row = self._db.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0])

    def _append(self, table: str, session_id: str, values: tuple[object, ...]) -> int:
        # The next seq per (table, session) is kept in memory: this process is
        # the only writer of its sessions, so one INSERT (one commit) per
        # append suffices. Another writer on the same session would collide
        # on the (session_id, seq) key; the counter is then re-read and the
        # insert retried.
        key = (table, session_id)
        for _ in range(3):
            seq = self._next_seq.get(key)
            if seq is None:
                row = self._db.execute(_NEXT_SEQ_SQL[table], (session_id,)).fetchone()
                seq = int(row[0])
            try:
                self._db.execute(_APPEND_SQL[table], (session_id, seq, *values))
            except sqlite3.IntegrityError as error:
                self._next_seq.pop(key, None)
                if "FOREIGN KEY" in str(error).upper():
                    raise _unknown_session(session_id) from error
                continue
            self._next_seq[key] = seq + 1
            return seq
        raise StoreError(f"could not append to {table} of session {session_id}: seq contention")

    # -- tasks ------------------------------------------------------------

    def save_task(self, record: TaskRecord) -> None:
        """Insert or replace a task record.

        A stored ``notified = true`` is kept even when ``record`` says false
        (a stale copy must not re-arm a notification, S-NOTE-3).
        """
        self._db.execute(
            "INSERT INTO tasks"
            " (task_id, parent_session_id, kind, status, notified, created_at, record, owner)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (task_id) DO UPDATE SET"
            " parent_session_id = excluded.parent_session_id, kind = excluded.kind,"
            " status = excluded.status, created_at = excluded.created_at,"
            " owner = excluded.owner,"
            " notified = tasks.notified OR excluded.notified,"
            " record = CASE WHEN tasks.notified"
            "   THEN json_set(excluded.record, '$.notified', json('true'))"
            "   ELSE excluded.record END",
            (
                record.task_id,
                record.parent_session_id,
                record.kind,
                record.status,
                int(record.notified),
                record.created_at,
                record.model_dump_json(),
                str(this_process()),
            ),
        )

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task with exactly that id, or ``None``."""
        row = self._db.execute("SELECT record FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return None if row is None else TaskRecord.model_validate_json(row[0])

    def tasks_for_session(self, parent_session_id: str) -> list[TaskRecord]:
        """Every task a session launched, in creation order."""
        rows = self._db.execute(
            "SELECT record FROM tasks WHERE parent_session_id = ? ORDER BY created_at, rowid",
            (parent_session_id,),
        ).fetchall()
        return [TaskRecord.model_validate_json(row[0]) for row in rows]

    def find_task(
        self, prefix_or_id: str, *, parent_session_id: str | None = None
    ) -> TaskRecord | None:
        """The task with that id, else the one task whose id starts with it, else ``None``.

        With ``parent_session_id``, only that session's tasks are looked at: an
        agent's own lookups never learn (or reach) another session's tasks,
        not even by the candidates an ambiguous prefix names. Raises
        ``AmbiguousTaskIdError`` (naming the candidates) when the prefix
        matches several tasks.
        """
        if not prefix_or_id:
            return None
        exact = self.get_task(prefix_or_id)
        if exact is not None:
            if parent_session_id is not None and exact.parent_session_id != parent_session_id:
                return None
            return exact
        query = "SELECT task_id, record FROM tasks WHERE substr(task_id, 1, ?) = ?"
        params: tuple[object, ...] = (len(prefix_or_id), prefix_or_id)
        if parent_session_id is not None:
            query += " AND parent_session_id = ?"
            params += (parent_session_id,)
        rows = self._db.execute(query + " ORDER BY task_id LIMIT 6", params).fetchall()
        if not rows:
            return None
        if len(rows) > 1:
            shown = ", ".join(task_id for task_id, _ in rows[:5])
            more = ", ..." if len(rows) > 5 else ""
            raise AmbiguousTaskIdError(
                f"task id prefix {prefix_or_id!r} matches several tasks ({shown}{more}):"
                " give more characters"
            )
        return TaskRecord.model_validate_json(rows[0][1])

    def claim_notification(self, task_id: str) -> bool:
        """Set a task's ``notified`` flag; ``True`` only for the call that set it (S-NOTE-3).

        The check and the set are one SQL statement, so two processes (or two
        registries) cannot both claim the same task.
        """
        cursor = self._db.execute(
            "UPDATE tasks SET notified = 1, record = json_set(record, '$.notified', json('true'))"
            " WHERE task_id = ? AND notified = 0",
            (task_id,),
        )
        return cursor.rowcount == 1

    # -- recovery (S-SEC-6) -----------------------------------------------

    def unended_owners(self) -> set[str | None]:
        """The owners of running sessions and of pending or running tasks.

        ``None`` stands for rows written before owners were recorded.
        """
        rows = self._db.execute(
            "SELECT owner FROM sessions WHERE status = 'running'"
            f" UNION SELECT owner FROM tasks WHERE {_UNENDED}"
        ).fetchall()
        return {row[0] for row in rows}

    def interrupt_owned(self, owner: str | None, reason: str) -> list[TaskRecord]:
        """End every running session and unended task of ``owner`` as ``interrupted``.

        Call it only for an owner that is gone: its rows then change under
        nobody. Tasks get ``reason`` as their error and ``ended_at`` now;
        returns the tasks ended, for their output dirs to be brought in line.
        """
        now = time.time()
        with self._write():
            self._db.execute(
                "UPDATE sessions SET status = 'interrupted', status_reason = ?, updated_at = ?"
                " WHERE status = 'running' AND owner IS ?",
                (reason, now, owner),
            )
            rows = self._db.execute(
                f"SELECT record FROM tasks WHERE {_UNENDED} AND owner IS ?", (owner,)
            ).fetchall()
            ended = [
                TaskRecord.model_validate_json(row[0]).model_copy(
                    update={"status": "interrupted", "error": reason, "ended_at": now}
                )
                for row in rows
            ]
            for record in ended:
                self._db.execute(
                    "UPDATE tasks SET status = ?, record = ? WHERE task_id = ?",
                    (record.status, record.model_dump_json(), record.task_id),
                )
        return ended

    def ended_owned(self, owner: str | None) -> list[TaskRecord]:
        """Every ended task of ``owner`` that a worker ran with roots to sweep.

        For the recovery's walk (S-SEC-3): a walk of its dead supervisor's
        that a live sibling could dodge did not cover the task. Not indexed:
        read once, after a supervisor died.
        """
        rows = self._db.execute(
            f"SELECT record FROM tasks WHERE NOT {_UNENDED} AND owner IS ?"
            " AND json_array_length(record, '$.swept_roots') > 0",
            (owner,),
        ).fetchall()
        return [TaskRecord.model_validate_json(row[0]) for row in rows]

    def interrupt_created_sessions(self, reason: str) -> int:
        """End the sessions this store created that still run as ``interrupted``; how many.

        For a supervisor that shuts down before one of its sessions ended
        (an interactive root that was never told it is done).
        """
        if not self._created:
            return 0
        marks = ", ".join("?" * len(self._created))
        cursor = self._db.execute(
            "UPDATE sessions SET status = 'interrupted', status_reason = ?, updated_at = ?"
            f" WHERE status = 'running' AND session_id IN ({marks})",
            (reason, time.time(), *self._created),
        )
        self._created.clear()
        return cursor.rowcount

    # -- usage ------------------------------------------------------------

    def record_usage(self, session_id: str, usage: TaskUsage) -> None:
        """Store (replace) a session's own usage: a subagent's at its end, the root's at its run's.

        Raises ``UnknownSessionError`` when there is no such session.
        """
        try:
            self._db.execute(
                "INSERT INTO session_usage (session_id, usage, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET"
                " usage = excluded.usage, updated_at = excluded.updated_at",
                (session_id, usage.model_dump_json(), time.time()),
            )
        except sqlite3.IntegrityError as error:
            raise _unknown_session(session_id) from error

    def session_usage(self, session_id: str) -> TaskUsage | None:
        """A session's own stored usage, or ``None`` when none was stored yet."""
        row = self._db.execute(
            "SELECT usage FROM session_usage WHERE session_id = ?", (session_id,)
        ).fetchone()
        return None if row is None else TaskUsage.model_validate_json(row[0])

    def usage_rollup(self, session_id: str) -> UsageRollup:
        """A session's own stored usage plus the sum over its subagent children's.

        Children still running have no stored usage yet; the count covers
        every child (S-OBS-1's projection).
        """
        rows = self._db.execute(
            "SELECT u.usage FROM session_usage u JOIN sessions s ON s.session_id = u.session_id"
            " WHERE s.parent_id = ? AND s.task_type = 'subagent_child'",
            (session_id,),
        ).fetchall()
        return UsageRollup(
            session_id=session_id,
            own=self.session_usage(session_id) or TaskUsage(),
            subagents=sum_usage(TaskUsage.model_validate_json(row[0]) for row in rows),
            subagent_count=self.count_child_sessions(session_id),
        )

    def tasks_of_child_sessions(
        self, parent_session_id: str, child_session_ids: list[str]
    ) -> dict[str, TaskRecord]:
        """The tasks that run the given child sessions of a parent, by child session id."""
        if not child_session_ids:
            return {}
        marks = ", ".join("?" * len(child_session_ids))
        rows = self._db.execute(
            "SELECT record FROM tasks WHERE parent_session_id = ?"
            f" AND json_extract(record, '$.child_session_id') IN ({marks})",
            (parent_session_id, *child_session_ids),
        ).fetchall()
        records = (TaskRecord.model_validate_json(row[0]) for row in rows)
        return {r.child_session_id: r for r in records if r.child_session_id is not None}


def _unknown_session(session_id: str) -> UnknownSessionError:
    return UnknownSessionError(
        f"no session {session_id!r} in the store: create_session must come first"
    )
