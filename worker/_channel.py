"""The worker's end of its pipe pair: the protocol connection plus trio I/O."""

from __future__ import annotations

from typing import TypeVar

import trio
from pydantic import BaseModel, ValidationError

from protocol import (
    Connection,
    ConnectionClosed,
    ErrorReply,
    EventSpec,
    Message,
    MethodSpec,
    Progress,
    Response,
    Role,
)

from ._outcome import Outcome
from ._pipe import PipeStream

__all__ = ["SupervisorError", "SupervisorLink"]

_READ_SIZE = 256 * 1024

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)
D = TypeVar("D", bound=BaseModel)


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

    def emit_soon(self, event: EventSpec[D], data: D) -> None:
        """Send an event from synchronous code (a callback); it goes out shortly."""
        if self._background is None:
            raise RuntimeError("SupervisorLink.emit_soon needs attach() first")
        self._background.start_soon(self.emit, event, data)

    async def send(self, message: Message) -> None:
        """Validate ``message`` against the protocol state and write it."""
        await self._pipe.send_all(self.connection.send(message))

    def send_now(self, message: Message) -> bytes:
        """Check ``message`` against the protocol state and write it if the pipe takes it at once.

        Returns its frame if it could not be written then (``b""`` if it was):
        ``write_frame`` it before sending anything else.
        """
        frame = self.connection.send(message)
        return b"" if self._pipe.send_now(frame) else frame

    async def write_frame(self, frame: bytes) -> None:
        """Write a frame that ``send_now`` returned."""
        await self._pipe.send_all(frame)

    async def write_raw(self, data: bytes) -> None:
        """Write bytes that bypass the protocol checks (fault injection only)."""
        await self._pipe.send_all(data)

    async def emit(self, event: EventSpec[D], data: D) -> None:
        """Send the event ``event`` of the table, carrying ``data``."""
        await self.send(event.event_for(data))

    async def receive(self) -> list[Message | ConnectionClosed]:
        """The next batch of messages from the supervisor (``ConnectionClosed`` at EOF)."""
        while True:
            data = await self._pipe.receive_some(_READ_SIZE)
            items = self.connection.receive_data(data)
            if items or not data:
                return items or [ConnectionClosed()]

    async def call(self, method: MethodSpec[P, R], params: P) -> R:
        """Ask the supervisor ``method`` and wait for its answer, validated by the table.

        An answer that does not fit the method's result model is the
        supervisor's protocol error: it raises ``SupervisorError``
        (``bad_result``) like an error answer, for the caller to report.
        """
        request_id = self.connection.next_request_id()
        pending: Outcome[Response | ErrorReply] = Outcome()
        self._pending[request_id] = pending
        try:
            await self.send(method.request_for(request_id, params))
            await pending.wait()
        finally:
            self._pending.pop(request_id, None)
        outcome = pending.value
        if isinstance(outcome, ErrorReply):
            raise SupervisorError(outcome.code, outcome.message)
        assert outcome is not None
        try:
            return method.parse_result(outcome.result)
        except ValidationError as exc:
            raise SupervisorError(
                "bad_result", f"the answer to {method.name} does not fit its result: {exc}"
            ) from None

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
