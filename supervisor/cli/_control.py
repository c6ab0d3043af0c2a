"""A live session's control channel: `subvisor top`, `ps`, `logs`, `stop`, `bg` reach it.

``subvisor run`` and ``subvisor stress`` serve it while they run, on an
abstract UNIX socket whose name their address file ``run/<session>.addr``
gives (``supervisor.cli._control_channel``). Only this user's processes outside
any worker tree are served (S-SEC-2): each connection's peer is checked
first (``supervisor.cli._control_peer``), and a refused one gets one error line
(code ``refused``) and is closed. One JSON object per line each way; a
connection may send any number of requests, and each gets one reply line::

    {"op": "list", "page": 1, "page_size": 20}
    {"ok": true, "agents": [...], "total": 42, "pages": 3, "usage": {...}, ...}

========================  ==================================================
op                        reply
========================  ==================================================
``session``               the session: status, counts, usage rollup
``list``                  one page of its subagents, finished ones too
                          (``page`` from 1, ``page_size`` 1..100, default
                          20; S-OBS-1), with live RSS, CPU% and usage
``tasks``                 every task record of the session (``subvisor ps``)
``task``                  one task by id or unique id prefix
``transcript``            a child's messages with ``seq > after_seq``
                          (read-only, incremental; S-OBS-2)
``subscribe``             ``{"ok": true}``, then one line per lifecycle
                          event (``supervisor.delegation._lifecycle``) until either end
                          closes; ``{"event": "resync"}`` when some were
                          dropped because the client read too slowly
``follow``                ``{"ok": true, "task": ...}``, then one task's
                          stored messages (``{"event": "message", "seq",
                          "message"}``), the text its current answer has
                          streamed so far, and from then on its new
                          messages and ``text.streamed`` events as they
                          come, until ``{"event": "task.ended", "task":
                          ...}`` ends the connection (``subvisor logs -f``);
                          ``{"event": "resync"}`` when streamed text was
                          dropped (the messages never are)
``stop``                  stop a task (``task_id``)
``background``            move a foreground agent to the background
========================  ==================================================

A bad request (not JSON, not an object, an unknown op or id, a bad
parameter) gets ``{"ok": false, "error": "..."}`` saying what to send
instead; the connection and the server live on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import trio

from ..delegation._lifecycle import LIFECYCLE_EVENTS
from ..delegation._root import RootSession, root_usage
from ..delegation._subagents import SubagentRun
from ..delegation._subvisor import Subvisor
from ..state._store import SessionRow
from ..state._task_record import TaskRecord, TaskUsage
from ..state._tasks import TaskError
from ..state._usage import UsageRollup, sum_usage
from ._control_channel import (
    LiveSession,
    address_file,
    new_address,
    socket_address,
    write_address_file,
)
from ._control_ops import (
    BackgroundOp,
    ControlRequest,
    ControlRequestError,
    FollowOp,
    ListOp,
    SessionOp,
    StopOp,
    SubscribeOp,
    TaskOp,
    TasksOp,
    TranscriptOp,
    parse_request,
)
from ._control_peer import peer_credentials, refusal

__all__ = [
    "MAX_REQUEST_BYTES",
    "serve_control",
]

log = logging.getLogger("subvisor")

#: The longest request line the server reads; longer ones end the connection.
MAX_REQUEST_BYTES = 64 * 1024

#: Refused connections logged per session; the rest are refused silently.
_LOGGED_REFUSALS = 20

#: Connections ended by an unexpected error logged per session (with the traceback).
_LOGGED_INTERNAL_ERRORS = 20

#: A ``transcript`` reply stops adding messages past this many bytes (one at least).
_TRANSCRIPT_REPLY_BYTES = 1024 * 1024

#: Messages read from the store at a time by ``follow``.
_FOLLOW_PAGE = 200

#: Events of the followed task held for a slow ``follow`` client; past this,
#: streamed text is dropped (and ``resync`` sent), never a message.
_FOLLOW_BACKLOG = 1024

#: The lifecycle events ``follow`` passes on (the others do not change a transcript).
_FOLLOWED = frozenset({"text.streamed", "message.appended", "task.ended"})


def _client_gone(exc: BaseException) -> bool:
    """True when ``exc`` says only that the client went away (also inside a group)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError)


