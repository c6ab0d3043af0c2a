"""The model gateway: routing by model string, retries, Retry-After, concurrency, config."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from protocol._chat import ChatMessage, ModelRequest, ModelResult, ModelStreamDelta
from supervisor.providers import (
    GatewayConfig,
    ModelBadRequestError,
    ModelConnectionError,
    ModelEvent,
    ModelGateway,
    ModelRateLimitError,
    ModelResponseError,
    ModelStringError,
    TextSink,
    UnknownProviderError,
    parse_retry_after,
    retry_delay,
)
from tests.support.provider_server import CannedResponse, ProviderServer, unused_base_url

HELLO = (ChatMessage(role="user", content="hi"),)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def gateway_for(base_url: str, **settings: Any) -> ModelGateway:
    """A gateway whose openai and anthropic providers both talk to ``base_url``."""
    settings.setdefault("backoff_base_s", 0.0)
    config = GatewayConfig.model_validate(
        {
            "providers": {
                "openai": {"base_url": base_url + "/v1"},
                "anthropic": {"base_url": base_url},
            },
            **settings,
        }
    )
    return ModelGateway(config, env={}, rng=random.Random(7))


def openai_text(text: str) -> CannedResponse:
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return CannedResponse.sse([(None, c) for c in chunks] + [(None, "[DONE]")])


def anthropic_text(text: str) -> CannedResponse:
    return CannedResponse.sse(
        [
            ("message_start", {"type": "message_start", "message": {"model": "m", "usage": {}}}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


ANSWERS = {"openai": openai_text, "anthropic": anthropic_text}


def error_body(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "some_error", "message": message}}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_429_retry_after_is_honoured_then_success(
    server: ProviderServer, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue(
        CannedResponse.json(error_body("slow down"), status=429, headers={"retry-after": "0.05"}),
        ANSWERS[provider]("done"),
    )
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)

    # backoff_base_s=0: without honouring Retry-After the retry would be immediate.
    with caplog.at_level(logging.WARNING, logger="subvisor"):
        async with gateway_for(server.base_url, backoff_base_s=0.0) as gateway:
            result = await gateway.call(
                ModelRequest(model=f"{provider}:m", messages=HELLO), on_delta
            )
    assert result.text == "done"
    assert deltas == ["done"]
    assert len(server.requests) == 2
    # The one pause between the two attempts is the server's Retry-After.
    retries = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert len(retries) == 1 and retries[0].endswith("failed, trying again in 0.05 s")


async def test_500_is_retried(server: ProviderServer) -> None:
    server.enqueue(
        CannedResponse.json(error_body("boom"), status=500),
        CannedResponse.json(error_body("boom again"), status=503),
        openai_text("recovered"),
    )
    async with gateway_for(server.base_url) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == "recovered"
    assert len(server.requests) == 3


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_400_is_not_retried_and_surfaces_the_message(
    server: ProviderServer, provider: str
) -> None:
    server.enqueue(
        CannedResponse.json(error_body("messages: field required"), status=400),
        ANSWERS[provider]("never sent"),
    )
    async with gateway_for(server.base_url) as gateway:
        with pytest.raises(ModelBadRequestError) as caught:
            await gateway.call(ModelRequest(model=f"{provider}:some-model", messages=HELLO))
    error = caught.value
    assert len(server.requests) == 1
    assert error.status_code == 400
    assert error.provider == provider
    assert error.model == "some-model"
    assert error.provider_message == "messages: field required"
    assert "messages: field required" in str(error)


async def test_rate_limit_gives_up_after_max_retries(
    server: ProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each retry is announced as what happens (which attempt failed, when the next one
    goes); only the final error says that the gateway gave up."""
    server.enqueue(
        CannedResponse.json(error_body("busy"), status=429, headers={"retry-after": "0"}),
        CannedResponse.json(error_body("busy"), status=429, headers={"retry-after": "0.25"}),
        CannedResponse.json(error_body("busy"), status=429, headers={"retry-after": "0"}),
    )
    with caplog.at_level(logging.WARNING, logger="supervisor.providers"):
        async with gateway_for(server.base_url, max_retries=2) as gateway:
            with pytest.raises(ModelRateLimitError) as caught:
                await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert len(server.requests) == 3
    assert caught.value.attempts == 3
    assert "gave up after 3 attempts" in str(caught.value)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2
    assert warnings[0].endswith("; attempt 1 of 3 failed, trying again now")
    assert warnings[1].endswith("; attempt 2 of 3 failed, trying again in 0.25 s")
    assert all("busy" in w and "gave up" not in w for w in warnings)


async def test_connection_refused_is_a_clear_error_after_retries() -> None:
    base_url = unused_base_url()
    async with gateway_for(base_url, max_retries=2) as gateway:
        with pytest.raises(ModelConnectionError) as caught:
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    message = str(caught.value)
    assert f"{base_url}/v1/chat/completions" in message
    assert "connection failed" in message
    assert caught.value.attempts == 3
    assert "gave up after 3 attempts" in message


