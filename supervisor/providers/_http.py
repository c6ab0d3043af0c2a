"""HTTP plumbing shared by the HTTP providers: one POST, errors mapped to our types.

Invariant: no string parsed from a provider's JSON holds a lone surrogate.
JSON may escape one (``"\\udcff"``, or half of an emoji's pair), which
Python decodes to a ``str`` that no UTF-8 encoder accepts: the store, the
protocol and the next request would fail on it, far from where it came
from. Each is replaced by U+FFFD as it is parsed; a whole escaped pair is
one character already and stays.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from contextlib import aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, cast

import httpx
import trio

from protocol import ModelResult, ModelStreamDelta

from ._base import ModelEvent, TextSink
from ._errors import (
    ModelAuthError,
    ModelBadRequestError,
    ModelConnectionError,
    ModelProviderError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
)
from ._sse import SseDecoder, SseEvent
from ._transport import BODY_EXTENSION, FeedableBody

__all__ = [
    "MALFORMED_ERRORS",
    "CallOrigin",
    "StreamAssembler",
    "complete_once",
    "error_from_status",
    "malformed_as_response_error",
    "malformed_response",
    "parse_json_object",
    "parse_retry_after",
    "post_json",
    "provider_message_from_body",
    "stream_sse_answer",
]

_MAX_MESSAGE_CHARS = 500
#: How long what follows a stream's last word is read, so its connection can be reused.
_DRAIN_S = 1.0
# A JSON escape of a surrogate: only where one occurs can a lone one be decoded.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The C scanner behind ``json.loads``, called directly: a streamed chunk is
# one object with nothing around it, and ``loads`` would spend more in its
# three Python layers (whitespace matches, the end check) than in parsing.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class CallOrigin:
    """Who is being called, for error messages.

    ``key_hint`` tells the user where a credential goes, e.g. "set
    OPENAI_API_KEY or providers.openai.api_key in the gateway config";
    ``has_key`` says whether one was configured at all.
    """

    provider: str
    model: str
    url: str
    key_hint: str
    has_key: bool

    @property
    def label(self) -> str:
        """``provider model 'name'``, the start of every error message."""
        return f"{self.provider} model {self.model!r}"


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def provider_message_from_body(body: bytes) -> str:
    """The provider's own error message in a response body, else the body's text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        document = _loads(text)
    except (ValueError, RecursionError):
        return _shorten(text)
    # OpenAI and Anthropic: {"error": {"message": ...}}; Ollama: {"error": "..."};
    # vLLM and other FastAPI servers: {"detail": ...} or {"message": ...}.
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _shorten(error["message"])
        for candidate in (error, document.get("message"), document.get("detail")):
            if isinstance(candidate, str):
                return _shorten(candidate)
    return _shorten(text)


def _loads(text: str) -> Any:
    """``json.loads``, every lone surrogate of the result replaced by U+FFFD."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        # Whitespace around the value, or no JSON at all: ``loads`` says which.
        value = json.loads(text)
    return _replace_surrogates(value) if _SURROGATE_ESCAPE.search(text) else value


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


def error_from_status(
    status: int,
    provider_message: str,
    origin: CallOrigin,
    *,
    retry_after: float | None = None,
    in_stream: bool = False,
) -> ModelProviderError:
    """The typed error for an HTTP error status.

    ``in_stream`` marks an error event inside a 2xx stream; ``status`` is then
    the HTTP status that event stands for.
    """
    said = f": {provider_message}" if provider_message else ""
    where = "error event in the stream" if in_stream else f"HTTP {status}"
    head = f"{origin.label}: {where}{said}"
    fields: dict[str, Any] = {
        "provider": origin.provider,
        "model": origin.model,
        "status_code": status,
        "provider_message": provider_message,
        "retry_after": retry_after,
    }
    if status in (401, 403):
        what = "the API key was rejected" if origin.has_key else "no API key is configured"
        return ModelAuthError(f"{head} ({what}: {origin.key_hint})", **fields)
    if status == 429:
        return ModelRateLimitError(f"{head} (rate limited)", **fields)
    if status >= 500:
        return ModelServerError(f"{head} (provider failure)", **fields)
    return ModelBadRequestError(f"{head} (request refused; not retried)", **fields)


def parse_json_object(text: str, what: str, origin: CallOrigin) -> dict[str, Any]:
    """Parse ``text`` as a JSON object or raise ``ModelResponseError`` naming ``what``."""
    try:
        value = _loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise ModelResponseError(
            f"{origin.label}: {what} is not a JSON object: {_shorten(text)!r}",
            provider=origin.provider,
            model=origin.model,
        )
    return value


#: What reading a document of an unexpected shape raises.
MALFORMED_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


def malformed_response(origin: CallOrigin, what: str, exc: Exception) -> ModelResponseError:
    """The ``ModelResponseError`` for a document whose reading raised ``exc``."""
    return ModelResponseError(
        f"{origin.label}: {what} has an unexpected shape: {exc}",
        provider=origin.provider,
        model=origin.model,
    )


@contextmanager
def malformed_as_response_error(origin: CallOrigin, what: str) -> Iterator[None]:
    """Report a document of an unexpected shape as ``ModelResponseError``, not a crash."""
    try:
        yield
    except MALFORMED_ERRORS as exc:
        raise malformed_response(origin, what, exc) from exc


@asynccontextmanager
async def post_json(
    client: httpx.AsyncClient,
    origin: CallOrigin,
    body: dict[str, Any],
    *,
    headers: Mapping[str, str],
    timeouts: httpx.Timeout,
) -> AsyncIterator[httpx.Response]:
    """POST ``body`` to ``origin.url`` and yield the streaming 2xx response.

    Error statuses and transport failures (also those while the caller reads
    the body) are raised as ``ModelProviderError`` subclasses.
    """
    try:
        async with client.stream(
            "POST", origin.url, json=body, headers=dict(headers), timeout=timeouts
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise error_from_status(
                    response.status_code,
                    provider_message_from_body(response.content),
                    origin,
                    retry_after=parse_retry_after(response.headers),
                )
            yield response
    except httpx.TransportError as exc:
        raise _connection_error(exc, origin) from exc


def _connection_error(exc: httpx.TransportError, origin: CallOrigin) -> ModelConnectionError:
    # A bad URL scheme or proxy setting will not fix itself; everything else
    # (refused, reset, dropped mid-body, timeouts) may.
    retryable = not isinstance(exc, httpx.UnsupportedProtocol | httpx.ProxyError)
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
    detail = str(exc) or type(exc).__name__
    return ModelConnectionError(
        f"{origin.label}: {kind} talking to {origin.url}: {detail}",
        provider=origin.provider,
        model=origin.model,
        retryable=retryable,
    )


def _shorten(text: str) -> str:
    if len(text) <= _MAX_MESSAGE_CHARS:
        return text
    return text[: _MAX_MESSAGE_CHARS - 3] + "..."


async def complete_once(
    client: httpx.AsyncClient,
    origin: CallOrigin,
    body: dict[str, Any],
    *,
    headers: Mapping[str, str],
    timeouts: httpx.Timeout,
    parse: Callable[[dict[str, Any], CallOrigin], ModelResult],
) -> AsyncIterator[ModelEvent]:
    """A non-streaming call: one JSON answer, parsed by ``parse``, as the stream's events."""
    async with post_json(client, origin, body, headers=headers, timeouts=timeouts) as response:
        raw = (await response.aread()).decode("utf-8", errors="replace")
    document = parse_json_object(raw, "the response", origin)
    with malformed_as_response_error(origin, "the response"):
        result = parse(document, origin)
    if result.text:
        yield ModelStreamDelta(text=result.text)
    yield result


