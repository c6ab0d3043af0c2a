"""What a hostile or broken provider sends is read with bounds (S-SEC-8, S-SEC-1).

Each test plays the provider on a real local HTTP server and asserts the
property itself: memory held (tracemalloc's peak, which counts the server's
thread too), the error's one line, what reached the caller.
"""

from __future__ import annotations

import gzip
import json
import random
import socket
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from protocol._chat import ChatMessage, ModelRequest
from supervisor.providers import (
    GatewayConfig,
    ModelBadRequestError,
    ModelConnectionError,
    ModelGateway,
    ModelProviderError,
    ModelResponseError,
    ModelServerError,
)
from supervisor.providers._sse import SseDecoder, SseEvent, SseTooLargeError
from tests.support.provider_server import CannedResponse, ProviderServer, sse_bytes

HELLO = (ChatMessage(role="user", content="hi"),)
MIB = 1024 * 1024


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def gateway_for(server: ProviderServer, **openai: Any) -> ModelGateway:
    config = GatewayConfig.model_validate(
        {
            "max_retries": 0,
            "providers": {"openai": {"base_url": server.base_url + "/v1", **openai}},
        }
    )
    return ModelGateway(config, env={}, rng=random.Random(7))


def gzip_of(prefix: bytes, filler: bytes, size: int, suffix: bytes = b"") -> bytes:
    """gzip of ``prefix``, ``filler`` repeated to ``size`` bytes, then ``suffix``."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = filler * (MIB // len(filler))
    parts = [packer.compress(prefix)]
    parts += [packer.compress(block) for _ in range(size // MIB)]
    return b"".join([*parts, packer.compress(suffix), packer.flush()])


async def call_measured(gateway: ModelGateway, request: ModelRequest) -> tuple[Any, int]:
    """The call's result or error, and the most memory Python held meanwhile."""
    tracemalloc.start()
    try:
        async with gateway:
            try:
                outcome: Any = await gateway.call(request)
            except Exception as exc:
                outcome = exc
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_s_sec_8_gzip_bomb_answer_fails_at_8_mib_holding_little(
    server: ProviderServer,
) -> None:
    """A 64 MiB answer sent as 64 KiB of gzip: one line, memory stays far under 64 MiB."""
    bomb = gzip_of(b'{"choices":[{"message":{"content":"', b"a", 64 * MIB, b'"}}]}')
    assert len(bomb) < MIB
    server.enqueue(
        CannedResponse(
            body=bomb, headers={"content-type": "application/json", "content-encoding": "gzip"}
        )
    )
    outcome, peak = await call_measured(
        gateway_for(server, streaming=False), ModelRequest(model="openai:m", messages=HELLO)
    )
    assert isinstance(outcome, ModelResponseError)
    assert "the provider's answer is over 8 MiB after decoding" in str(outcome)
    assert "\n" not in str(outcome)
    assert peak < 24 * MIB, peak
    # The gateway asks for no compression; the bound holds when it comes anyway.
    assert server.requests[0].headers["accept-encoding"] == "identity"


