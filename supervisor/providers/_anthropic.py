"""Anthropic Messages API provider."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from protocol import ChatMessage, ModelRequest, ModelResult, ToolCall, Usage

from ._base import ModelEvent, TextSink
from ._errors import ModelProviderError, ModelResponseError
from ._http import (
    MALFORMED_ERRORS,
    AnswerBudget,
    CallOrigin,
    complete_once,
    error_from_status,
    malformed_response,
    parse_json_object,
    stream_sse_answer,
    token_count,
)
from ._sse import SseEvent

__all__ = [
    "ANTHROPIC_API_VERSION",
    "ANTHROPIC_DEFAULT_BASE_URL",
    "AnthropicProvider",
    "anthropic_request_body",
]

#: Where ``anthropic`` calls go unless configured otherwise.
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
#: The ``anthropic-version`` header we speak.
ANTHROPIC_API_VERSION = "2023-06-01"

# In-stream error types and the HTTP status they stand for.
_ERROR_EVENT_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicProvider:
    """The Messages API over HTTP, streaming (SSE) or not.

    The API key is ``api_key``, else ``env[api_key_env]``; without one no
    ``x-api-key`` header is sent and the provider's 401 becomes a
    ``ModelAuthError`` that says where to set it.

    ``request.effort`` is ignored: the only Messages API knob for it is
    extended thinking, and with tool use the API requires the signed thinking
    blocks of earlier turns to be sent back, which ``ChatMessage`` cannot carry.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        name: str = "anthropic",
        base_url: str = ANTHROPIC_DEFAULT_BASE_URL,
        api_key: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        env: Mapping[str, str] | None = None,
        streaming: bool = True,
        timeout: httpx.Timeout | None = None,
        call_timeout_s: float | None = None,
    ) -> None:
        self._client = client
        self._name = name
        self._url = base_url.rstrip("/") + "/v1/messages"
        self._api_key = api_key or (os.environ if env is None else env).get(api_key_env) or None
        self._key_hint = f"set {api_key_env} or providers.{name}.api_key in the gateway config"
        self._streaming = streaming
        self._timeout = timeout or httpx.Timeout(600.0, connect=10.0)
        self._call_timeout_s = call_timeout_s

    def stream(
        self, request: ModelRequest, model: str, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        """Call ``model``; yields text deltas and then the ``ModelResult``."""
        origin = CallOrigin(
            provider=self._name,
            model=model,
            url=self._url,
            key_hint=self._key_hint,
            has_key=self._api_key is not None,
            key=self._api_key,
            call_timeout_s=self._call_timeout_s,
        )
        body = anthropic_request_body(request, model, stream=self._streaming)
        if self._streaming:
            return stream_sse_answer(
                self._client,
                origin,
                body,
                headers=self._headers(),
                timeouts=self._timeout,
                on_text=on_text,
                assembler=_StreamState(model=model, budget=AnswerBudget(origin)),
            )
        return complete_once(
            self._client,
            origin,
            body,
            headers=self._headers(),
            timeouts=self._timeout,
            parse=_result_from_message,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json", "anthropic-version": ANTHROPIC_API_VERSION}
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key
        return headers


def anthropic_request_body(request: ModelRequest, model: str, *, stream: bool) -> dict[str, Any]:
    """The Messages API request body for ``request``."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "messages": _wire_messages(request.messages),
        "stream": stream,
    }
    if request.system:
        body["system"] = request.system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}
            for tool in request.tools
        ]
    return body


def _wire_messages(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for message in messages:
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        # The API wants user and assistant turns to alternate, so a tool result
        # followed by a user note (or two results) become one user message.
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    for entry in wire:
        # tool_result blocks must come before any text in their user message.
        entry["content"].sort(key=lambda block: block["type"] != "tool_result")
    return wire


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.content,
        }
        if message.is_error:
            block["is_error"] = True
        return [block]
    # The API rejects empty text blocks.
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
        for call in message.tool_calls
    )
    return blocks


@dataclass
class _Block:
    type: str
    text: list[str] = field(default_factory=list)
    tool_id: str = ""
    tool_name: str = ""
    start_input: dict[str, Any] = field(default_factory=dict)
    partial_json: list[str] = field(default_factory=list)


@dataclass
class _StreamState:
    """What the stream has said so far, by content block index."""

    model: str
    budget: AnswerBudget
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    stopped: bool = False

    @property
    def finished(self) -> bool:
        """``message_stop`` arrived."""
        return self.stopped

    @property
    def unfinished(self) -> str | None:
        """What is missing if the stream ends now."""
        return None if self.stopped else "message_stop"

    def feed(self, event: SseEvent, origin: CallOrigin) -> str:
        """Fold one SSE event into the state; return its text delta."""
        data = parse_json_object(event.data, f"a {event.event!r} event", origin)
        try:
            return self.apply(data, origin)
        except MALFORMED_ERRORS as exc:
            raise malformed_response(origin, f"a {event.event!r} event", exc) from exc

    def apply(self, data: dict[str, Any], origin: CallOrigin) -> str:
        """Fold one event's data into the state; return its text delta."""
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self.model = str(message.get("model") or self.model)
            self.usage = _usage(message.get("usage") or {}, self.usage, origin)
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            index = _index(data, origin)
            if index not in self.blocks:
                self.budget.part()
            self.blocks[index] = _Block(
                type=str(block.get("type", "")),
                text=[self.budget.text(str(block["text"]))] if block.get("text") else [],
                tool_id=str(block.get("id", "")),
                tool_name=str(block.get("name", "")),
                start_input=block.get("input") or {},
            )
        elif kind == "content_block_delta":
            return self._apply_delta(data, origin)
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            # message_delta usage is cumulative, and may repeat input counts.
            self.usage = _usage(data.get("usage") or {}, self.usage, origin)
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise _error_event(data, origin)
        # ping, content_block_stop and event types added later need nothing.
        return ""

    def _apply_delta(self, data: dict[str, Any], origin: CallOrigin) -> str:
        index = _index(data, origin)
        block = self.blocks.get(index)
        if block is None:
            raise ModelResponseError(
                f"{origin.label}: content_block_delta for block {index} before its start",
                provider=origin.provider,
                model=origin.model,
            )
        delta = data.get("delta") or {}
        if delta.get("type") == "text_delta":
            text = self.budget.text(str(delta.get("text", "")))
            block.text.append(text)
            return text
        if delta.get("type") == "input_json_delta":
            block.partial_json.append(self.budget.text(str(delta.get("partial_json", ""))))
        # thinking_delta / signature_delta belong to thinking blocks we do not request.
        return ""

    def result(self, origin: CallOrigin) -> ModelResult:
        """The complete answer once message_stop has arrived."""
        text: list[str] = []
        calls: list[ToolCall] = []
        for _, block in sorted(self.blocks.items()):
            if block.type == "text":
                text.extend(block.text)
            elif block.type == "tool_use":
                joined = "".join(block.partial_json)
                what = f"the input of tool call {block.tool_name!r}"
                tool_input = (
                    parse_json_object(joined, what, origin) if joined.strip() else block.start_input
                )
                calls.append(ToolCall(id=block.tool_id, name=block.tool_name, input=tool_input))
        return ModelResult(
            text="".join(text),
            tool_calls=tuple(calls),
            stop_reason=self.stop_reason or "end_turn",
            usage=self.usage,
            model=self.model,
        )


def _result_from_message(document: dict[str, Any], origin: CallOrigin) -> ModelResult:
    if document.get("type") == "error":
        raise _error_event(document, origin)
    content = document.get("content")
    if not isinstance(content, list):
        raise ModelResponseError(
            f"{origin.label}: the response has no content list: {json.dumps(document)[:300]}",
            provider=origin.provider,
            model=origin.model,
        )
    text = "".join(str(block.get("text", "")) for block in content if block.get("type") == "text")
    calls = tuple(
        ToolCall(
            id=str(block.get("id", "")),
            name=str(block.get("name", "")),
            input=block.get("input") or {},
        )
        for block in content
        if block.get("type") == "tool_use"
    )
    return ModelResult(
        text=text,
        tool_calls=calls,
        stop_reason=str(document.get("stop_reason") or "end_turn"),
        usage=_usage(document.get("usage") or {}, Usage(), origin),
        model=str(document.get("model") or origin.model),
    )


def _index(data: dict[str, Any], origin: CallOrigin) -> int:
    index = data.get("index")
    if not isinstance(index, int):
        raise ModelResponseError(
            f"{origin.label}: a {data.get('type')!r} event has no integer index",
            provider=origin.provider,
            model=origin.model,
        )
    return index


def _usage(usage: dict[str, Any], previous: Usage, origin: CallOrigin) -> Usage:
    def count(key: str, before: int) -> int:
        value = usage.get(key)
        return before if value is None else token_count(value, key, origin)

    return Usage(
        input_tokens=count("input_tokens", previous.input_tokens),
        output_tokens=count("output_tokens", previous.output_tokens),
        cache_read_tokens=count("cache_read_input_tokens", previous.cache_read_tokens),
        cache_write_tokens=count("cache_creation_input_tokens", previous.cache_write_tokens),
    )


def _error_event(data: dict[str, Any], origin: CallOrigin) -> ModelProviderError:
    error = data.get("error") or {}
    kind = str(error.get("type", "")) if isinstance(error, dict) else ""
    message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
    status = _ERROR_EVENT_STATUS.get(kind, 500)
    said = f"{kind}: {message}" if kind else message
    return error_from_status(status, said, origin, in_stream=True)