class _LineStream:
    """Newline-delimited JSON over one connection, buffering what arrives past a newline."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buffer = bytearray()

    async def receive_line(self, limit: int = MAX_REQUEST_BYTES) -> bytes | None:
        """The next line without its newline; ``None`` at EOF.

        Raises ``ControlRequestError`` for a line over ``limit`` bytes.
        """
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > limit:
                raise ControlRequestError(
                    f"line longer than {limit} bytes; send one JSON object per line"
                )
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return None  # a partial last line without its newline is not a request
            self._buffer += chunk

    async def send(self, message: dict[str, Any]) -> None:
        """Write one JSON line."""
        await self.stream.send_all(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class _ControlServer:
    """Answers the requests of one session's control connections."""

    def __init__(self, host: Subvisor, session_id: str, root: RootSession | None) -> None:
        self._store = host.store
        self._registry = host.registry
        #: The live subagent runs by task id, their lifecycle events, and S-RUN-5's move.
        self._runs = host.runs
        self._lifecycle = host.lifecycle
        self._move_to_background = host.move_to_background
        self.session_id = session_id
        self.root = root
        # psutil measures CPU% between two calls on the same Process object.
        self._processes: dict[int, psutil.Process] = {}
        self._refusals = 0
        self._internal_errors = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        """Answer one connection; whatever goes wrong ends it alone, never the session."""
        conn = _LineStream(stream)
        async with stream:
            try:
                await self._serve(conn)
            except Exception as exc:
                if _client_gone(exc):
                    return
                # A bug one request found: that connection gets one line and is closed;
                # the channel and the session's agents go on (S-OBS-1).
                self._internal_errors += 1
                if self._internal_errors <= _LOGGED_INTERNAL_ERRORS:
                    log.error(
                        "control channel of session %s: a request failed; its connection"
                        " was closed",
                        self.session_id,
                        exc_info=exc,
                    )
                error = f"internal error ({type(exc).__name__}); this connection is closed"
                with contextlib.suppress(Exception):
                    await conn.send({"ok": False, "error": error, "code": "internal_error"})

    async def _serve(self, conn: _LineStream) -> None:
        if not await self._admit(conn):
            return
        while True:
            try:
                line = await conn.receive_line()
            except ControlRequestError as exc:
                await conn.send({"ok": False, "error": str(exc), "code": exc.code})
                return
            if line is None:
                return
            if not line.strip():
                continue
            try:
                request = parse_request(line)
            except ControlRequestError as exc:
                await conn.send({"ok": False, "error": str(exc), "code": exc.code})
                continue
            if isinstance(request, SubscribeOp):
                await self._subscribe(conn)
                return
            if isinstance(request, FollowOp):
                await self._follow(conn, request)
                return
            await conn.send(await self._answer(request))

    async def _admit(self, conn: _LineStream) -> bool:
        """Check the peer (S-SEC-2); a refused one gets one error line and is logged."""
        sock = conn.stream.socket
        # The credentials of the process that called connect(), fixed then: not of
        # whoever holds the socket now, nor of a later owner of that pid (the race
        # is handled and explained in _control_peer). The peer stays connected meanwhile.
        try:
            peer = peer_credentials(sock)
        except OSError:
            return False  # gone already: nothing to answer
        why = refusal(sock, peer)
        if why is None:
            return True
        self._refusals += 1
        # Bounded: a worker that retries in a loop cannot flood the log.
        if self._refusals <= _LOGGED_REFUSALS:
            log.warning(
                "control channel of session %s refused process %d (uid %d): %s%s",
                self.session_id,
                peer.pid,
                peer.uid,
                why,
                "; further refusals are not logged" if self._refusals == _LOGGED_REFUSALS else "",
            )
        await conn.send({"ok": False, "error": f"refused: {why}", "code": "refused"})
        return False

    async def _answer(self, request: ControlRequest) -> dict[str, Any]:
        try:
            match request:
                case SessionOp():
                    return self._session()
                case ListOp():
                    return self._list(request)
                case TasksOp():
                    return self._tasks()
                case TaskOp():
                    return {"ok": True, "task": self._find(request.task_id).model_dump(mode="json")}
                case TranscriptOp():
                    return self._transcript(request)
                case StopOp():
                    record = await self._registry.stop(self._find(request.task_id).task_id)
                    return {"ok": True, "task_id": record.task_id, "status": record.status}
                case BackgroundOp():
                    record = self._find(request.task_id)
                    # S-RUN-5: an explicit request to move a foreground agent.
                    if not self._move_to_background(record.task_id):
                        raise ControlRequestError(
                            f"task {record.task_id} is not a running foreground agent"
                            f" ({record.status}{', background' if record.background else ''})",
                            "not_running",
                        )
                    return {"ok": True, "task_id": record.task_id, "status": "running"}
                case SubscribeOp() | FollowOp():  # answered by ``serve``: they take over
                    raise ControlRequestError(f"{request.op} is a connection's last request")
        except ControlRequestError as exc:
            return {"ok": False, "error": str(exc), "code": exc.code}
        except TaskError as exc:
            return {"ok": False, "error": str(exc), "code": "not_running"}

    # -- ops ------------------------------------------------------------------------

    def _session_row(self) -> SessionRow:
        row = self._store.get_session(self.session_id)
        assert row is not None, "a served session is in the store"
        return row

    def _session(self) -> dict[str, Any]:
        row = self._session_row()
        return {
            "ok": True,
            "session_id": self.session_id,
            "status": row.status,
            "model": row.model,
            "cwd": row.cwd,
            "created_at": row.created_at,
            "pid": os.getpid(),
            "counts": self._counts(),
            "usage": self.rollup().summary(),
        }

    def _list(self, request: ListOp) -> dict[str, Any]:
        page, page_size = request.page, request.page_size
        store = self._store
        total = store.count_child_sessions(self.session_id)
        rows = store.list_child_sessions(
            self.session_id, offset=(page - 1) * page_size, limit=page_size
        )
        runs = {
            run.launch.child_session_id: run
            for run in self._runs.values()
            if run.launch.parent_session_id == self.session_id
        }
        stored = store.tasks_of_child_sessions(
            self.session_id, [row.session_id for row in rows if row.session_id not in runs]
        )
        agents = [
            self._agent(row, runs.get(row.session_id), stored.get(row.session_id)) for row in rows
        ]
        live = {
            run.handle.pid
            for run in runs.values()
            if run.handle is not None and run.handle.node is None and not run.done.is_set()
        }
        for pid in set(self._processes) - live:
            del self._processes[pid]
        return {
            "ok": True,
            "session_id": self.session_id,
            "session_status": self._session_row().status,
            "page": page,
            "page_size": page_size,
            "total": total,
            "pages": max(1, math.ceil(total / page_size)),
            "agents": agents,
            "counts": self._counts(),
            "usage": self.rollup().summary(),
        }

    def _agent(
        self, row: SessionRow, run: SubagentRun | None, stored: TaskRecord | None
    ) -> dict[str, Any]:
        record = self._registry.get(run.task_id) if run is not None else stored
        live = run is not None and not run.done.is_set()
        usage = (
            run.live_usage()
            if live and run is not None
            else (record.usage if record is not None else TaskUsage())
        )
        pid = rss = cpu = None
        handle = run.handle if run is not None else None
        if live and handle is not None and handle.alive:
            pid, rss = handle.pid, handle.sample_rss()
            # A remote worker's pid is its node's: a local reading would be another process's.
            cpu = self._cpu_percent(handle.pid) if handle.node is None else None
        now = time.time()
        created = record.created_at if record is not None else row.created_at
        ended = record.ended_at if record is not None else None
        return {
            "agentId": record.task_id if record is not None else row.session_id,
            "child_session_id": row.session_id,
            "type": row.agent_type,
            "description": row.description,
            "status": record.status if record is not None else row.status,
            "background": bool(record and record.background),
            "turns": usage.model_calls,
            "tokens": usage.total_tokens,
            "tool_calls": usage.tool_calls,
            # Live: the worker's RSS now; ended: its peak.
            "rss_bytes": rss if live else usage.peak_rss_bytes or None,
            "cpu_percent": cpu,
            "elapsed_s": round((ended or now) - created, 3),
            "pid": pid,
            "live": live,
            # Live: what it does now (waiting for a model slot, streaming text).
            "note": (run.activity if live and run is not None else None)
            or ((record.worker_exit or record.error) if record is not None else None),
        }

    def _cpu_percent(self, pid: int) -> float | None:
        process = self._processes.get(pid)
        try:
            if process is None:
                process = self._processes[pid] = psutil.Process(pid)
                process.cpu_percent(None)
                return None  # the first call only starts the measurement
            return float(process.cpu_percent(None))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            self._processes.pop(pid, None)
            return None

    def _agent_records(self) -> list[TaskRecord]:
        return [r for r in self._registry.list(self.session_id) if r.kind == "local_agent"]

    def _counts(self) -> dict[str, int]:
        return dict(Counter(r.status for r in self._agent_records()))

    def rollup(self) -> UsageRollup:
        """The session's usage now: its root's so far plus every subagent's, live ones included."""
        runs = self._runs
        subagents = []
        for record in self._agent_records():
            run = runs.get(record.task_id)
            live = run is not None and not run.done.is_set()
            subagents.append(run.live_usage() if live and run is not None else record.usage)
        if self.root is not None:
            own = root_usage(self.root, created_at=self._session_row().created_at)
        else:
            own = self._store.session_usage(self.session_id) or TaskUsage()
        return UsageRollup(
            session_id=self.session_id,
            own=own,
            subagents=sum_usage(subagents),
            subagent_count=self._store.count_child_sessions(self.session_id),
        )

    def _tasks(self) -> dict[str, Any]:
        records = []
        activity: dict[str, str] = {}
        for record in self._registry.list(self.session_id):
            run = self._runs.get(record.task_id)
            if run is not None and not run.done.is_set():
                record = record.model_copy(update={"usage": run.live_usage()})
                if run.activity is not None:
                    activity[record.task_id] = run.activity
            records.append(record.model_dump(mode="json"))
        row = self._session_row()
        return {
            "ok": True,
            "session_id": self.session_id,
            "status": row.status,
            "tasks": records,
            "activity": activity,
            "usage": self.rollup().summary(),
        }

    def _find(self, task_id: str) -> TaskRecord:
        """The session's task with that id, else the one whose id starts with it."""
        records = self._registry.list(self.session_id)
        exact = [r for r in records if r.task_id == task_id]
        matches = exact or [r for r in records if r.task_id.startswith(task_id)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ControlRequestError(
                f"no task {task_id!r} in session {self.session_id}; the 'list' op (or"
                " `subvisor ps`) shows its tasks",
                "unknown_task",
            )
        shown = ", ".join(r.task_id for r in matches[:5])
        raise ControlRequestError(
            f"task id prefix {task_id!r} matches several tasks ({shown}): give more characters",
            "ambiguous_task",
        )

    def _transcript(self, request: TranscriptOp) -> dict[str, Any]:
        record = self._find(request.task_id)
        after, limit = request.after_seq, request.limit
        if record.child_session_id is None:
            raise ControlRequestError(
                f"task {record.task_id} is not a subagent: it has no transcript"
            )
        messages: list[dict[str, Any]] = []
        size, next_seq = 0, after
        for seq, message in self._store.messages_after(
            record.child_session_id, after_seq=after, limit=limit
        ):
            item = {"seq": seq, **message.model_dump(mode="json")}
            size += len(json.dumps(item))
            if messages and size > _TRANSCRIPT_REPLY_BYTES:
                break
            messages.append(item)
            next_seq = seq
        return {
            "ok": True,
            "task_id": record.task_id,
            "description": record.description,
            "status": record.status,
            "ended": record.is_terminal,
            "messages": messages,
            "after_seq": next_seq,
        }

    async def _subscribe(self, conn: _LineStream) -> None:
        announce: dict[str, Any] = {
            "ok": True,
            "op": "subscribe",
            "session_id": self.session_id,
            "events": sorted(LIFECYCLE_EVENTS),
        }
        async with trio.open_nursery() as nursery:

            async def until_closed() -> None:
                # The client only listens now; what it sends is ignored, and its
                # EOF ends the subscription even while no event comes.
                while await conn.stream.receive_some(4096):
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_closed)
            while True:
                # Subscribed before the announcement: whoever reads the state
                # after it (``top`` fetches its first page after the ``ok``, and
                # re-reads after a ``resync``) misses no event published between.
                with self._lifecycle.subscribe() as events:
                    await conn.send(announce)
                    async for event in events:
                        if event["session_id"] == self.session_id:
                            await conn.send(event)
                # The feed dropped us: we fell behind. The client re-reads.
                announce = {"event": "resync", "session_id": self.session_id}

    async def _follow(self, conn: _LineStream, request: FollowOp) -> None:
        """Stream one task's transcript and live text until it ends (``subvisor logs -f``).

        Race handled: what is stored and what has streamed of the answer in
        progress are read in the tick the subscription starts, so every later
        message and piece of text is an event on it, and none is sent twice.
        A message is stored only after its answer has finished streaming, so
        the text read here belongs to a message not stored yet.
        """
        try:
            record = self._find(request.task_id)
        except ControlRequestError as exc:
            await conn.send({"ok": False, "error": str(exc), "code": exc.code})
            return
        task_id, transcript = record.task_id, record.child_session_id
        run = self._runs.get(task_id)
        backlog_send, backlog = trio.open_memory_channel[dict[str, Any] | None](_FOLLOW_BACKLOG)
        with self._lifecycle.subscribe() as events:
            stored = self._store.last_message_seq(transcript) if transcript else 0
            streamed = run.live_text.text if run is not None and not run.done.is_set() else ""
            await conn.send({"ok": True, "op": "follow", "task": record.model_dump(mode="json")})
            sent = await self._send_messages(conn, transcript, after=0, upto=stored)
            if streamed:
                await conn.send(
                    {"event": "text.streamed", "agentId": task_id, "text": streamed, "offset": 0}
                )
            async with trio.open_nursery() as nursery:

                async def until_closed() -> None:
                    while await conn.stream.receive_some(4096):
                        pass
                    nursery.cancel_scope.cancel()

                def resync() -> None:
                    with contextlib.suppress(trio.WouldBlock):
                        backlog_send.send_nowait({"event": "resync"})

                async def relay(feed: trio.MemoryReceiveChannel[dict[str, Any]]) -> None:
                    async for event in feed:
                        if event["agentId"] == task_id and event["event"] in _FOLLOWED:
                            try:
                                backlog_send.send_nowait(event)
                            except trio.WouldBlock:
                                # The client reads slowly: text is dropped; messages are
                                # re-read from the store at the next message.appended.
                                resync()

                async def forward() -> None:
                    await relay(events)
                    while True:
                        # The feed dropped us (it fell behind): subscribe again.
                        resync()
                        with self._lifecycle.subscribe() as again:
                            await relay(again)

                async def until_ended() -> None:
                    # Tasks without lifecycle events (background Bash) end here too.
                    with contextlib.suppress(TaskError):
                        await self._registry.wait(task_id)
                        await backlog_send.send(None)

                nursery.start_soon(until_closed)
                nursery.start_soon(forward)
                nursery.start_soon(until_ended)
                async for event in backlog:
                    if event is None or event["event"] == "task.ended":
                        break
                    if event["event"] == "message.appended":
                        sent = await self._send_messages(conn, transcript, after=sent)
                    else:
                        await conn.send(event)
                # The rest of the transcript, as stored now that the task has ended.
                await self._send_messages(conn, transcript, after=sent)
                final = self._registry.get(task_id) or record
                await conn.send(
                    {
                        "event": "task.ended",
                        "agentId": task_id,
                        "status": final.status,
                        "task": final.model_dump(mode="json"),
                    }
                )
                nursery.cancel_scope.cancel()

    async def _send_messages(
        self, conn: _LineStream, transcript: str | None, *, after: int, upto: int | None = None
    ) -> int:
        """Send the messages with ``after < seq <= upto``, one line each; the last seq sent."""
        while transcript is not None:
            page = self._store.messages_after(transcript, after_seq=after, limit=_FOLLOW_PAGE)
            for seq, message in page:
                if upto is not None and seq > upto:
                    return after
                await conn.send(
                    {"event": "message", "seq": seq, "message": message.model_dump(mode="json")}
                )
                after = seq
            if len(page) < _FOLLOW_PAGE:
                break
        return after


