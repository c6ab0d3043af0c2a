"""The anthropic provider (Messages API) against a real local HTTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from protocol._chat import (
    ChatMessage,
    ModelRequest,
    ModelResult,
    ModelStreamDelta,
    ToolCall,
    ToolSpec,
    Usage,
)
from supervisor.providers import (
    ANTHROPIC_API_VERSION,
    AnthropicProvider,
    ModelAuthError,
    ModelBadRequestError,
    ModelConnectionError,
    ModelEvent,
    ModelServerError,
)
from tests.support.provider_server import CannedResponse, ProviderServer


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


def provider(
    client: httpx.AsyncClient, server: ProviderServer, **options: Any
) -> AnthropicProvider:
    options.setdefault("env", {})
    return AnthropicProvider(client, base_url=server.base_url, **options)


async def collect(events: AsyncIterator[ModelEvent]) -> tuple[list[str], ModelResult]:
    deltas: list[str] = []
    results: list[ModelResult] = []
    async for event in events:
        if isinstance(event, ModelStreamDelta):
            assert not results
            deltas.append(event.text)
        else:
            results.append(event)
    assert len(results) == 1
    return deltas, results[0]


def message_start(input_tokens: int = 25, **usage: int) -> tuple[str, dict[str, Any]]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-20250101",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1, **usage},
            },
        },
    )


def block_start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def text_delta(index: int, text: str) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        },
    )


def json_delta(index: int, partial: str) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": partial},
        },
    )


def block_stop(index: int) -> tuple[str, dict[str, Any]]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(stop_reason: str, output_tokens: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


PING = ("ping", {"type": "ping"})
HELLO = ModelRequest(
    model="anthropic:claude-test", messages=(ChatMessage(role="user", content="hi"),)
)


async def test_text_stream_with_usage_and_headers_s_model_1(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.sse(
            [
                message_start(25, cache_read_input_tokens=7, cache_creation_input_tokens=2),
                block_start(0, {"type": "text", "text": ""}),
                PING,
                text_delta(0, "Hello"),
                text_delta(0, ", wörld"),
                block_stop(0),
                *message_end("end_turn", 9),
            ]
        )
    )
    deltas, result = await collect(
        provider(client, server, api_key="sk-ant-test").stream(HELLO, "claude-test")
    )
    assert deltas == ["Hello", ", wörld"]
    assert result == ModelResult(
        text="Hello, wörld",
        stop_reason="end_turn",
        usage=Usage(input_tokens=25, output_tokens=9, cache_read_tokens=7, cache_write_tokens=2),
        model="claude-test-20250101",
    )
    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == ANTHROPIC_API_VERSION
    body = sent.json()
    assert body["model"] == "claude-test"
    assert body["stream"] is True
    assert body["max_tokens"] == 4096
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


async def test_tool_use_blocks_join_partial_json_across_split_chunks(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.sse(
            [
                message_start(),
                block_start(0, {"type": "text", "text": ""}),
                text_delta(0, "Looking."),
                block_stop(0),
                block_start(1, {"type": "tool_use", "id": "toolu_a", "name": "Grep", "input": {}}),
                json_delta(1, ""),
                json_delta(1, '{"pat'),
                json_delta(1, 'tern": "a'),
                json_delta(1, 'uth", "n": 1'),
                json_delta(1, "2}"),
                block_stop(1),
                block_start(2, {"type": "tool_use", "id": "toolu_b", "name": "Ls", "input": {}}),
                block_stop(2),
                *message_end("tool_use", 40),
            ],
            piece_size=11,
        )
    )
    deltas, result = await collect(provider(client, server).stream(HELLO, "claude-test"))
    assert deltas == ["Looking."]
    assert result.stop_reason == "tool_use"
    assert result.tool_calls == (
        ToolCall(id="toolu_a", name="Grep", input={"pattern": "auth", "n": 12}),
        ToolCall(id="toolu_b", name="Ls", input={}),
    )
    assert result.usage.output_tokens == 40


async def test_history_maps_to_alternating_blocks(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(CannedResponse.sse([message_start(), *message_end("end_turn", 1)]))
    request = ModelRequest(
        model="anthropic:claude-test$high",
        system="Be brief.",
        messages=(
            ChatMessage(role="user", content="find auth"),
            ChatMessage(role="user", content="quickly"),
            ChatMessage(
                role="assistant",
                content="On it.",
                tool_calls=(
                    ToolCall(id="t1", name="Grep", input={"pattern": "auth"}),
                    ToolCall(id="t2", name="Ls", input={}),
                ),
            ),
            ChatMessage(role="tool", tool_call_id="t1", content="auth.py"),
            ChatMessage(role="tool", tool_call_id="t2", content="denied", is_error=True),
            ChatMessage(role="user", content="and then?"),
        ),
        tools=(ToolSpec(name="Grep", description="search", input_schema={"type": "object"}),),
        temperature=0.5,
        effort="high",
    )
    await collect(provider(client, server).stream(request, "claude-test"))
    body = server.requests[0].json()
    assert body["system"] == "Be brief."
    assert body["temperature"] == 0.5
    assert body["tools"] == [
        {"name": "Grep", "description": "search", "input_schema": {"type": "object"}}
    ]
    # effort is deliberately not mapped (see AnthropicProvider's docstring).
    assert "thinking" not in body
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "find auth"}, {"type": "text", "text": "quickly"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "On it."},
                {"type": "tool_use", "id": "t1", "name": "Grep", "input": {"pattern": "auth"}},
                {"type": "tool_use", "id": "t2", "name": "Ls", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "auth.py"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "denied", "is_error": True},
                {"type": "text", "text": "and then?"},
            ],
        },
    ]


async def test_no_key_sends_no_header_and_401_names_the_variable(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.json(
            {
                "type": "error",
                "error": {
                    "type": "authentication_error",
                    "message": "x-api-key header is required",
                },
            },
            status=401,
        )
    )
    with pytest.raises(ModelAuthError) as caught:
        await collect(provider(client, server).stream(HELLO, "claude-test"))
    assert "x-api-key" not in server.requests[0].headers
    message = str(caught.value)
    assert "x-api-key header is required" in message
    assert "ANTHROPIC_API_KEY" in message
    assert "providers.anthropic.api_key" in message


async def test_env_key_is_used_when_no_argument(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(CannedResponse.sse([message_start(), *message_end("end_turn", 1)]))
    await collect(provider(client, server, env={"ANTHROPIC_API_KEY": "sk-env"}).stream(HELLO, "m"))
    assert server.requests[0].headers["x-api-key"] == "sk-env"


async def test_error_event_in_the_stream_is_typed(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.sse(
            [
                message_start(),
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                ),
            ]
        ),
        CannedResponse.sse(
            [
                (
                    "error",
                    {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "bad tools"},
                    },
                ),
            ]
        ),
    )
    with pytest.raises(ModelServerError, match="Overloaded") as overloaded:
        await collect(provider(client, server).stream(HELLO, "m"))
    assert overloaded.value.retryable
    assert overloaded.value.status_code == 529
    with pytest.raises(ModelBadRequestError, match="bad tools") as refused:
        await collect(provider(client, server).stream(HELLO, "m"))
    assert not refused.value.retryable


async def test_stream_without_message_stop_is_a_connection_error(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.sse(
            [message_start(), block_start(0, {"type": "text", "text": ""}), text_delta(0, "par")],
            drop_connection=True,
        )
    )
    with pytest.raises(ModelConnectionError):
        await collect(provider(client, server).stream(HELLO, "m"))


async def test_non_streaming_mode_parses_a_plain_json_response(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.json(
            {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-20250101",
                "content": [
                    {"type": "text", "text": "Reading it."},
                    {"type": "tool_use", "id": "toolu_x", "name": "Read", "input": {"path": "a"}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 30, "output_tokens": 12},
            }
        )
    )
    deltas, result = await collect(
        provider(client, server, streaming=False).stream(HELLO, "claude-test")
    )
    assert deltas == ["Reading it."]
    assert result == ModelResult(
        text="Reading it.",
        tool_calls=(ToolCall(id="toolu_x", name="Read", input={"path": "a"}),),
        stop_reason="tool_use",
        usage=Usage(input_tokens=30, output_tokens=12),
        model="claude-test-20250101",
    )
    assert server.requests[0].json()["stream"] is False
