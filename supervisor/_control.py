"""A running session's control socket: other ``subvisor`` commands reach it here.

``subvisor run`` serves ``$SUBVISOR_HOME/run/<session>.sock`` while it runs;
``subvisor stop ID`` connects and asks it to stop a task, ``subvisor bg ID``
to move a foreground agent to the background. One JSON object per
line each way. Only this user can connect (the socket is mode 0600).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ._tasks import TaskError

if TYPE_CHECKING:
    from ._host import Subvisor

__all__ = ["control_socket_path", "send_control_request", "serve_control"]

_MAX_LINE = 64 * 1024


def control_socket_path(home: Path, session_id: str) -> Path:
    """Where the session's control socket lives."""
    return home / "run" / f"{session_id}.sock"


async def _read_line(stream: trio.SocketStream) -> bytes:
    """Bytes up to a newline (included), at EOF, or at ``_MAX_LINE``."""
    data = b""
    while not data.endswith(b"\n") and len(data) < _MAX_LINE:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
    return data


async def _handle(host: Subvisor, stream: trio.SocketStream) -> None:
    async with stream:
        data = await _read_line(stream)
        if not data.endswith(b"\n") and len(data) < _MAX_LINE:
            return  # the client went away before finishing its request
        reply: dict[str, Any]
        try:
            request = json.loads(data)
            op, task_id = request.get("op"), str(request["task_id"])
            if op == "stop":
                record = await host.registry.stop(task_id)
                reply = {"ok": True, "status": record.status}
            elif op == "background":
                # S-RUN-5: an explicit request to move a foreground agent.
                moved = host.move_to_background(task_id)
                reply = {"ok": moved, "error": None if moved else "not a running foreground agent"}
            else:
                raise ValueError(f"unknown op {op!r}; known: stop, background")
        except (ValueError, KeyError, TaskError) as exc:
            reply = {"ok": False, "error": str(exc)}
        await stream.send_all(json.dumps(reply).encode() + b"\n")


@asynccontextmanager
async def serve_control(host: Subvisor, session_id: str) -> AsyncIterator[Path]:
    """Serve the session's control socket for the duration of the block."""
    path = control_socket_path(host.home, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(16)
    try:
        async with trio.open_nursery() as nursery:

            async def accept_loop() -> None:
                while True:
                    conn, _ = await listener.accept()
                    nursery.start_soon(_handle, host, trio.SocketStream(conn))

            nursery.start_soon(accept_loop)
            yield path
            nursery.cancel_scope.cancel()
    finally:
        listener.close()
        path.unlink(missing_ok=True)


async def send_control_request(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Send one request to a session's control socket and return its reply."""
    stream = await trio.open_unix_socket(str(path))
    async with stream:
        await stream.send_all(json.dumps(request).encode() + b"\n")
        data = await _read_line(stream)
    reply: dict[str, Any] = json.loads(data)
    return reply