class StreamAssembler(Protocol):
    """A provider's reading of its SSE stream: events in, one ``ModelResult`` out."""

    @property
    def finished(self) -> bool:
        """The provider said its last word (``[DONE]``, ``message_stop``): stop reading."""
        ...

    @property
    def unfinished(self) -> str | None:
        """Why the stream, ended now, would be incomplete; None when it is whole."""
        ...

    def feed(self, event: SseEvent, origin: CallOrigin) -> str:
        """Fold one event in; return its text delta ("" for none)."""
        ...

    def result(self, origin: CallOrigin) -> ModelResult:
        """The complete answer, once the stream is whole."""
        ...


async def stream_sse_answer(
    client: httpx.AsyncClient,
    origin: CallOrigin,
    body: dict[str, Any],
    *,
    headers: Mapping[str, str],
    timeouts: httpx.Timeout,
    assembler: StreamAssembler,
    on_text: TextSink | None = None,
) -> AsyncIterator[ModelEvent]:
    """A streaming call: text deltas as they arrive, then the ``ModelResult``.

    The body is decoded a network read at a time: one delta per read holds
    the text of every event in it. With ``on_text`` the deltas go to it
    instead, synchronously, and only the result is yielded; where the
    transport can feed the body (``GatewayTransport``), the events are then
    parsed as each read arrives, in the transport's reader, and this task
    wakes once, at the end. Reading stops at the provider's last word; what
    follows it is drained for at most a second (so the connection can be
    reused). A stream that ends before the answer is whole is a
    ``ModelConnectionError`` that says what was missing.
    """
    decoder = SseDecoder()
    async with (
        post_json(client, origin, body, headers=headers, timeouts=timeouts) as response,
        aclosing(_body_reads(response)) as reads,
    ):
        feedable = response.extensions.get(BODY_EXTENSION) if on_text is not None else None
        if feedable is not None:
            assert on_text is not None

            def sink(payload: bytes) -> bool:
                text = _fold(decoder.feed(payload), assembler, origin)
                if text:
                    on_text(text)
                return assembler.finished

            await cast(FeedableBody, feedable).feed(sink)
        else:
            async for data in reads:
                text = _fold(decoder.feed(data), assembler, origin)
                if text:
                    if on_text is not None:
                        on_text(text)
                    else:
                        yield ModelStreamDelta(text=text)
                if assembler.finished:
                    break
        if assembler.finished:
            with trio.move_on_after(_DRAIN_S):
                async for _ in reads:
                    pass
        else:
            last = decoder.end()
            text = _fold([last] if last is not None else [], assembler, origin)
            if text and on_text is not None:
                on_text(text)
            elif text:
                yield ModelStreamDelta(text=text)
    missing = assembler.unfinished
    if missing is not None:
        raise ModelConnectionError(
            f"{origin.label}: the stream from {origin.url} ended before {missing}",
            provider=origin.provider,
            model=origin.model,
        )
    with malformed_as_response_error(origin, "the streamed answer"):
        result = assembler.result(origin)
    yield result


def _body_reads(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    # Without a content coding the raw reads are the body: skip httpx's decoder layer.
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    reads = response.aiter_raw() if coding == "identity" else response.aiter_bytes()
    return cast(AsyncGenerator[bytes, None], reads)  # both are async generators


def _fold(events: list[SseEvent], assembler: StreamAssembler, origin: CallOrigin) -> str:
    """Feed ``events`` to ``assembler`` up to its last word; their text, joined."""
    texts: list[str] = []
    for event in events:
        text = assembler.feed(event, origin)
        if text:
            texts.append(text)
        if assembler.finished:
            break
    return "".join(texts)
