"""The zygote's rehearsal: a worker's common path, run once before the first fork.

CPython 3.11 rewrites a function's bytecode in place after its first few
calls (quickening) and again as it learns the types it sees
(specialization), and libraries fill caches on first use. A fresh worker
that did all of this itself would pay for it in every fork: in CPU, and in
copy-on-write faults on the pages it writes. So the zygote plays one short
subagent through the real worker code (``serve``) against a scripted
supervisor over its own pipes, a few runs of it, and every worker it forks
afterwards starts with that code warm (about half the protocol's CPU per
message, and fewer page faults, in a fresh child).

Invariants:

- Nothing of the rehearsal outlives it: its pipes are closed, and it starts
  no thread (the tools work on one small file, which they do inline), so the
  zygote still forks with a single thread.
- It reads one file, this module's own source, and only if it can read it
  inline (a small regular file); otherwise its model asks for no tool. It
  writes nothing. It applies no limit and no sandbox: those are
  irreversible, and the zygote must not be confined by a worker's policy.
- A play that fails raises ``RehearsalError``: the zygote says so and forks
  cold workers, which work as well, only slower. A thread left behind is
  not that: forking beside a thread is unsafe, so it raises ``RuntimeError``
  and the zygote does not start.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import trio

from protocol import (
    AGENT_RUN,
    PROTOCOL_VERSION,
    AgentRunSpec,
    Connection,
    ConnectionClosed,
    ErrorReply,
    Hello,
    Message,
    ModelCallRequest,
    ModelResult,
    Response,
    Role,
    Shutdown,
    ToolCall,
    Welcome,
    WorkerRequest,
)

from ._channel import SupervisorLink
from ._pipe import PipeStream
from ._runtime import serve
from .tools._threads import inline_size

__all__ = ["RehearsalError", "rehearse"]

#: Agent runs per rehearsal: enough for the worker's per-message code to pass
#: the interpreter's warm-up (a few calls) and specialize.
RUNS = 4
_SOURCE = Path(__file__)


class RehearsalError(Exception):
    """The rehearsal's play failed; workers forked now start cold, but work."""


def rehearse() -> None:
    """Play ``RUNS`` short subagents through a worker's serve loop in this process."""
    try:
        trio.run(_rehearse)
    except Exception as exc:
        cause: BaseException = exc
        while isinstance(cause, BaseExceptionGroup):
            cause = cause.exceptions[0]  # the nursery's: what failed is inside
        raise RehearsalError(
            f"the zygote's rehearsal failed: {type(cause).__name__}: {cause}"
        ) from exc
    finally:
        if threading.active_count() != 1:
            raise RuntimeError("the zygote's rehearsal left a thread behind")


async def _rehearse() -> None:
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    link = SupervisorLink(down_r, up_w)
    ours = PipeStream(up_r, down_w)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_worker, link)
            await _supervisor(ours, Connection(Role.SUPERVISOR))
    finally:
        link.close()
        ours.close()


async def _worker(link: SupervisorLink) -> None:
    try:
        await serve(link, worker_id="rehearsal", spawn_mode="zygote", rlimits={})
    finally:
        link.close()  # the supervisor's side reads to EOF


async def _supervisor(pipe: PipeStream, connection: Connection) -> None:
    """The supervisor's side: welcome, ``RUNS`` agent runs, shutdown, then EOF."""
    messages = _Messages(pipe, connection)
    hello = await messages.next()
    if not isinstance(hello, Hello):
        raise RuntimeError(f"the rehearsal's worker began with {hello!r}, not hello")
    await pipe.send_all(
        connection.send(Welcome(protocol_version=PROTOCOL_VERSION, worker_id=hello.worker_id))
    )
    spec = AgentRunSpec(
        agent_id="rehearsal",
        system="",
        prompt="rehearse",
        tools=("Read", "Grep"),
        preapproved_tools=("Read", "Grep"),
        cwd=str(_SOURCE.parent),
    )
    for _ in range(RUNS):
        request_id = connection.next_request_id()
        await pipe.send_all(connection.send(AGENT_RUN.request_for(request_id, spec)))
        while True:
            message = await messages.next()
            if isinstance(message, ModelCallRequest):
                answer = Response.answering(message.id, _model_turn(message))
                await pipe.send_all(connection.send(answer))
            elif isinstance(message, WorkerRequest):
                raise RuntimeError(f"the rehearsal's worker asked {message.method!r}")
            elif isinstance(message, Response) and message.id == request_id:
                AGENT_RUN.parse_result(message.result)
                break
            elif isinstance(message, ErrorReply | ConnectionClosed):
                raise RuntimeError(f"the rehearsal's agent run failed: {message!r}")
    await pipe.send_all(connection.send(Shutdown()))
    while not isinstance(await messages.next(), ConnectionClosed):
        pass


def _model_turn(request: ModelCallRequest) -> ModelResult:
    """The scripted model: a Read and a Grep of one file, then an answer."""
    done = any(message.role == "tool" for message in request.params.messages)
    if done or inline_size(_SOURCE) is None:
        # A file the tools could not read inline would start a thread.
        return ModelResult(text="rehearsed")
    return ModelResult(
        text="reading",
        tool_calls=(
            ToolCall(id="r", name="Read", input={"file_path": str(_SOURCE)}),
            ToolCall(id="g", name="Grep", input={"pattern": "rehears", "path": str(_SOURCE)}),
        ),
    )


class _Messages:
    """The worker's messages one at a time, as the pipe delivers them."""

    def __init__(self, pipe: PipeStream, connection: Connection) -> None:
        self._pipe = pipe
        self._connection = connection
        self._ready: list[Message | ConnectionClosed] = []

    async def next(self) -> Message | ConnectionClosed:
        while not self._ready:
            data = await self._pipe.receive_some(256 * 1024)
            self._ready.extend(self._connection.receive_data(data))
        return self._ready.pop(0)