async def test_no_retry_once_text_reached_the_caller(server: ProviderServer) -> None:
    """A drop after a delta must not replay the answer: the caller would see text twice."""
    started = {"choices": [{"index": 0, "delta": {"content": "Half an ans"}}]}
    server.enqueue(
        CannedResponse.sse([(None, started)], drop_connection=True), openai_text("again")
    )
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)

    async with gateway_for(server.base_url) as gateway:
        with pytest.raises(ModelConnectionError) as caught:
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO), on_delta)
    assert deltas == ["Half an ans"]
    assert len(server.requests) == 1
    assert caught.value.attempts == 1


async def test_drop_before_any_text_is_retried(server: ProviderServer) -> None:
    role_only = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    server.enqueue(
        CannedResponse.sse([(None, role_only)], drop_connection=True), openai_text("whole")
    )
    async with gateway_for(server.base_url) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == "whole"
    assert len(server.requests) == 2


@pytest.mark.parametrize(("limit", "must_exceed"), [(2, 1), (6, 2)])
async def test_concurrency_limit_bounds_requests_in_flight(
    server: ProviderServer, limit: int, must_exceed: int
) -> None:
    """Six calls at once: the server never sees more than ``limit`` of them together."""
    calls = 6
    for _ in range(calls):
        streamed = openai_text("ok")
        server.enqueue(
            CannedResponse(headers=streamed.headers, chunks=streamed.chunks, delay_s=0.1)
        )
    results: list[ModelResult] = []
    async with gateway_for(server.base_url, max_concurrency=limit) as gateway:

        async def one_call() -> None:
            results.append(await gateway.call(ModelRequest(model="openai:m", messages=HELLO)))

        async with trio.open_nursery() as nursery:
            for _ in range(calls):
                nursery.start_soon(one_call)
    assert len(results) == calls
    assert server.max_in_flight <= limit
    # Overlap really happens (so the count can catch a missing limit: 6 > 2).
    assert server.max_in_flight > must_exceed


def _slow_text(server: ProviderServer, calls: int) -> None:
    for _ in range(calls):
        streamed = openai_text("ok")
        server.enqueue(
            CannedResponse(headers=streamed.headers, chunks=streamed.chunks, delay_s=0.1)
        )


async def test_a_provider_s_own_limit_bounds_its_calls_alone(server: ProviderServer) -> None:
    """A provider's ``max_concurrency`` 2: six calls to it reach its server at most two at a
    time, and those waiting are told so; six calls at once to another provider, beside them,
    are bound by the gateway's limit only."""
    with ProviderServer() as other:
        _slow_text(server, 6)
        _slow_text(other, 6)
        config = GatewayConfig.model_validate(
            {
                "providers": {
                    "local": {
                        "api": "openai",
                        "base_url": server.base_url + "/v1",
                        "max_concurrency": 2,
                    },
                    "openai": {"base_url": other.base_url + "/v1"},
                },
                "max_concurrency": 16,
            }
        )
        waited: list[bool] = []
        async with ModelGateway(config, env={}, rng=random.Random(7)) as gateway:

            async def one_call(model: str) -> None:
                request = ModelRequest(model=model, messages=HELLO)
                result = await gateway.call(request, on_wait=waited.append)
                assert result.text == "ok"

            async with trio.open_nursery() as nursery:
                for _ in range(6):
                    nursery.start_soon(one_call, "local:m")
                    nursery.start_soon(one_call, "openai:m")
    assert len(server.requests) == len(other.requests) == 6
    assert server.max_in_flight == 2
    assert other.max_in_flight > 2
    # Four local calls waited for a slot, each told once it waits and once it has one.
    assert waited.count(True) == waited.count(False) == 4