async def test_s_sec_8_gzip_bomb_error_body_is_cut_at_64_kib(server: ProviderServer) -> None:
    """A 500 whose gzip body unpacks to 64 MiB: its message is read from the first 64 KiB."""
    bomb = gzip_of(b'{"error": {"message": "overloaded', b" ", 64 * MIB, b'"}}')
    server.enqueue(
        CannedResponse(
            status=500,
            body=bomb,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
    )
    outcome, peak = await call_measured(
        gateway_for(server, streaming=False), ModelRequest(model="openai:m", messages=HELLO)
    )
    assert isinstance(outcome, ModelServerError)
    assert "HTTP 500" in str(outcome) and "\n" not in str(outcome)
    assert outcome.provider_message.startswith('{"error": {"message": "overloaded')
    assert peak < 24 * MIB, peak


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate", "gzip, deflate"])
async def test_s_sec_8_a_compressed_answer_is_read_whole(
    server: ProviderServer, streaming: bool, coding: str
) -> None:
    """A compressing proxy's answer (gzip, deflate with or without its header, a chain) is read,
    streamed (the gateway's fed reads too) or not."""
    if streaming:
        chunk = {"choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": "stop"}]}
        plain = sse_bytes(None, chunk) + sse_bytes(None, "[DONE]")
        kind = "text/event-stream"
    else:
        plain = json.dumps(
            {"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}
        ).encode()
        kind = "application/json"
    body = plain
    for step in coding.split(", "):
        if step == "gzip":
            body = gzip.compress(body)
        elif step == "deflate":
            body = zlib.compress(body)
        else:
            packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
            body = packer.compress(body) + packer.flush()
    encoding = "deflate" if coding == "raw-deflate" else coding
    server.enqueue(
        CannedResponse(body=body, headers={"content-type": kind, "content-encoding": encoding})
    )
    async with gateway_for(server, streaming=streaming) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == "hello"


async def test_s_sec_8_a_coding_read_unbounded_is_refused(server: ProviderServer) -> None:
    """br (or zstd) would be unpacked a whole read at once: refused in one line saying why."""
    server.enqueue(
        CannedResponse(
            body=b"\x8b\x00\x80hello\x03",
            headers={"content-type": "application/json", "content-encoding": "br"},
        )
    )
    async with gateway_for(server, streaming=False) as gateway:
        with pytest.raises(ModelResponseError) as caught:
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    message = str(caught.value)
    assert "Content-Encoding 'br', which subvisor does not decode" in message
    assert "\n" not in message


async def test_s_sec_8_an_sse_line_without_end_fails_at_8_mib(server: ProviderServer) -> None:
    """A data line sent 1 KiB at a time and never ended: one line at 8 MiB, memory bounded."""
    start = b'data: {"choices":[{"index":0,"delta":{"content":"'
    server.enqueue(
        CannedResponse(
            headers={"content-type": "text/event-stream"},
            chunks=(start, *([b"a" * 1024] * (9 * 1024))),
        )
    )
    outcome, peak = await call_measured(
        gateway_for(server), ModelRequest(model="openai:m", messages=HELLO)
    )
    assert isinstance(outcome, ModelResponseError), outcome
    assert "has an SSE line over 8 MiB" in str(outcome) and "not retried" in str(outcome)
    assert "\n" not in str(outcome)
    assert peak < 40 * MIB, peak


def endless_stream(provider: str, piece: bytes, count: int) -> CannedResponse:
    """A stream that opens an answer, then sends ``piece`` ``count`` times, never its last word."""
    if provider == "anthropic":
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
        opening = sse_bytes("message_start", {"type": "message_start", "message": {"model": "m"}})
        opening += sse_bytes("content_block_start", block)
        return CannedResponse(
            headers={"content-type": "text/event-stream"}, chunks=(opening, *([piece] * count))
        )
    return CannedResponse(headers={"content-type": "text/event-stream"}, chunks=(piece,) * count)


def text_piece(provider: str, text: str) -> bytes:
    """One event of streamed text."""
    if provider == "anthropic":
        delta = {"type": "text_delta", "text": text}
        return sse_bytes(
            "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        )
    return sse_bytes(None, {"choices": [{"index": 0, "delta": {"content": text}}]})


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_s_sec_8_a_stream_of_text_without_end_fails_at_8_mib_holding_little(
    server: ProviderServer, provider: str
) -> None:
    """96 MiB of text in 64 KiB deltas: one line once the answer passes 8 MiB (what a frame
    carries to a worker), memory far under what was sent."""
    server.enqueue(endless_stream(provider, text_piece(provider, "a" * (64 * 1024)), 96 * 16))
    outcome, peak = await call_measured(
        usage_gateway(server, provider, True), ModelRequest(model=f"{provider}:m", messages=HELLO)
    )
    assert isinstance(outcome, ModelResponseError), outcome
    message = str(outcome)
    assert "holds more than 8 MiB of text and tool input" in message, message
    assert "not retried" in message and "\n" not in message
    assert peak < 40 * MIB, peak


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_s_sec_8_a_stream_that_never_says_its_last_word_fails_at_64_mib(
    server: ProviderServer, provider: str
) -> None:
    """Keep-alive comments without end, 72 MiB of them: one line at 64 MiB, not a read of
    everything the provider cares to send until call_timeout_s."""
    server.enqueue(endless_stream(provider, b": " + b"p" * (64 * 1024) + b"\n\n", 72 * 16))
    outcome, peak = await call_measured(
        usage_gateway(server, provider, True), ModelRequest(model=f"{provider}:m", messages=HELLO)
    )
    assert isinstance(outcome, ModelResponseError), outcome
    message = str(outcome)
    assert "is over 64 MiB without its last word" in message, message
    assert "\n" not in message
    assert peak < 24 * MIB, peak


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_s_sec_8_a_stream_may_open_at_most_1024_blocks_or_tool_calls(
    server: ProviderServer, provider: str
) -> None:
    """Each event a new tool call (a new content block): one line past 1024, and 1024 pass."""
    for parts in (1024, 1025):
        if provider == "anthropic":
            events: list[tuple[str | None, Any]] = [
                ("message_start", {"type": "message_start", "message": {"model": "m"}})
            ]
            for index in range(parts):
                block = {"type": "tool_use", "id": f"t{index}", "name": "Read", "input": {}}
                events.append(
                    (
                        "content_block_start",
                        {"type": "content_block_start", "index": index, "content_block": block},
                    )
                )
            events += [("message_stop", {"type": "message_stop"})]
        else:
            events = []
            for index in range(parts):
                function = {"name": "Read", "arguments": "{}"}
                call = {"index": index, "id": f"t{index}", "function": function}
                events.append((None, {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}))
            last = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
            events += [(None, {"choices": [last]}), (None, "[DONE]")]
        server.enqueue(CannedResponse.sse(events))
    async with usage_gateway(server, provider, True) as gateway:
        request = ModelRequest(model=f"{provider}:m", messages=HELLO)
        assert len((await gateway.call(request)).tool_calls) == 1024
        with pytest.raises(ModelResponseError) as caught:
            await gateway.call(request)
    message = str(caught.value)
    assert "holds more than 1024 content blocks or tool calls" in message, message
    assert "\n" not in message


def test_s_sec_8_sse_decoder_joins_a_long_line_once_and_caps_lines_and_events() -> None:
    """A 4 MiB line cut in 1 KiB reads is one event; a line or an event over 8 MiB raises."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: ") == []
    for _ in range(4 * 1024):
        assert decoder.feed(b"b" * 1024) == []
    assert decoder.feed(b"\r") == []
    [event] = decoder.feed(b"\n\ndata: next")
    assert event.data == "b" * (4 * MIB)
    assert decoder.end() == SseEvent("message", "next")

    long_line = SseDecoder()
    long_line.feed(b"data: ")
    with pytest.raises(SseTooLargeError, match="an SSE line over 8 MiB"):
        for _ in range(9):
            long_line.feed(b"c" * MIB)

    many_lines = SseDecoder()
    with pytest.raises(SseTooLargeError, match="an SSE event over 8 MiB"):
        for _ in range(9):
            many_lines.feed(b"data: " + b"d" * MIB + b"\n")


def usage_answer(provider: str, streaming: bool, field: str, value: str) -> CannedResponse:
    """An answer whose usage ``field`` is the JSON text ``value``."""
    usage = {field: "VALUE"}
    text = {"type": "text", "text": "hi"}
    if provider == "anthropic":
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": {"model": "m", "usage": usage}}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": text},
            ),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        document: Any = {"model": "m", "content": [text], "stop_reason": "end_turn", "usage": usage}
    else:
        chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}
        events = [(None, chunk), (None, {"choices": [], "usage": usage}), (None, "[DONE]")]
        choice = {"message": {"content": "hi"}, "finish_reason": "stop"}
        document = {"choices": [choice], "usage": usage}

    def with_value(data: Any) -> Any:
        return data if isinstance(data, str) else json.dumps(data).replace('"VALUE"', value)

    if streaming:
        return CannedResponse.sse([(name, with_value(data)) for name, data in events])
    body = with_value(document).encode()
    return CannedResponse(body=body, headers={"content-type": "application/json"})


def usage_gateway(server: ProviderServer, provider: str, streaming: bool) -> ModelGateway:
    base = server.base_url + ("/v1" if provider == "openai" else "")
    config = GatewayConfig.model_validate(
        {"max_retries": 0, "providers": {provider: {"base_url": base, "streaming": streaming}}}
    )
    return ModelGateway(config, env={}, rng=random.Random(7))


ANSWERS = [("openai", True), ("openai", False), ("anthropic", True), ("anthropic", False)]


@pytest.mark.parametrize(("provider", "streaming"), ANSWERS)
@pytest.mark.parametrize(
    "value",
    [
        "1e400",
        "Infinity",
        "NaN",
        "-5",
        "100000000000000000000000000000",
        "9007199254740992",
        "1.5",
        "true",
        '"12"',
    ],
)
async def test_s_sec_8_a_token_count_that_is_no_count_is_a_response_error(
    server: ProviderServer, provider: str, streaming: bool, value: str
) -> None:
    """Huge, infinite, negative or non-integer usage: one line naming the field, no total moves."""
    field = "completion_tokens" if provider == "openai" else "output_tokens"
    server.enqueue(usage_answer(provider, streaming, field, value))
    async with usage_gateway(server, provider, streaming) as gateway:
        with pytest.raises(ModelResponseError) as caught:
            await gateway.call(ModelRequest(model=f"{provider}:m", messages=HELLO))
    message = str(caught.value)
    assert f"usage field '{field}' is " in message and "not a token count" in message
    assert "\n" not in message


@pytest.mark.parametrize(("provider", "streaming"), ANSWERS)
async def test_s_sec_8_token_counts_up_to_2_53_are_taken(
    server: ProviderServer, provider: str, streaming: bool
) -> None:
    """The control: an integer count (or one written as 7.0) is the usage."""
    field = "completion_tokens" if provider == "openai" else "output_tokens"
    server.enqueue(usage_answer(provider, streaming, field, "9007199254740991"))
    server.enqueue(usage_answer(provider, streaming, field, "7.0"))
    async with usage_gateway(server, provider, streaming) as gateway:
        request = ModelRequest(model=f"{provider}:m", messages=HELLO)
        assert (await gateway.call(request)).usage.output_tokens == 2**53 - 1
        assert (await gateway.call(request)).usage.output_tokens == 7


ECHOING_KEY = "k3y-not-shaped-like-any-0123456789"


@pytest.mark.parametrize("answer", ["401", "500", "200 not json", "stream error event"])
async def test_s_sec_1_an_error_echoing_the_key_or_escapes_shows_neither(
    server: ProviderServer, answer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The key (configured, or any Bearer or sk- token) is *** and escapes are escaped in the
    error, its provider_message and the retry warning, which reach the store and the root."""
    said = (
        f"bad key {ECHOING_KEY}, header Authorization: Bearer {ECHOING_KEY}x, "
        "other sk-proj-abcdef123456 \x1b]52;c;SGVsbG8=\x07\x1b[2J\nforged line"
    )
    document = {"error": {"message": said}}
    if answer == "stream error event":
        canned = CannedResponse.sse([(None, document)])
    elif answer == "200 not json":
        canned = CannedResponse(body=said.encode(), headers={"content-type": "text/plain"})
    else:
        canned = CannedResponse.json(document, status=int(answer))
    server.enqueue(canned, canned)
    config = GatewayConfig.model_validate(
        {
            "max_retries": 1,
            "backoff_base_s": 0.0,
            "providers": {
                "openai": {
                    "base_url": server.base_url + "/v1",
                    "api_key": ECHOING_KEY,
                    "streaming": answer == "stream error event",
                },
            },
        }
    )
    async with ModelGateway(config, env={}, rng=random.Random(7)) as gateway:
        with pytest.raises(ModelProviderError) as caught:
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    shown = [str(caught.value), caught.value.provider_message or ""]
    shown += [record.getMessage() for record in caplog.records]
    for text in shown:
        assert "k3y-not" not in text and "sk-proj" not in text, text
        assert "\x1b" not in text and "\x07" not in text and "\n" not in text, text
    assert "bad key ***" in str(caught.value)
    assert "\\x1b]52" in str(caught.value)
    assert server.requests[0].headers["authorization"] == f"Bearer {ECHOING_KEY}"


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_s_sec_1_a_redirect_is_not_followed_and_says_where_it_pointed(
    server: ProviderServer, status: int
) -> None:
    """A 3xx is one line naming the Location and the setting to change; nothing is sent there."""
    with ProviderServer() as elsewhere:
        server.enqueue(
            CannedResponse(status=status, headers={"location": elsewhere.base_url + "/steal"})
        )
        async with gateway_for(server, streaming=False, api_key="k3y") as gateway:
            with pytest.raises(ModelBadRequestError) as caught:
                await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        assert elsewhere.requests == []
    message = str(caught.value)
    assert f"HTTP {status}" in message and f"redirects to '{elsewhere.base_url}/steal'" in message
    assert "redirects are not followed" in message and "providers.openai.base_url" in message
    assert len(server.requests) == 1 and "\n" not in message


class TricklingServer:
    """A provider that answers 200 and then sends an SSE comment every 0.1 s, for 10 s."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.requests += 1
            threading.Thread(target=self._trickle, args=(connection,), daemon=True).start()

    def _trickle(self, connection: socket.socket) -> None:
        with connection:
            connection.recv(65536)
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            connection.sendall(head + b"transfer-encoding: chunked\r\n\r\n")
            for _ in range(100):
                if self._stop.wait(0.1):
                    return
                try:
                    connection.sendall(b"8\r\n: ping\n\n\r\n")
                except OSError:
                    return

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()


async def test_s_sec_8_a_trickling_provider_is_ended_by_call_timeout_and_frees_its_slot(
    server: ProviderServer,
) -> None:
    """Bytes every 0.1 s keep the read timeout from firing: call_timeout_s ends the call in
    one line naming the setting, not retried, and the one model slot goes to the next call."""
    trickling = TricklingServer()
    chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}
    server.enqueue(CannedResponse.sse([(None, chunk), (None, "[DONE]")]))
    config = GatewayConfig.model_validate(
        {
            "max_retries": 2,
            "backoff_base_s": 0.0,
            "max_concurrency": 1,
            "providers": {
                "openai": {
                    "base_url": trickling.base_url + "/v1",
                    "read_timeout_s": 5,
                    "call_timeout_s": 0.5,
                },
                "healthy": {"api": "openai", "base_url": server.base_url + "/v1"},
            },
        }
    )
    outcomes: dict[str, Any] = {}
    try:
        async with ModelGateway(config, env={}, rng=random.Random(7)) as gateway:

            async def call(model: str) -> None:
                try:
                    outcomes[model] = await gateway.call(ModelRequest(model=model, messages=HELLO))
                except ModelProviderError as exc:
                    outcomes[model] = exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, "openai:m")
                await trio.sleep(0.05)
                nursery.start_soon(call, "healthy:m")
    finally:
        trickling.close()
    error = outcomes["openai:m"]
    assert isinstance(error, ModelConnectionError), error
    message = str(error)
    assert "was still answering after 0.5 s" in message
    assert "raise providers.openai.call_timeout_s" in message and "\n" not in message
    assert trickling.requests == 1
    assert outcomes["healthy:m"].text == "ok"
