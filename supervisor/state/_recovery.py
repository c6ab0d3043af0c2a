"""Crash recovery: what a dead supervisor left behind is ended at the next start (S-SEC-6).

A supervisor killed by SIGKILL (or a crash, or a power cut) cannot record
the end of its sessions and tasks, nor remove its files in ``home/run``.
Whatever opens the store next (a ``Subvisor``; ``subvisor ps``, ``top``,
``logs``, ``stop``, ``bg``) calls ``recover_dead_runs`` first, so nothing
shows a dead run as running:

- every running session and unended task whose owner (``ProcessIdentity``)
  is certainly gone becomes ``interrupted``, with the reason ("supervisor
  pid 1234 is gone (killed or crashed)"); a task's ``metadata.json`` and
  ``output.txt`` say the same;
- every ``home/run/<session>.*`` file of a session the store knows and that
  no longer runs is removed, whatever its suffix (socket, address file);
- every repository a task's worker planted below the directories it could
  write (``TaskRecord.swept_roots``) is disarmed, as the walk that follows
  every worker would have done had its supervisor lived (S-SEC-3), from
  the start of the earliest task whose walk a sibling still running at the
  death could have dodged (``_uncovered_since``); the task's error says
  what was done.

Invariants:

- A live supervisor's rows and files are never touched: an owner is only
  judged gone on certain grounds (see ``ProcessIdentity.gone_reason``), and
  a run file is only removed once its session's row has ended.
- Cheap when there is nothing to do: one indexed read of the unended rows'
  owners, no write lock, so a read-only ``ps`` stays read-only. Only the
  process whose update ended a dead run's rows walks its roots, once.
- A run file of a session this store does not know is left alone: it may
  belong to a supervisor whose state lives elsewhere (``subvisor stress``).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from ..kernel import CTIME_SLACK_S, disarm_planted, roots_overlap
from ._paths import database_path, run_dir
from ._process_identity import ProcessIdentity
from ._store import SessionStore
from ._task_record import TaskRecord, write_metadata

__all__ = [
    "UNRECORDED_OWNER",
    "open_recovered_store",
    "recover_dead_runs",
    "remove_stale_run_files",
]

log = logging.getLogger(__name__)

#: The reason given for rows written before owners were recorded (schema 2).
UNRECORDED_OWNER = "its supervisor was not recorded (an older subvisor) and is presumed gone"


def recover_dead_runs(store: SessionStore, home: Path) -> list[TaskRecord]:
    """End the sessions and tasks of dead supervisors; remove their run files.

    Returns the tasks it ended.
    """
    ended: list[TaskRecord] = []
    for owner in store.unended_owners():
        reason = _gone_reason(owner)
        if reason is None:
            continue
        # Read before they are ended: the tasks that ended while it lived.
        ended_before = store.ended_owned(owner)
        interrupted = store.interrupt_owned(owner, reason)
        for record in _disarm_planted(store, interrupted, ended_before):
            _align_output_dir(record)
            ended.append(record)
    remove_stale_run_files(store, home)
    return ended


def open_recovered_store(home: Path) -> SessionStore | None:
    """The store of ``home`` after ``recover_dead_runs``; ``None`` when it has none yet."""
    path = database_path(home)
    if not path.exists():
        return None
    store = SessionStore(path)
    try:
        recover_dead_runs(store, home)
    except BaseException:
        store.close()
        raise
    return store


def remove_stale_run_files(store: SessionStore, home: Path) -> list[Path]:
    """Remove ``home/run/<session>.*`` of every known session that no longer runs.

    Returns the paths removed.
    """
    try:
        entries = list(run_dir(home).iterdir())
    except OSError:
        return []
    removed = []
    for path in entries:
        session_id = path.name.split(".", 1)[0]
        if not session_id:
            continue
        row = store.get_session(session_id)
        if row is None or row.status == "running":
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _gone_reason(owner: str | None) -> str | None:
    """Why the rows of ``owner`` are ended, or ``None`` while it may still run."""
    if owner is None:
        return UNRECORDED_OWNER
    identity = ProcessIdentity.parse(owner)
    if identity is None:
        return None
    why = identity.gone_reason()
    return None if why is None else f"supervisor pid {identity.pid} is gone ({why})"


def _disarm_planted(
    store: SessionStore, records: list[TaskRecord], ended: list[TaskRecord]
) -> list[TaskRecord]:
    """Walk what the dead run's workers could write, which their supervisor never did.

    Its workers died with it (each by its parent-death signal): nothing of
    theirs is left to race the walk but what escaped their tree, as for the
    walk of a live supervisor. Each outermost root is walked once
    (``_uncovered_since``), and every task on it or inside it is told what
    that walk found (which may be a sibling's doing, as in the live walk).
    ``ended``: the dead run's tasks that ended before it died.
    """
    since = _uncovered_since(records, ended)
    found = {root: disarm_planted([root], start - CTIME_SLACK_S) for root, start in since.items()}
    told: list[TaskRecord] = []
    for record in records:
        findings = list(
            dict.fromkeys(
                line
                for walked, lines in found.items()
                if any(roots_overlap(walked, root) for root in record.swept_roots)
                for line in lines
            )
        )
        if findings:
            record = record.model_copy(
                update={
                    "error": f"{record.error}; git hooks or config planted below its roots"
                    " were disarmed: " + "; ".join(findings)
                }
            )
            store.save_task(record)
        told.append(record)
    for lines in found.values():
        for line in lines:
            log.warning("planted repository disarmed (S-SEC-3): %s", line)
    return told


def _align_output_dir(record: TaskRecord) -> None:
    # The output dir may be gone (deleted, another machine's home): the
    # store's record is the one that counts.
    if not Path(record.output_dir).is_dir():
        return
    with contextlib.suppress(OSError):
        write_metadata(record)
        Path(record.output_file).write_text(record.error or "", encoding="utf-8")


def _uncovered_since(records: list[TaskRecord], ended: list[TaskRecord]) -> dict[str, float]:
    """The outermost roots to walk for the tasks ``records`` a dead run left, each from when.

    A walk of the live supervisor's covered nothing while another writer of
    its root (or of one inside or around it) was alive: that writer could
    move a planted repository out of its way (``RepositorySweeps``). So an
    ended task whose life overlapped, through a chain of such writers, one
    still running at the death may not have been covered: each group of
    roots inside one another is walked from the earliest start in the chain
    that reaches the death, not only from the earliest running task's. A
    task ends after its walk, so its ``created_at``..``ended_at`` holds both.
    """
    groups: list[list[str]] = []
    for root in dict.fromkeys(r for t in (*records, *ended) for r in t.swept_roots):
        joined = [g for g in groups if any(roots_overlap(root, other) for other in g)]
        merged = [root, *(r for g in joined for r in g)]
        groups = [g for g in groups if g not in joined] + [merged]
    since: dict[str, float] = {}
    for group in groups:
        inside = set(group)
        running = [t.created_at for t in records if inside.intersection(t.swept_roots)]
        if not running:
            continue
        # The chain's lives make one span that ends at the death: it reaches
        # back past each ended task that ended within it.
        frontier = min(running)
        for task in sorted(ended, key=lambda t: t.created_at, reverse=True):
            if (
                task.created_at < frontier
                and (task.ended_at is None or task.ended_at >= frontier)
                and inside.intersection(task.swept_roots)
            ):
                frontier = task.created_at
        for root in group:
            # A root inside another of the group is walked with it.
            if not any(roots_overlap(root, other) and len(other) < len(root) for other in group):
                since[root] = frontier
    return since
