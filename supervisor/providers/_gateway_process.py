"""A gateway process: makes the HTTP providers' model calls beside the supervisor.

``python -m supervisor.providers._gateway_process --fd N --parent-pid P`` is
started by the supervisor's ``GatewayPool`` and speaks ``_gateway_link`` on
fd ``N``. It holds the keys as the supervisor does (S-SEC-1): they come
over the link, never in its environment; it makes itself non-dumpable
before it reads them, dies with its parent, and is no worker's ancestor or
descendant, so no worker can reach it. It makes one
attempt per ``call`` (the supervisor's gateway keeps the slots, the
retries and the accounting) and batches the streamed text of every call:
one frame per read round (``TEXT_BATCH_S``).

It ends when its link closes (the supervisor closed it, or died).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

import trio

from protocol import ModelRequest, ModelResult
from worker import PipeStream
from worker._privileges import set_dumpable
from worker._process import die_with_parent, set_process_name

from ..kernel import tune_collector
from ._config import GatewayConfig
from ._errors import ModelProviderError, ModelResponseError
from ._gateway import ModelGateway
from ._gateway_link import (
    TEXT_BATCH_S,
    TEXT_GAP_S,
    LinkDecoder,
    error_fields,
    link_frame,
)

__all__ = ["GATEWAY_NICE_STEP", "GATEWAY_PROCESS_NAME", "main", "step_ahead"]

#: ``comm`` of a gateway process (at most 15 bytes).
GATEWAY_PROCESS_NAME = "subvisor-gw"
#: How many nice levels above the supervisor a gateway process runs, where it may.
GATEWAY_NICE_STEP = 5
_READ_SIZE = 256 * 1024


class _Server:
    """One gateway process's calls: their tasks, and the text they read since the last batch."""

    def __init__(self, link: PipeStream, gateway: ModelGateway) -> None:
        self.link = link
        self.gateway = gateway
        self.scopes: dict[int, trio.CancelScope] = {}
        self.texts: list[list[Any]] = []
        #: Set by the first text after a batch went out.
        self.has_texts = trio.Event()
        # Frames go out in the order they were made: a call's answer after
        # the batch that took its last text, even when that batch waits for
        # the pipe (the supervisor drops text that comes after the answer).
        self._sending = trio.StrictFIFOLock()

    def sink(self, call_id: int) -> Any:
        texts = self.texts

        def take(text: str) -> None:
            if not texts:
                self.has_texts.set()
            texts.append([call_id, text])

        return take

    async def send(self, message: list[Any]) -> None:
        async with self._sending:
            await self.link.send_all(link_frame(message))

    async def flush(self) -> None:
        if self.texts:
            batch, self.texts[:] = list(self.texts), []
            await self.send(["texts", batch])

    async def send_texts_forever(self) -> None:
        # A round of the transport's reader feeds every sink in one task step,
        # so its batch goes out right after it. Waiting a whole period after a
        # batch instead would put this wait out of phase with the rounds, and
        # a round's text would wait up to a period more. TEXT_GAP_S bounds the
        # frames that bodies read outside the rounds would send.
        while True:
            await self.has_texts.wait()
            self.has_texts = trio.Event()
            await self.flush()
            await trio.sleep(TEXT_GAP_S)

    async def call(self, call_id: int, fields: dict[str, Any]) -> None:
        answer: list[Any]
        with trio.CancelScope() as scope:
            self.scopes[call_id] = scope
            try:
                request = ModelRequest.model_validate(fields)
                spec, provider = self.gateway.resolve(request.model)
                result: ModelResult | None = None
                events = provider.stream(request, spec.model, on_text=self.sink(call_id))
                async for event in events:
                    if isinstance(event, ModelResult):
                        result = event
                    elif event.text:
                        self.sink(call_id)(event.text)
                if result is None:
                    raise ModelResponseError(
                        f"{spec.provider} model {spec.model!r}: the provider's stream ended "
                        "without a result",
                        provider=spec.provider,
                        model=spec.model,
                    )
                answer = ["result", call_id, result.model_dump(mode="json")]
            except ModelProviderError as exc:
                answer = ["failed", call_id, error_fields(exc)]
            except Exception as exc:
                failed = ModelResponseError(
                    f"the gateway process failed making the call: {type(exc).__name__}: {exc}",
                    provider="gateway",
                    model=str(fields.get("model", "")),
                )
                answer = ["failed", call_id, error_fields(failed)]
        del self.scopes[call_id]
        if scope.cancelled_caught:
            return  # the supervisor stopped waiting for it
        # Every piece of its text before its answer.
        await self.flush()
        await self.send(answer)

    async def serve(self) -> None:
        decoder = LinkDecoder()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.send_texts_forever)
            while data := await self.link.receive_some(_READ_SIZE):
                for message in decoder.feed(data):
                    kind = message[0]
                    if kind == "call":
                        nursery.start_soon(self.call, message[1], message[2])
                    elif kind == "cancel":
                        scope = self.scopes.get(message[1])
                        if scope is not None:
                            scope.cancel()
            nursery.cancel_scope.cancel()


async def _serve(fd: int) -> None:
    link = PipeStream(fd, os.dup(fd))
    decoder = LinkDecoder()
    start: list[Any] | None = None
    while start is None:
        data = await link.receive_some(_READ_SIZE)
        if not data:
            return
        messages = decoder.feed(data)
        if messages:
            start = messages[0]
    if start[0] != "start":
        raise RuntimeError(f"a gateway process starts with 'start', not {start[0]!r}")
    config = GatewayConfig.model_validate(start[1])
    # Text leaves in a batch per read round (see TEXT_BATCH_S).
    async with ModelGateway(config, read_rounds_s=TEXT_BATCH_S) as gateway:
        await link.send_all(link_frame(["ready"]))
        server = _Server(link, gateway)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await server.serve()


def step_ahead(levels: int) -> int:
    """Lower this process's nice value by ``levels`` where it may; return the value in force.

    Streamed text is latency: a chunk that waits for a core waits in every
    live view and every stream's read-idle deadline. A gateway process
    shares the supervisor's scheduling group (its session's autogroup) with
    the zygote; in a launch storm, at equal weight, a chunk waited behind
    their turns. Ahead of them it takes its few hundred microseconds per
    read round first. Lowering a nice value needs ``CAP_SYS_NICE`` or a
    ``RLIMIT_NICE`` that allows it: without, the process stays as it is.
    """
    current = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, max(-20, current - levels))
    return os.getpriority(os.PRIO_PROCESS, 0)


def main(argv: list[str] | None = None) -> int:
    """Serve the supervisor on ``--fd`` until it closes the link."""
    parser = argparse.ArgumentParser(prog="python -m supervisor.providers._gateway_process")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    # Before the keys arrive: nothing of ours may read our memory (S-SEC-1).
    set_dumpable(False)
    die_with_parent(args.parent_pid)
    set_process_name(GATEWAY_PROCESS_NAME)
    step_ahead(GATEWAY_NICE_STEP)
    tune_collector()
    trio.run(_serve, args.fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
