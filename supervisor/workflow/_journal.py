"""``WorkflowJournal``: every workflow run, actor and ask, in SQLite (S-ACT-3).

The tables live in the session store's database file (``subvisor.db``), next
to and independent of the store's own: they are created with ``CREATE TABLE
IF NOT EXISTS`` and the store's schema version is not touched.

Invariants:

- An ask row is written once, when the ask ends (answered or failed), with
  the messages it added to the actor's conversation; a replayed ask copies
  the earlier row's answer and messages, marked ``cached``, with zero usage
  (no model was called for it in this run).
- ``(run_id, actor_key, ask_index)`` is unique; ``ask_index`` counts an
  actor's asks from 0 in the order the script made them.
- An actor row holds the model it runs on in this run: the resume pin an
  amended re-run reads (S-ACT-5).
- Only named actors are replayable; ``actor_key`` of an anonymous actor is
  ``~N`` (its order among the anonymous ones), which no script can spell
  as a name to match.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from protocol import ChatMessage, Usage

from ..state._store import connect_database
from ._errors import WorkflowError

__all__ = [
    "ActorRecord",
    "AskRecord",
    "AskSource",
    "RunRecord",
    "RunStatus",
    "WorkflowJournal",
]

RunStatus = Literal["running", "completed", "failed"]
AskSource = Literal["cached", "fresh"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS workflow_runs (
    run_id       TEXT PRIMARY KEY,
    workflow     TEXT NOT NULL,
    script_path  TEXT NOT NULL,
    script_hash  TEXT NOT NULL,
    amends       TEXT,
    parent_model TEXT NOT NULL,
    run_model    TEXT,
    inputs       TEXT NOT NULL,
    sites        TEXT NOT NULL,
    status       TEXT NOT NULL,
    result       TEXT,
    error        TEXT,
    started_at   REAL NOT NULL,
    ended_at     REAL
);
CREATE TABLE IF NOT EXISTS workflow_actors (
    run_id          TEXT NOT NULL,
    actor_key       TEXT NOT NULL,
    name            TEXT,
    line            INTEGER NOT NULL,
    model           TEXT NOT NULL,
    model_source    TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    tools           TEXT NOT NULL,
    created_at      REAL NOT NULL,
    PRIMARY KEY (run_id, actor_key)
);
CREATE TABLE IF NOT EXISTS workflow_asks (
    run_id             TEXT NOT NULL,
    actor_key          TEXT NOT NULL,
    ask_index          INTEGER NOT NULL,
    prompt_hash        TEXT NOT NULL,
    prompt             TEXT NOT NULL,
    schema_name        TEXT,
    model              TEXT NOT NULL,
    status             TEXT NOT NULL,
    answer             TEXT,
    error              TEXT,
    messages           TEXT NOT NULL,
    source             TEXT NOT NULL,
    replayed_from      TEXT,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    model_calls        INTEGER NOT NULL,
    tool_calls         INTEGER NOT NULL,
    started_at         REAL NOT NULL,
    ended_at           REAL NOT NULL,
    PRIMARY KEY (run_id, actor_key, ask_index)
);
"""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One workflow run."""

    run_id: str
    workflow: str
    script_path: str
    script_hash: str
    parent_model: str
    inputs: dict[str, Any]
    sites: list[dict[str, Any]]
    amends: str | None = None
    run_model: str | None = None
    status: RunStatus = "running"
    result: Any = None
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None


@dataclass(frozen=True, slots=True)
class ActorRecord:
    """One actor of a run; ``model`` is its resume pin for a later amended run."""

    run_id: str
    actor_key: str
    name: str | None
    line: int
    model: str
    model_source: str
    definition_hash: str
    tools: tuple[str, ...]
    created_at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class AskRecord:
    """One ask of an actor: what was asked, what came back, what it cost in this run."""

    run_id: str
    actor_key: str
    ask_index: int
    prompt_hash: str
    prompt: str
    schema_name: str | None
    model: str
    status: Literal["answered", "failed"]
    answer: str | None
    error: str | None
    messages: tuple[ChatMessage, ...]
    source: AskSource
    usage: Usage
    model_calls: int
    tool_calls: int
    started_at: float
    ended_at: float
    replayed_from: str | None = None


class WorkflowJournal:
    """The workflow tables of one database file; use as a context manager or ``close()``."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self._db = connect_database(path)
        self._db.row_factory = sqlite3.Row
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writes ---------------------------------------------------------------------

    def start_run(self, run: RunRecord) -> None:
        """Record a run that is starting."""
        self._db.execute(
            "INSERT INTO workflow_runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run.run_id,
                run.workflow,
                run.script_path,
                run.script_hash,
                run.amends,
                run.parent_model,
                run.run_model,
                json.dumps(run.inputs),
                json.dumps(run.sites),
                run.status,
                json.dumps(run.result),
                run.error,
                run.started_at,
                run.ended_at,
            ),
        )

    def finish_run(
        self, run_id: str, status: RunStatus, *, result: Any = None, error: str | None = None
    ) -> None:
        """Record how a run ended (``result`` must be JSON-ready)."""
        self._db.execute(
            "UPDATE workflow_runs SET status = ?, result = ?, error = ?, ended_at = ?"
            " WHERE run_id = ?",
            (status, json.dumps(result), error, time.time(), run_id),
        )

    def add_actor(self, actor: ActorRecord) -> None:
        """Record an actor when the script declares it."""
        self._db.execute(
            "INSERT INTO workflow_actors VALUES (?,?,?,?,?,?,?,?,?)",
            (
                actor.run_id,
                actor.actor_key,
                actor.name,
                actor.line,
                actor.model,
                actor.model_source,
                actor.definition_hash,
                json.dumps(list(actor.tools)),
                actor.created_at,
            ),
        )

    def record_ask(self, ask: AskRecord) -> None:
        """Record an ask that ended."""
        self._db.execute(
            "INSERT INTO workflow_asks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                ask.run_id,
                ask.actor_key,
                ask.ask_index,
                ask.prompt_hash,
                ask.prompt,
                ask.schema_name,
                ask.model,
                ask.status,
                ask.answer,
                ask.error,
                json.dumps([m.model_dump(mode="json") for m in ask.messages]),
                ask.source,
                ask.replayed_from,
                ask.usage.input_tokens,
                ask.usage.output_tokens,
                ask.usage.cache_read_tokens,
                ask.usage.cache_write_tokens,
                ask.model_calls,
                ask.tool_calls,
                ask.started_at,
                ask.ended_at,
            ),
        )

    # -- reads ----------------------------------------------------------------------

    def find_run(self, run_id: str) -> RunRecord | None:
        """The run with this id, or the only one it is a prefix of."""
        rows = self._db.execute(
            "SELECT * FROM workflow_runs WHERE run_id = ? OR run_id LIKE ? ESCAPE '\\'"
            " ORDER BY run_id = ? DESC, started_at",
            (run_id, _like_prefix(run_id), run_id),
        ).fetchall()
        if not rows:
            return None
        if rows[0]["run_id"] != run_id and len(rows) > 1:
            matches = ", ".join(row["run_id"] for row in rows[:5])
            raise WorkflowError(
                f"run id prefix {run_id!r} matches {len(rows)} runs ({matches}); give more of it"
            )
        return _run(rows[0])

    def latest_runs(self, limit: int = 20) -> list[RunRecord]:
        """The most recent runs, newest first."""
        rows = self._db.execute(
            "SELECT * FROM workflow_runs ORDER BY started_at DESC LIMIT ?", (limit,)
        ).fetchall()
        return [_run(row) for row in rows]

    def actors(self, run_id: str) -> list[ActorRecord]:
        """The actors of a run, in the order the script declared them."""
        rows = self._db.execute(
            "SELECT * FROM workflow_actors WHERE run_id = ? ORDER BY created_at, line", (run_id,)
        ).fetchall()
        return [
            ActorRecord(
                run_id=row["run_id"],
                actor_key=row["actor_key"],
                name=row["name"],
                line=row["line"],
                model=row["model"],
                model_source=row["model_source"],
                definition_hash=row["definition_hash"],
                tools=tuple(json.loads(row["tools"])),
                created_at=row["created_at"],
            )
            for row in rows
        ]

    def asks(self, run_id: str, actor_key: str | None = None) -> list[AskRecord]:
        """The asks of a run (or of one of its actors), by actor then ask index."""
        query = "SELECT * FROM workflow_asks WHERE run_id = ?"
        params: tuple[str, ...] = (run_id,)
        if actor_key is not None:
            query += " AND actor_key = ?"
            params += (actor_key,)
        rows = self._db.execute(query + " ORDER BY actor_key, ask_index", params).fetchall()
        return [_ask(row) for row in rows]


def _like_prefix(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        run_id=row["run_id"],
        workflow=row["workflow"],
        script_path=row["script_path"],
        script_hash=row["script_hash"],
        amends=row["amends"],
        parent_model=row["parent_model"],
        run_model=row["run_model"],
        inputs=json.loads(row["inputs"]),
        sites=json.loads(row["sites"]),
        status=row["status"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        error=row["error"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
    )


def _ask(row: sqlite3.Row) -> AskRecord:
    return AskRecord(
        run_id=row["run_id"],
        actor_key=row["actor_key"],
        ask_index=row["ask_index"],
        prompt_hash=row["prompt_hash"],
        prompt=row["prompt"],
        schema_name=row["schema_name"],
        model=row["model"],
        status=row["status"],
        answer=row["answer"],
        error=row["error"],
        messages=tuple(ChatMessage.model_validate(m) for m in json.loads(row["messages"])),
        source=row["source"],
        replayed_from=row["replayed_from"],
        usage=Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_read_tokens=row["cache_read_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
        ),
        model_calls=row["model_calls"],
        tool_calls=row["tool_calls"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
    )
