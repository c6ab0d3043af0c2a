"""The openai provider (Chat Completions) against a real local HTTP server; SSE decoding."""

from __future__ import annotations

import json
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
    ModelAuthError,
    ModelConnectionError,
    ModelEvent,
    ModelResponseError,
    ModelServerError,
    OpenAIProvider,
)
from supervisor.providers._sse import SseDecoder, SseEvent
from tests.support.provider_server import CannedResponse, ProviderServer


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One Chat Completions stream chunk."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-test-2025",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def stream_of(*chunks: dict[str, Any], piece_size: int | None = None) -> CannedResponse:
    events = [(None, c) for c in chunks] + [(None, "[DONE]")]
    return CannedResponse.sse(events, piece_size=piece_size)


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


def provider(client: httpx.AsyncClient, server: ProviderServer, **options: Any) -> OpenAIProvider:
    options.setdefault("env", {})
    return OpenAIProvider(client, base_url=server.base_url + "/v1", **options)


HELLO = ModelRequest(model="openai:gpt-test", messages=(ChatMessage(role="user", content="hi"),))


async def test_text_stream_usage_and_request_shape_s_model_1(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_of(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo, wörld"}),
            chunk({}, finish="stop"),
            chunk(
                usage={
                    "prompt_tokens": 11,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 3},
                }
            ),
        )
    )
    deltas, result = await collect(
        provider(client, server, api_key="sk-test").stream(HELLO, "gpt-test")
    )
    assert deltas == ["Hel", "lo, wörld"]
    assert result == ModelResult(
        text="Hello, wörld",
        stop_reason="end_turn",
        usage=Usage(input_tokens=8, output_tokens=5, cache_read_tokens=3),
        model="gpt-test-2025",
    )
    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = sent.json()
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 4096


async def test_tool_call_deltas_join_by_index_across_split_chunks(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    def call_delta(index: int, **fields: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, **fields}]})

    server.enqueue(
        stream_of(
            chunk({"content": "Checking."}),
            call_delta(0, id="call_a", type="function", function={"name": "Grep", "arguments": ""}),
            call_delta(1, id="call_b", type="function", function={"name": "Read", "arguments": ""}),
            # Argument JSON arrives in fragments cut mid-token, the calls interleaved.
            call_delta(0, function={"arguments": '{"pat'}),
            call_delta(1, function={"arguments": '{"path": "src/a'}),
            call_delta(0, function={"arguments": 'tern": "au'}),
            call_delta(1, function={"arguments": 'uth.py", "limit": 1'}),
            call_delta(0, function={"arguments": 'th\\n", "n": [1, 2]}'}),
            call_delta(1, function={"arguments": "0}"}),
            chunk({}, finish="tool_calls"),
            piece_size=7,
        )
    )
    deltas, result = await collect(provider(client, server).stream(HELLO, "gpt-test"))
    assert deltas == ["Checking."]
    assert result.stop_reason == "tool_use"
    assert result.tool_calls == (
        ToolCall(id="call_a", name="Grep", input={"pattern": "auth\n", "n": [1, 2]}),
        ToolCall(id="call_b", name="Read", input={"path": "src/auth.py", "limit": 10}),
    )