async def test_stream_yields_deltas_then_one_result(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("agents:\n  root:\n    - text: one two three four\n")
    events: list[ModelStreamDelta | ModelResult] = []
    async with ModelGateway(env={}) as gateway:
        request = ModelRequest(model=f"scripted:{scenario}")
        async with aclosing(gateway.stream(request)) as stream:
            async for event in stream:
                events.append(event)
    *deltas, result = events
    assert isinstance(result, ModelResult)
    assert all(isinstance(d, ModelStreamDelta) for d in deltas)
    assert "".join(d.text for d in deltas if isinstance(d, ModelStreamDelta)) == result.text
    assert result.text == "one two three four"


async def test_effort_from_model_string_unless_request_sets_one_s_prof_6(
    server: ProviderServer,
) -> None:
    server.enqueue(openai_text("a"), openai_text("b"))
    async with gateway_for(server.base_url) as gateway:
        await gateway.call(ModelRequest(model="openai:o3$high", messages=HELLO))
        await gateway.call(ModelRequest(model="openai:o3$high", messages=HELLO, effort="low"))
    first, second = (sent.json() for sent in server.requests)
    assert (first["model"], first["reasoning_effort"]) == ("o3", "high")
    assert second["reasoning_effort"] == "low"


async def test_unknown_provider_lists_the_known_ones() -> None:
    config = GatewayConfig.model_validate(
        {"providers": {"ollama": {"api": "openai", "base_url": "http://127.0.0.1:1/v1"}}}
    )
    async with ModelGateway(config, env={}) as gateway:
        with pytest.raises(UnknownProviderError) as caught:
            await gateway.call(ModelRequest(model="mistral:large"))
    message = str(caught.value)
    assert "'mistral'" in message
    assert "anthropic, ollama, openai, scripted" in message


async def test_inherit_alias_cannot_be_called_s_model_1() -> None:
    async with ModelGateway(env={}) as gateway:
        with pytest.raises(ModelStringError, match="resolve it to a concrete provider:model"):
            await gateway.call(ModelRequest(model="sonnet"))


async def test_configured_provider_uses_its_key_and_env_variable(server: ProviderServer) -> None:
    server.enqueue(openai_text("a"), openai_text("b"))
    config = GatewayConfig.model_validate(
        {
            "providers": {
                "local-llm": {"api": "openai", "base_url": server.base_url + "/v1"},
                "openai": {"base_url": server.base_url + "/v1", "api_key": "sk-config"},
            }
        }
    )
    env = {"LOCAL_LLM_API_KEY": "sk-local", "OPENAI_API_KEY": "sk-env"}
    async with ModelGateway(config, env=env) as gateway:
        await gateway.call(ModelRequest(model="local-llm:qwen", messages=HELLO))
        await gateway.call(ModelRequest(model="openai:gpt", messages=HELLO))
    local, openai = server.requests
    assert local.headers["authorization"] == "Bearer sk-local"
    assert openai.headers["authorization"] == "Bearer sk-config"
    assert "sk-config" not in repr(config)


async def test_injected_transport_timeouts_are_retried() -> None:
    attempts: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        if len(attempts) == 1:
            raise httpx.ReadTimeout("no bytes for a while", request=request)
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "late"}, "finish_reason": "stop"}]}
        )

    config = GatewayConfig.model_validate(
        {"providers": {"openai": {"streaming": False}}, "backoff_base_s": 0}
    )
    async with ModelGateway(config, transport=httpx.MockTransport(answer), env={}) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == "late"
    assert len(attempts) == 2
    assert str(attempts[0].url) == "https://api.openai.com/v1/chat/completions"


class _SilentProvider:
    """A provider that breaks the contract: it ends without a result."""

    async def stream(
        self, request: ModelRequest, model: str, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        yield ModelStreamDelta(text="only a delta")


async def test_provider_stream_without_result_is_a_response_error() -> None:
    async with ModelGateway(env={}, providers={"silent": _SilentProvider()}) as gateway:
        assert "silent" in gateway.known_providers
        with pytest.raises(ModelResponseError, match="ended without a result"):
            await gateway.call(ModelRequest(model="silent:m"))


async def test_closed_gateway_refuses_calls() -> None:
    gateway = ModelGateway(env={})
    await gateway.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await gateway.call(ModelRequest(model="openai:m"))


@pytest.mark.parametrize(
    "providers",
    [{"scripted": {"api": "openai"}}, {"Bad Name": {"api": "openai"}}, {"x": {"api": "grpc"}}],
)
def test_bad_provider_config_is_rejected(providers: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GatewayConfig.model_validate({"providers": providers})


def test_default_config_has_both_http_providers() -> None:
    config = GatewayConfig()
    assert config.providers["openai"].api == "openai"
    assert config.providers["anthropic"].api == "anthropic"
    assert (config.max_concurrency, config.max_retries) == (16, 4)


def test_retry_after_seconds_date_and_milliseconds() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after({"retry-after": "2.5"}, now) == 2.5
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}, now) == 30.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now) == 0.0
    assert parse_retry_after({"retry-after-ms": "150", "retry-after": "9"}, now) == 0.15
    assert parse_retry_after({"retry-after": "soon"}, now) is None
    assert parse_retry_after({}, now) is None


@given(
    attempt=st.integers(min_value=1, max_value=30),
    retry_after=st.none() | st.floats(min_value=0, max_value=1e6),
    seed=st.integers(),
)
def test_retry_delay_is_bounded_and_honours_retry_after(
    attempt: int, retry_after: float | None, seed: int
) -> None:
    config = GatewayConfig(backoff_base_s=0.5, backoff_max_s=8.0, retry_after_max_s=60.0)
    delay = retry_delay(config, attempt, retry_after, random.Random(seed))
    if retry_after is not None:
        assert delay == min(retry_after, 60.0)
    else:
        ceiling = min(8.0, 0.5 * 2 ** (attempt - 1))
        assert ceiling / 2 <= delay <= ceiling
