"""The worker's end of its pipe pair: the protocol connection plus trio I/O."""

from __future__ import annotations

from typing import Any

import trio

from protocol import (
    Connection,
    ConnectionClosed,
    ErrorReply,
    Event,
    Message,
    Progress,
    Response,
    Role,
    WorkerMethod,
    WorkerRequest,
)

from ._outcome import Outcome
from ._pipe import PipeStream

__all__ = ["SupervisorError", "SupervisorLink"]

_READ_SIZE = 256 * 1024


class SupervisorError(Exception):
    """The supervisor answered one of our requests with an error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class SupervisorLink:
    """The protocol connection to the supervisor, its pipes, and our pending requests."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.connection = Connection(Role.WORKER)
        self._pipe = PipeStream(read_fd, write_fd)
        self._pending: dict[int, Outcome[Response | ErrorReply]] = {}
        self._background: trio.Nursery | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        """Give the link a nursery for sends started from synchronous code."""
        self._background = nursery

    def emit_soon(self, name: str, data: dict[str, Any]) -> None:
        """Send an event from synchronous code (a callback); it goes out shortly."""
        if self._background is None:
            raise RuntimeError("SupervisorLink.emit_soon needs attach() first")
        self._background.start_soon(self.emit, name, data)

    async def send(self, message: Message) -> None:
        """Validate ``message`` against the protocol state and write it."""
        await self._pipe.send_all(self.connection.send(message))

    async def write_raw(self, data: bytes) -> None:
        """Write bytes that bypass the protocol checks (fault injection only)."""
        await self._pipe.send_all(data)

    async def emit(self, name: str, data: dict[str, Any] | None = None) -> None:
        """Send an event."""
        await self.send(Event(name=name, data=data or {}))

    async def receive(self) -> list[Message | ConnectionClosed]:
        """The next batch of messages from the supervisor (``ConnectionClosed`` at EOF)."""
        while True:
            data = await self._pipe.receive_some(_READ_SIZE)
            items = self.connection.receive_data(data)
            if items or not data:
                return items or [ConnectionClosed()]

    async def request(self, method: WorkerMethod, params: dict[str, Any]) -> Any:
        """Ask the supervisor something and wait for its answer."""
        request_id = self.connection.next_request_id()
        pending: Outcome[Response | ErrorReply] = Outcome()
        self._pending[request_id] = pending
        try:
            await self.send(WorkerRequest(id=request_id, method=method, params=params))
            await pending.wait()
        finally:
            self._pending.pop(request_id, None)
        outcome = pending.value
        if isinstance(outcome, ErrorReply):
            raise SupervisorError(outcome.code, outcome.message)
        assert outcome is not None
        return outcome.result

    def deliver(self, message: Response | ErrorReply | Progress) -> None:
        """Hand an answer from the supervisor to the task waiting for it."""
        if isinstance(message, Progress):
            return
        pending = self._pending.get(message.id)
        if pending is None:
            # The requesting task was cancelled; the connection already
            # checked that the id was ours, so the answer is just dropped.
            return
        pending.set(message)

    def fail_pending(self) -> None:
        """Wake every waiting request after the supervisor went away."""
        for request_id, pending in self._pending.items():
            pending.set(
                ErrorReply(id=request_id, code="disconnected", message="supervisor closed the pipe")
            )

    def close(self) -> None:
        """Close both pipe ends."""
        self._pipe.close()
