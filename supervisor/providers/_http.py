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
import math
import re
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from contextlib import aclosing, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, cast

import httpx
import trio

from protocol import ModelResult, ModelStreamDelta

from ..files._printable import printable
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
from ._sse import SseDecoder, SseEvent, SseTooLargeError
from ._transport import BODY_EXTENSION, FeedableBody

__all__ = [
    "MALFORMED_ERRORS",
    "MAX_ANSWER_BYTES",
    "MAX_ERROR_BODY_BYTES",
    "MAX_STREAM_BYTES",
    "MAX_STREAM_PARTS",
    "MAX_TOKENS",
    "AnswerBudget",
    "CallOrigin",
    "StreamAssembler",
    "complete_once",
    "decoded_reads",
    "error_from_status",
    "malformed_as_response_error",
    "malformed_response",
    "parse_json_object",
    "parse_retry_after",
    "post_json",
    "provider_message_from_body",
    "quoted_from_provider",
    "read_body",
    "stream_sse_answer",
    "token_count",
]

_MAX_MESSAGE_CHARS = 500
#: The most of a 2xx body read, after decoding: a protocol frame's limit
#: (``FrameLimits.max_frame_size``), which a bigger answer could not pass anyway.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
#: The most of one streamed answer read, after decoding: its framing and JSON
#: around the text (a few hundred bytes a token) included. 128k tokens of
#: output make about 25 MiB.
MAX_STREAM_BYTES = 64 * 1024 * 1024
#: The most content blocks or tool calls one streamed answer may open.
MAX_STREAM_PARTS = 1024
#: The most of an error status's body read, after decoding; the rest is left unread.
MAX_ERROR_BODY_BYTES = 64 * 1024
#: The most one step of decoding a compressed body makes at once.
_DECODED_PIECE = 64 * 1024
#: Content codings read (with a bounded output per step); any other is refused.
_INFLATED = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
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
    ``has_key`` says whether one was configured at all; ``key`` is that key,
    only so that no text the provider sends back shows it
    (``quoted_from_provider``).
    """

    provider: str
    model: str
    url: str
    key_hint: str
    has_key: bool
    key: str | None = field(default=None, repr=False, compare=False)
    #: How long the whole call may take (request to last byte); None: no limit.
    call_timeout_s: float | None = None

    def deadline(self) -> float:
        """When a call starting now must have been answered (trio's clock)."""
        if self.call_timeout_s is None:
            return math.inf
        return trio.current_time() + self.call_timeout_s

    def past_deadline(self) -> ModelConnectionError:
        """The error of a call that went on past ``call_timeout_s``."""
        return ModelConnectionError(
            f"{self.label}: {self.url} was still answering after {self.call_timeout_s:g} s, "
            f"the most a call may take: raise providers.{self.provider}.call_timeout_s "
            "for a model this slow (not retried)",
            provider=self.provider,
            model=self.model,
            retryable=False,
        )

    def oversized_stream(self, says: str) -> ModelResponseError:
        """The error of a stream past a bound: it ``says`` what it holds (not retried)."""
        return ModelResponseError(
            f"{self.label}: the stream from {self.url} {says} (check the URL and the model; "
            "not retried)",
            provider=self.provider,
            model=self.model,
        )

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


def provider_message_from_body(body: bytes, origin: CallOrigin | None = None) -> str:
    """The provider's own error message in a response body, else the body's text.

    With ``origin`` it is ``quoted_from_provider``: no key, no control
    characters, at most 500 characters.
    """
    text = body.decode("utf-8", errors="replace").strip()
    message = text
    try:
        document = _loads(text)
    except (ValueError, RecursionError):
        document = None
    # OpenAI and Anthropic: {"error": {"message": ...}}; Ollama: {"error": "..."};
    # vLLM and other FastAPI servers: {"detail": ...} or {"message": ...}.
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        else:
            for candidate in (error, document.get("message"), document.get("detail")):
                if isinstance(candidate, str):
                    message = candidate
                    break
    return quoted_from_provider(message, origin) if origin is not None else _shorten(message)


# Credentials a provider may echo: an Authorization value, an OpenAI-style or
# Anthropic key, a key= query parameter.
_CREDENTIAL = re.compile(
    r"(?i)(bearer\s+|x-api-key[\"']?\s*[:=]\s*[\"']?|api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
    r"|\bsk-[A-Za-z0-9_\-]{6,}"
)


def quoted_from_provider(text: str, origin: CallOrigin) -> str:
    """``text`` a provider sent, fit for an error message, a log line or a record.

    The configured key and anything shaped like a credential become ``***``,
    control characters (escapes, newlines) are written as escapes, and it
    is cut at 500 characters: an error goes to the terminal, the store and
    the root's model, none of which may get the key or a terminal's escapes.
    """
    if origin.key:
        text = text.replace(origin.key, "***")
    text = _CREDENTIAL.sub(lambda match: (match.group(1) or "") + "***", text)
    return _shorten(printable(text))


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
    the HTTP status that event stands for. ``provider_message`` is shown as
    ``quoted_from_provider`` makes it.
    """
    provider_message = quoted_from_provider(provider_message, origin)
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
            f"{origin.label}: {what} is not a JSON object: {quoted_from_provider(text, origin)!r}",
            provider=origin.provider,
            model=origin.model,
        )
    return value


#: What reading a document of an unexpected shape raises.
MALFORMED_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError, OverflowError)
#: Token counts are below this: exact as a JSON number anywhere, and far past any real count.
MAX_TOKENS = 2**53


def token_count(value: Any, field: str, origin: CallOrigin) -> int:
    """A usage field's count: an integer (or a float with none after the point) in 0..2**53.

    Anything else is a ``ModelResponseError`` naming ``field``: a count that
    is negative, huge or not a number would corrupt every total it joins.
    """
    if isinstance(value, float) and value.is_integer() and 0 <= value < MAX_TOKENS:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_TOKENS:
        return value
    raise ModelResponseError(
        f"{origin.label}: usage field {field!r} is {quoted_from_provider(repr(value), origin)}, "
        "not a token count "
        f"(an integer from 0 to 2**53)",
        provider=origin.provider,
        model=origin.model,
    )


def malformed_response(origin: CallOrigin, what: str, exc: Exception) -> ModelResponseError:
    """The ``ModelResponseError`` for a document whose reading raised ``exc``."""
    return ModelResponseError(
        f"{origin.label}: {what} has an unexpected shape: {quoted_from_provider(str(exc), origin)}",
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
    # No compressed answers: what a provider sends is read as it comes, and a
    # proxy that compresses anyway is read with a bound (``read_body``).
    sent = {"accept-encoding": "identity", **headers}
    try:
        async with client.stream(
            "POST", origin.url, json=body, headers=sent, timeout=timeouts
        ) as response:
            if response.status_code >= 400:
                error_body = await read_body(response, origin, MAX_ERROR_BODY_BYTES, truncate=True)
                raise error_from_status(
                    response.status_code,
                    provider_message_from_body(error_body, origin),
                    origin,
                    retry_after=parse_retry_after(response.headers),
                )
            if response.status_code >= 300:
                raise _redirect_error(response, origin)
            yield response
    except httpx.TransportError as exc:
        raise _connection_error(exc, origin) from exc


def _redirect_error(response: httpx.Response, origin: CallOrigin) -> ModelBadRequestError:
    # A redirect is never followed (``follow_redirects=False``): the key would go with it.
    location = quoted_from_provider(response.headers.get("location", ""), origin)
    to = f" to {location!r}" if location else ""
    status = response.status_code
    return ModelBadRequestError(
        f"{origin.label}: HTTP {status} from {origin.url} redirects{to}, and redirects are "
        f"not followed (the key would go along): set providers.{origin.provider}.base_url to "
        "the provider's own address (not retried)",
        provider=origin.provider,
        model=origin.model,
        status_code=status,
        provider_message=location,
    )


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
        raw = (await read_body(response, origin, MAX_ANSWER_BYTES)).decode("utf-8", "replace")
    document = parse_json_object(raw, "the response", origin)
    with malformed_as_response_error(origin, "the response"):
        result = parse(document, origin)
    if result.text:
        yield ModelStreamDelta(text=result.text)
    yield result


class AnswerBudget:
    """What one streamed answer may hold as it is assembled (S-SEC-8).

    Its text and tool-call arguments together at most ``MAX_ANSWER_BYTES``
    characters (a frame could not carry more to the worker), and at most
    ``MAX_STREAM_PARTS`` blocks or tool calls. Without it a provider that
    streams without end grows the process holding the key until
    ``call_timeout_s``.
    """

    __slots__ = ("_chars", "_parts", "origin")

    def __init__(self, origin: CallOrigin) -> None:
        self.origin = origin
        self._chars = 0
        self._parts = 0

    def text(self, piece: str) -> str:
        """Charge ``piece`` of text or arguments; return it."""
        self._chars += len(piece)
        if self._chars > MAX_ANSWER_BYTES:
            raise self._over(f"more than {MAX_ANSWER_BYTES >> 20} MiB of text and tool input")
        return piece

    def part(self) -> None:
        """Charge one more content block or tool call."""
        self._parts += 1
        if self._parts > MAX_STREAM_PARTS:
            raise self._over(f"more than {MAX_STREAM_PARTS} content blocks or tool calls")

    def _over(self, what: str) -> ModelResponseError:
        return self.origin.oversized_stream(f"holds {what}, more than any answer can")


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
    deadline = origin.deadline()
    read = 0

    def take(data: bytes) -> None:
        # Before its bytes are parsed: the call's whole time, and its whole size.
        nonlocal read
        if trio.current_time() > deadline:
            raise origin.past_deadline()
        read += len(data)
        if read > MAX_STREAM_BYTES:
            raise origin.oversized_stream(
                f"is over {MAX_STREAM_BYTES >> 20} MiB without its last word, more than any "
                "answer takes"
            )

    try:
        async with (
            post_json(client, origin, body, headers=headers, timeouts=timeouts) as response,
            aclosing(decoded_reads(response, origin)) as reads,
        ):
            # A fed body is its raw payload: only one sent as it is can be fed.
            fed = on_text is not None and _content_codings(response) == []
            feedable = response.extensions.get(BODY_EXTENSION) if fed else None
            if feedable is not None:
                assert on_text is not None

                def sink(payload: bytes) -> bool:
                    take(payload)
                    text = _fold(decoder.feed(payload), assembler, origin)
                    if text:
                        on_text(text)
                    return assembler.finished

                await cast(FeedableBody, feedable).feed(sink)
            else:
                async for data in reads:
                    take(data)
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
    except SseTooLargeError as exc:
        raise origin.oversized_stream(f"has {exc}, more than any answer can hold") from exc
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


def _content_codings(response: httpx.Response) -> list[str]:
    """The body's content codings, in the order they were applied; [] for none."""
    header = response.headers.get("content-encoding")
    if header is None:
        return []
    codings = [c.strip().lower() for c in header.split(",")]
    return [c for c in codings if c and c != "identity"]


def decoded_reads(response: httpx.Response, origin: CallOrigin) -> AsyncGenerator[bytes, None]:
    """The body's decoded bytes, a network read at a time.

    A compressed body (gzip, deflate, or a chain of them) is decoded at most
    ``_DECODED_PIECE`` bytes a step, so a reader that stops at a limit never
    holds more than that of what a small read unpacks to; any other coding
    (br, zstd) is refused with a ``ModelResponseError``, since its decoder
    would unpack a whole read at once. Without a coding the raw reads are the
    body, with no layer of decoding in between.
    """
    if response.is_stream_consumed:
        # An in-memory response (``httpx.MockTransport``'s), read and decoded already.
        return _once(response.content)
    codings = _content_codings(response)
    if not codings:
        return cast(AsyncGenerator[bytes, None], response.aiter_raw())
    return _inflated_reads(response, codings, origin)


async def _once(data: bytes) -> AsyncGenerator[bytes, None]:
    yield data


async def _inflated_reads(
    response: httpx.Response, codings: list[str], origin: CallOrigin
) -> AsyncGenerator[bytes, None]:
    unknown = [c for c in codings if c not in _INFLATED]
    if unknown:
        raise ModelResponseError(
            f"{origin.label}: the answer from {origin.url} has Content-Encoding "
            f"{', '.join(codings)!r}, which subvisor does not decode (it asks for identity; "
            "check what compresses it on the way)",
            provider=origin.provider,
            model=origin.model,
        )
    # Codings are listed in the order they were applied: undo the last first.
    inflaters = [_Inflater(coding) for coding in reversed(codings)]
    try:
        async for raw in response.aiter_raw():
            for piece in _through(inflaters, raw):
                yield piece
    except zlib.error as exc:
        raise ModelResponseError(
            f"{origin.label}: the answer from {origin.url} is not valid "
            f"{', '.join(codings)} (Content-Encoding): {exc}",
            provider=origin.provider,
            model=origin.model,
        ) from exc


def _through(inflaters: list[_Inflater], data: bytes) -> Iterator[bytes]:
    """``data`` decoded by each of ``inflaters`` in turn, lazily, a bounded piece at a time."""
    if not inflaters:
        yield data
        return
    for piece in inflaters[0].decode(data):
        yield from _through(inflaters[1:], piece)


class _Inflater:
    """One gzip or deflate layer whose output comes in pieces of at most ``_DECODED_PIECE``."""

    def __init__(self, coding: str) -> None:
        self._deflate = coding == "deflate"
        self._zlib = zlib.decompressobj(_INFLATED[coding])
        self._started = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                piece = self._zlib.decompress(data, _DECODED_PIECE)
            except zlib.error:
                if not (self._deflate and not self._started):
                    raise
                # "deflate" is often sent without its zlib header (as httpx allows too).
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                self._deflate = False
                continue
            self._started = True
            data = self._zlib.unconsumed_tail
            if piece:
                yield piece
            if not data and len(piece) < _DECODED_PIECE:
                return


async def read_body(
    response: httpx.Response, origin: CallOrigin, limit: int, *, truncate: bool = False
) -> bytes:
    """The decoded body, read up to ``limit`` bytes.

    Past it, with ``truncate`` the first ``limit`` bytes are the body (the
    rest is not read); without, it is a ``ModelResponseError`` (not retried).
    """
    parts: list[bytes] = []
    size = 0
    deadline = origin.deadline()
    async with aclosing(decoded_reads(response, origin)) as reads:
        async for data in reads:
            if trio.current_time() > deadline:
                raise origin.past_deadline()
            if size + len(data) > limit:
                if truncate:
                    parts.append(data[: limit - size])
                    break
                raise ModelResponseError(
                    f"{origin.label}: the provider's answer is over {limit // (1024 * 1024)} MiB "
                    f"after decoding, more than any answer can be (check the URL {origin.url}; "
                    "not retried)",
                    provider=origin.provider,
                    model=origin.model,
                )
            parts.append(data)
            size += len(data)
    return b"".join(parts)


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
