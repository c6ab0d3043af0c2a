"""``ClientSampling``: subagents on the MCP client's own model (``--model mcp-sampling``, S-SRV-4).

With ``subvisor mcp --model mcp-sampling`` no API key is needed: each client's
seat runs its agents on the model string ``mcp-sampling:<its session id>``,
and this provider sends every such call to that seat's client as an MCP
``sampling/createMessage`` request with the agent's tools (sampling with
tools, MCP 2025-11-25), then turns the answer back into a ``ModelResult``.
A worker still only ever asks the supervisor: the client never sees a
worker, and the supervisor never holds the client's key.

A client that did not declare ``sampling`` with ``tools`` gets a clear
error on its first Agent call; a client that declines a request (its user
said no) fails that model call, and the subagent with it, saying so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mcp import types
from mcp.shared.exceptions import MCPError

from protocol import ChatMessage, ModelRequest, ModelResult, ModelStreamDelta, ToolCall, Usage

from ..providers import ModelBadRequestError, ModelConnectionError, ModelEvent, TextSink

__all__ = ["SAMPLING_PROVIDER", "ClientSampling", "SamplingClient"]

#: The provider part of the model strings this provider answers.
SAMPLING_PROVIDER = "mcp-sampling"

_STOP_REASONS = {"endTurn": "end_turn", "toolUse": "tool_use", "maxTokens": "max_tokens"}

#: What a seat gives the provider: can its client sample with tools, and how to ask it.
SamplingClient = tuple[
    Callable[[], bool], Callable[[types.CreateMessageRequestParams], Awaitable[Any]]
]


class ClientSampling:
    """The ``mcp-sampling`` provider of one ``subvisor mcp``: one client per seat."""

    def __init__(self) -> None:
        self._clients: dict[str, SamplingClient] = {}

    @staticmethod
    def model_for(session_id: str) -> str:
        """The model string a seat's agents use."""
        return f"{SAMPLING_PROVIDER}:{session_id}"

    def attach(self, session_id: str, client: SamplingClient) -> None:
        """Route the model calls of ``session_id``'s agents to its client."""
        self._clients[session_id] = client

    def detach(self, session_id: str) -> None:
        """The seat closed: its agents' calls fail from now on."""
        self._clients.pop(session_id, None)

    async def stream(
        self, request: ModelRequest, model: str, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        """Ask the seat's client to sample; yield its text, then the result."""
        client = self._clients.get(model)
        if client is None:
            raise ModelConnectionError(
                f"{SAMPLING_PROVIDER}: the MCP client of session {model} has gone",
                provider=SAMPLING_PROVIDER,
                model=model,
            )
        can_sample, sample = client
        if not can_sample():
            raise ModelBadRequestError(
                f"{SAMPLING_PROVIDER}: this MCP client does not offer sampling with tools; "
                "start subvisor mcp with --model provider:model instead",
                provider=SAMPLING_PROVIDER,
                model=model,
            )
        try:
            answer = await sample(sampling_params(request))
        except MCPError as exc:
            raise ModelBadRequestError(
                f"{SAMPLING_PROVIDER}: the client declined the model call: {exc}",
                provider=SAMPLING_PROVIDER,
                model=model,
            ) from None
        result = model_result(answer)
        if result.text:
            yield ModelStreamDelta(text=result.text)  # one piece: the client answers whole
        yield result


def sampling_params(request: ModelRequest) -> types.CreateMessageRequestParams:
    """An agent's model call as a ``sampling/createMessage`` request."""
    tools = [
        types.Tool(name=spec.name, description=spec.description, input_schema=spec.input_schema)
        for spec in request.tools
    ]
    return types.CreateMessageRequestParams(
        messages=_sampling_messages(request.messages),
        system_prompt=request.system or None,
        max_tokens=request.max_tokens,
        temperature=request.temperature,
        tools=tools or None,
        tool_choice=types.ToolChoice(mode="auto") if tools else None,
    )


def _sampling_messages(messages: tuple[ChatMessage, ...]) -> list[types.SamplingMessage]:
    out: list[types.SamplingMessage] = []
    for message in messages:
        if message.role == "tool":
            block = types.ToolResultContent(
                type="tool_result",
                tool_use_id=message.tool_call_id or "",
                content=[types.TextContent(type="text", text=message.content)],
                is_error=message.is_error,
            )
            last = out[-1] if out else None
            # The results of one assistant turn's calls go back in one user message.
            if last is not None and last.role == "user" and isinstance(last.content, list):
                last.content.append(block)
            else:
                out.append(types.SamplingMessage(role="user", content=[block]))
        elif message.role == "assistant":
            blocks: list[types.SamplingMessageContentBlock] = []
            if message.content:
                blocks.append(types.TextContent(type="text", text=message.content))
            blocks.extend(
                types.ToolUseContent(type="tool_use", id=call.id, name=call.name, input=call.input)
                for call in message.tool_calls
            )
            out.append(types.SamplingMessage(role="assistant", content=blocks))
        else:
            out.append(
                types.SamplingMessage(
                    role="user", content=types.TextContent(type="text", text=message.content)
                )
            )
    return out


def model_result(answer: Any) -> ModelResult:
    """The client's ``CreateMessageResult`` (with or without tools) as a ``ModelResult``."""
    content = answer.content if isinstance(answer.content, list) else [answer.content]
    text = "".join(block.text for block in content if isinstance(block, types.TextContent))
    calls = tuple(
        ToolCall(id=block.id, name=block.name, input=dict(block.input))
        for block in content
        if isinstance(block, types.ToolUseContent)
    )
    reason = answer.stop_reason or ("toolUse" if calls else "endTurn")
    return ModelResult(
        text=text,
        tool_calls=calls,
        stop_reason=_STOP_REASONS.get(reason, reason),
        usage=Usage(),
        model=answer.model or "",
    )
