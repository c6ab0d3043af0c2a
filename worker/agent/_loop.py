"""``AgentLoop``: the one loop that drives every agent, root and children alike.

messages -> model -> tool calls -> results -> model ... until the model
answers without tool calls (completed) or ``max_turns`` model calls were
made (partial, S-PROF-7). Between steps, ``between_steps`` may inject
messages (steering, notifications). Tool calls of one model turn that are
all concurrency-safe run at the same time (so several ``Agent`` calls in one
message launch concurrently); others run one at a time, in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import trio

from protocol import (
    MESSAGE,
    PARTIAL_MARKER,
    TOOL_FINISHED,
    TOOL_STARTED,
    AgentOutcome,
    ChatMessage,
    MessageAppended,
    ModelRequest,
    ToolCall,
    ToolFinished,
    ToolStarted,
    Usage,
    event_input,
)

from ..tools import ToolOutput
from ._ports import EventSink, ModelPort, ToolPort

__all__ = ["AgentLoop"]

Injector = Callable[[], Awaitable[Sequence[str]]]


class AgentLoop:
    """A conversation with a model that can call tools; ``run`` may be called again to continue."""

    def __init__(
        self,
        *,
        model: ModelPort,
        tools: ToolPort,
        events: EventSink,
        system: str,
        model_name: str = "",
        agent_keys: tuple[str, ...] = ("root",),
        max_turns: int = 4,
        history: Sequence[ChatMessage] = (),
        between_steps: Injector | None = None,
    ) -> None:
        self.messages: list[ChatMessage] = list(history)
        self.usage = Usage()
        self.model_calls = sum(1 for m in history if m.role == "assistant")
        self.tool_calls = 0
        self._model = model
        self._tools = tools
        self._events = events
        self._system = system
        self._model_name = model_name
        self._agent_keys = agent_keys
        self._max_turns = max_turns
        self._between_steps = between_steps

    async def run(self, prompt: str) -> AgentOutcome:
        """Add ``prompt`` as a user message and run until an answer or the turn limit."""
        await self._append(ChatMessage(role="user", content=prompt))
        last_text = ""
        tool_calls_before = self.tool_calls
        for turn in range(1, self._max_turns + 1):
            await self._inject()
            result = await self._model.call(
                ModelRequest(
                    model=self._model_name,
                    system=self._system,
                    messages=tuple(self.messages),
                    tools=tuple(self._tools.specs),
                    agent_keys=self._agent_keys,
                    call_index=self.model_calls,
                )
            )
            self.model_calls += 1
            self.usage = self.usage + result.usage
            await self._append(
                ChatMessage(role="assistant", content=result.text, tool_calls=result.tool_calls)
            )
            if result.text:
                last_text = result.text
            if not result.tool_calls:
                return AgentOutcome(
                    text=last_text,
                    status="completed",
                    turns=turn,
                    tool_calls=self.tool_calls - tool_calls_before,
                    usage=self.usage,
                )
            await self._run_tools(result.tool_calls)
        marker = PARTIAL_MARKER.format(max_turns=self._max_turns)
        return AgentOutcome(
            text=f"{last_text}\n\n{marker}" if last_text else marker,
            status="partial",
            turns=self._max_turns,
            tool_calls=self.tool_calls - tool_calls_before,
            usage=self.usage,
        )

    async def _inject(self) -> None:
        if self._between_steps is None:
            return
        for text in await self._between_steps():
            await self._append(ChatMessage(role="user", content=text))

    async def _append(self, message: ChatMessage) -> None:
        self.messages.append(message)
        await self._events.emit(MESSAGE, MessageAppended(message=message))

    async def _run_tools(self, calls: Sequence[ToolCall]) -> None:
        outputs: list[ToolOutput | None] = [None] * len(calls)

        async def run_one(index: int) -> None:
            call = calls[index]
            await self._events.emit(
                TOOL_STARTED,
                ToolStarted(call_id=call.id, name=call.name, input=event_input(call.input)),
            )
            output = await self._tools.call(call)
            outputs[index] = output
            self.tool_calls += 1
            await self._events.emit(
                TOOL_FINISHED,
                ToolFinished(
                    call_id=call.id,
                    name=call.name,
                    is_error=output.is_error,
                    output_chars=len(output.text),
                ),
            )

        index = 0
        while index < len(calls):
            # A run of consecutive concurrency-safe calls goes at once.
            end = index
            while end < len(calls) and self._tools.is_concurrency_safe(calls[end].name):
                end += 1
            if end == index:
                await run_one(index)
                index += 1
                continue
            batch = calls[index:end]
            # Tasks started together run in no set order; what queues (Agent
            # launches, for worker slots) takes its place in call order first.
            self._tools.reserve(batch)
            try:
                async with trio.open_nursery() as nursery:
                    for i in range(index, end):
                        nursery.start_soon(run_one, i)
            finally:
                self._tools.release(batch)
            index = end
        for call, output in zip(calls, outputs, strict=True):
            assert output is not None
            await self._append(
                ChatMessage(
                    role="tool",
                    content=output.text,
                    tool_call_id=call.id,
                    is_error=output.is_error,
                )
            )