@asynccontextmanager
async def serve_control(
    host: Subvisor,
    session_id: str,
    *,
    root: RootSession | None = None,
    home: Path | None = None,
) -> AsyncIterator[LiveSession]:
    """Serve the session's control channel for the duration of the block.

    ``root`` lets the usage rollup include the root's usage while it runs;
    ``home`` (default the host's) is where ``run/<session>.addr`` goes, so a
    run whose state lives elsewhere (stress) is still found by ``subvisor top``.
    Yields the session's address as its address file gives it.
    """
    home = home or host.home
    run_dir = home / "run"
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(run_dir, 0o700)
    server = _ControlServer(host, session_id, root)
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        address = new_address()
        await listener.bind(socket_address(address))
        listener.listen(64)
        session = LiveSession(session_id, address, os.getpid(), time.time())
        try:
            # Published only once it listens: a refused address means a dead session.
            write_address_file(home, session)
            async with trio.open_nursery() as nursery:

                async def accept_loop() -> None:
                    while True:
                        conn, _ = await listener.accept()
                        nursery.start_soon(server.serve, trio.SocketStream(conn))

                nursery.start_soon(accept_loop)
                yield session
                nursery.cancel_scope.cancel()
        finally:
            address_file(home, session_id).unlink(missing_ok=True)