async def test_streamed_connection_is_reused(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    """After [DONE] the body is read to its end, so the pooled connection serves the next call."""
    server.enqueue(*(stream_of(chunk({"content": "x"}, finish="stop")) for _ in range(3)))
    for _ in range(3):
        await collect(provider(client, server).stream(HELLO, "m"))
    assert len({sent.client_port for sent in server.requests}) == 1


async def test_request_maps_history_tools_and_effort(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(stream_of(chunk({"content": "ok"}, finish="stop")))
    request = ModelRequest(
        model="openai:o3$high",
        system="Be brief.",
        messages=(
            ChatMessage(role="user", content="find auth"),
            ChatMessage(
                role="assistant",
                tool_calls=(ToolCall(id="c1", name="Grep", input={"pattern": "auth"}),),
            ),
            ChatMessage(role="tool", tool_call_id="c1", content="no such dir", is_error=True),
            ChatMessage(role="assistant", content="Retrying."),
        ),
        tools=(ToolSpec(name="Grep", description="search", input_schema={"type": "object"}),),
        max_tokens=300,
        temperature=0.2,
        effort="high",
    )
    await collect(
        provider(client, server, max_tokens_param="max_completion_tokens").stream(request, "o3")
    )
    body = server.requests[0].json()
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "find auth"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "Grep", "arguments": '{"pattern": "auth"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Error: no such dir"},
        {"role": "assistant", "content": "Retrying."},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "Grep",
                "description": "search",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert body["max_completion_tokens"] == 300
    assert "max_tokens" not in body
    assert body["temperature"] == 0.2
    assert body["reasoning_effort"] == "high"


async def test_no_key_sends_no_authorization_and_env_key_is_used(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_of(chunk({"content": "a"}, finish="stop")),
        stream_of(chunk({"content": "b"}, finish="stop")),
        stream_of(chunk({"content": "c"}, finish="stop")),
    )
    await collect(provider(client, server).stream(HELLO, "llama3"))
    await collect(provider(client, server, env={"OPENAI_API_KEY": "sk-env"}).stream(HELLO, "m"))
    await collect(
        provider(client, server, api_key="sk-arg", env={"OPENAI_API_KEY": "sk-env"}).stream(
            HELLO, "m"
        )
    )
    first, second, third = server.requests
    assert "authorization" not in first.headers
    assert second.headers["authorization"] == "Bearer sk-env"
    assert third.headers["authorization"] == "Bearer sk-arg"


async def test_401_without_key_says_which_variable_to_set(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.json(
            {"error": {"message": "You didn't provide an API key.", "type": "invalid_request"}},
            status=401,
        )
    )
    with pytest.raises(ModelAuthError) as caught:
        await collect(provider(client, server).stream(HELLO, "gpt-test"))
    error = caught.value
    assert error.status_code == 401
    assert error.provider == "openai"
    assert error.model == "gpt-test"
    assert error.provider_message == "You didn't provide an API key."
    assert "no API key is configured" in str(error)
    assert "OPENAI_API_KEY" in str(error)
    assert "providers.openai.api_key" in str(error)


async def test_non_streaming_mode_parses_a_plain_json_response(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        CannedResponse.json(
            {
                "id": "chatcmpl-2",
                "model": "gpt-test-2025",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "Let me look.",
                            "tool_calls": [
                                {
                                    "id": "call_x",
                                    "type": "function",
                                    "function": {"name": "Read", "arguments": '{"path": "a"}'},
                                }
                            ],
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 7},
            }
        )
    )
    deltas, result = await collect(
        provider(client, server, streaming=False).stream(HELLO, "gpt-test")
    )
    assert deltas == ["Let me look."]
    assert result == ModelResult(
        text="Let me look.",
        tool_calls=(ToolCall(id="call_x", name="Read", input={"path": "a"}),),
        stop_reason="tool_use",
        usage=Usage(input_tokens=20, output_tokens=7),
        model="gpt-test-2025",
    )
    body = server.requests[0].json()
    assert body["stream"] is False
    assert "stream_options" not in body


async def test_finish_reason_length_and_local_server_stop_with_tools(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_of(chunk({"content": "trunc"}, finish="length")),
        # llama.cpp-style: tool calls announced with finish_reason "stop".
        stream_of(
            chunk({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "Ls"}}]}),
            chunk({}, finish="stop"),
        ),
    )
    _, truncated = await collect(provider(client, server).stream(HELLO, "m"))
    _, tools = await collect(provider(client, server).stream(HELLO, "m"))
    assert truncated.stop_reason == "max_tokens"
    assert tools.stop_reason == "tool_use"
    assert tools.tool_calls == (ToolCall(id="t", name="Ls", input={}),)


async def test_stream_cut_before_finish_is_a_connection_error(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(CannedResponse.sse([(None, chunk({"content": "partial"}))]))
    events = provider(client, server).stream(HELLO, "m")
    first = await anext(events)
    assert first == ModelStreamDelta(text="partial")
    with pytest.raises(ModelConnectionError, match="ended before the answer was complete"):
        await anext(events)


async def test_invalid_tool_arguments_are_a_response_error(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_of(
            chunk({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "Ls"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
            chunk({}, finish="tool_calls"),
        )
    )
    with pytest.raises(ModelResponseError, match="arguments of tool call 'Ls'"):
        await collect(provider(client, server).stream(HELLO, "m"))


async def test_chunk_of_unexpected_shape_is_a_response_error(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(stream_of({"choices": [{"index": 0, "delta": "not an object"}]}))
    with pytest.raises(ModelResponseError, match="a stream chunk has an unexpected shape"):
        await collect(provider(client, server).stream(HELLO, "m"))


async def test_error_inside_the_stream_is_a_server_error(
    server: ProviderServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(stream_of({"error": {"message": "model overloaded"}}))
    with pytest.raises(ModelServerError, match="model overloaded") as caught:
        await collect(provider(client, server).stream(HELLO, "m"))
    assert caught.value.retryable


async def test_default_token_field_depends_on_the_endpoint() -> None:
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        for base_url in ("https://api.openai.com/v1", "http://localhost:11434/v1"):
            openai = OpenAIProvider(http, base_url=base_url, streaming=False, env={})
            await collect(openai.stream(HELLO, "m"))
    assert "max_completion_tokens" in seen[0]
    assert "max_tokens" not in seen[0]
    assert "max_tokens" in seen[1]


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 1000])
def test_sse_decoder_follows_the_format_however_the_bytes_are_cut(piece: int) -> None:
    """S-PROF-6: SSE lines end at CRLF, LF or CR, also where a read splits them."""
    stream = (
        b": a comment\r\n"
        b"event: update\n"
        b"data: first\n"
        b"data:second\n"
        b"id: 7\n"
        b"\n"
        b"event: lonely\n"
        b"\n"
        b"data: x\r\n"
        b"\r\n"
        b"data: caf\xc3\xa9\r"
        b"\r"
        b"data: tail"
    )
    decoder = SseDecoder()
    events = [e for i in range(0, len(stream), piece) for e in decoder.feed(stream[i : i + piece])]
    assert events == [
        SseEvent(event="update", data="first\nsecond"),
        SseEvent(event="message", data="x"),
        SseEvent(event="message", data="caf\u00e9"),
    ]
    assert decoder.end() == SseEvent(event="message", data="tail")
    assert decoder.end() is None
