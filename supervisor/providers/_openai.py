"""OpenAI Chat Completions provider; also speaks to Ollama, vLLM and llama.cpp servers."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from protocol import ModelRequest, ModelResult, ToolCall, Usage

from ._base import ModelEvent, TextSink
from ._errors import ModelResponseError
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
    "OPENAI_DEFAULT_BASE_URL",
    "MaxTokensParam",
    "OpenAIProvider",
    "openai_request_body",
]

#: Where ``openai`` calls go unless configured otherwise.
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: The body field that carries ``ModelRequest.max_tokens``.
MaxTokensParam = Literal["max_tokens", "max_completion_tokens"]

_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


class OpenAIProvider:
    """Chat Completions over HTTP, streaming (SSE) or not.

    The API key is ``api_key``, else ``env[api_key_env]``; without one no
    ``Authorization`` header is sent (local servers need none) and only a 401
    answer is an error. ``request.effort`` is sent as ``reasoning_effort``.
    ``max_tokens_param`` names the body field for ``request.max_tokens``:
    by default ``max_completion_tokens`` for api.openai.com (its reasoning
    models refuse ``max_tokens``) and ``max_tokens`` for other servers.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        name: str = "openai",
        base_url: str = OPENAI_DEFAULT_BASE_URL,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        env: Mapping[str, str] | None = None,
        streaming: bool = True,
        timeout: httpx.Timeout | None = None,
        max_tokens_param: MaxTokensParam | None = None,
        call_timeout_s: float | None = None,
    ) -> None:
        self._client = client
        self._name = name
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key or (os.environ if env is None else env).get(api_key_env) or None
        self._key_hint = f"set {api_key_env} or providers.{name}.api_key in the gateway config"
        self._streaming = streaming
        self._timeout = timeout or httpx.Timeout(600.0, connect=10.0)
        self._call_timeout_s = call_timeout_s
        # OpenAI's own API refuses max_tokens for reasoning models; compatible
        # servers (Ollama, llama.cpp) have long understood only max_tokens.
        default_param: MaxTokensParam = (
            "max_completion_tokens" if "api.openai.com" in base_url else "max_tokens"
        )
        self._max_tokens_param = max_tokens_param or default_param

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
        body = openai_request_body(
            request, model, stream=self._streaming, max_tokens_param=self._max_tokens_param
        )
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
            parse=_result_from_completion,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json"}
        if self._api_key is not None:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers


def openai_request_body(
    request: ModelRequest,
    model: str,
    *,
    stream: bool,
    max_tokens_param: MaxTokensParam = "max_tokens",
) -> dict[str, Any]:
    """The Chat Completions request body for ``request``."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == "user":
            messages.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            wire: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                wire["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.input)},
                    }
                    for call in message.tool_calls
                ]
            messages.append(wire)
        else:
            # Chat Completions has no error flag on tool results, so say it in the text.
            content = f"Error: {message.content}" if message.is_error else message.content
            messages.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content}
            )
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        max_tokens_param: request.max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.effort is not None:
        body["reasoning_effort"] = request.effort
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                },
            }
            for tool in request.tools
        ]
    return body


@dataclass
class _PartialToolCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamState:
    """What the stream has said so far; tool calls are joined by their ``index``."""

    model: str
    budget: AnswerBudget
    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, _PartialToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    done: bool = False

    @property
    def finished(self) -> bool:
        """``[DONE]`` arrived."""
        return self.done

    @property
    def unfinished(self) -> str | None:
        """What is missing if the stream ends now."""
        if self.done or self.finish_reason is not None:
            return None
        return "the answer was complete (no finish_reason and no [DONE])"

    def feed(self, event: SseEvent, origin: CallOrigin) -> str:
        """Fold one SSE event into the state; return its text delta."""
        if event.data.strip() == "[DONE]":
            self.done = True
            return ""
        chunk = parse_json_object(event.data, "a stream chunk", origin)
        try:
            return self.apply(chunk, origin)
        except MALFORMED_ERRORS as exc:
            raise malformed_response(origin, "a stream chunk", exc) from exc

    def apply(self, chunk: dict[str, Any], origin: CallOrigin) -> str:
        """Fold one chunk into the state; return its text delta."""
        error = chunk.get("error")
        if error is not None:
            # Some servers report failures inside the stream after a 200.
            message = error.get("message", "") if isinstance(error, dict) else str(error)
            raise error_from_status(500, str(message), origin, in_stream=True)
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"], origin)
        text = ""
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str):
                text += content
            for fragment in delta.get("tool_calls") or ():
                self._apply_tool_fragment(fragment, origin)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        if text:
            self.text.append(self.budget.text(text))
        return text

    def _apply_tool_fragment(self, fragment: Any, origin: CallOrigin) -> None:
        if not isinstance(fragment, dict) or not isinstance(fragment.get("index"), int):
            raise ModelResponseError(
                f"{origin.label}: a streamed tool call has no integer index: {fragment!r}",
                provider=origin.provider,
                model=origin.model,
            )
        partial = self.tool_calls.get(fragment["index"])
        if partial is None:
            self.budget.part()
            partial = self.tool_calls[fragment["index"]] = _PartialToolCall()
        if fragment.get("id"):
            partial.id = str(fragment["id"])
        function = fragment.get("function") or {}
        if function.get("name"):
            partial.name = str(function["name"])
        if isinstance(function.get("arguments"), str):
            partial.arguments.append(self.budget.text(function["arguments"]))

    def result(self, origin: CallOrigin) -> ModelResult:
        """The complete answer once the stream has ended."""
        calls = tuple(
            _tool_call(partial.id, partial.name, "".join(partial.arguments), origin)
            for _, partial in sorted(self.tool_calls.items())
        )
        return ModelResult(
            text="".join(self.text),
            tool_calls=calls,
            stop_reason=_stop_reason(self.finish_reason, calls),
            usage=self.usage,
            model=self.model,
        )


def _result_from_completion(document: dict[str, Any], origin: CallOrigin) -> ModelResult:
    choices = document.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelResponseError(
            f"{origin.label}: the response has no choices: {json.dumps(document)[:300]}",
            provider=origin.provider,
            model=origin.model,
        )
    choice = choices[0]
    message = choice.get("message") or {}
    calls = tuple(
        _tool_call(
            str(call.get("id", "")),
            str((call.get("function") or {}).get("name", "")),
            (call.get("function") or {}).get("arguments") or "",
            origin,
        )
        for call in message.get("tool_calls") or ()
    )
    usage = document.get("usage")
    return ModelResult(
        text=message.get("content") or "",
        tool_calls=calls,
        stop_reason=_stop_reason(choice.get("finish_reason"), calls),
        usage=_usage(usage, origin) if isinstance(usage, dict) else Usage(),
        model=str(document.get("model") or origin.model),
    )


def _tool_call(call_id: str, name: str, arguments: str, origin: CallOrigin) -> ToolCall:
    if not name:
        raise ModelResponseError(
            f"{origin.label}: a tool call (id {call_id!r}) has no function name",
            provider=origin.provider,
            model=origin.model,
        )
    what = f"the arguments of tool call {name!r}"
    arguments_object = parse_json_object(arguments, what, origin) if arguments.strip() else {}
    return ToolCall(id=call_id, name=name, input=arguments_object)


def _stop_reason(finish_reason: str | None, calls: tuple[ToolCall, ...]) -> str:
    # Several local servers say "stop" even when the answer is tool calls.
    if calls:
        return "tool_use"
    if finish_reason is None:
        return "end_turn"
    return _STOP_REASONS.get(finish_reason, finish_reason)


def _usage(usage: dict[str, Any], origin: CallOrigin) -> Usage:
    # OpenAI counts cached prompt tokens inside prompt_tokens; we report them
    # apart (as Anthropic does) so input + cache_read is the whole prompt.
    def count(document: dict[str, Any], key: str) -> int:
        value = document.get(key)
        return 0 if value is None else token_count(value, key, origin)

    prompt = count(usage, "prompt_tokens")
    details = usage.get("prompt_tokens_details")
    cached = count(details, "cached_tokens") if isinstance(details, dict) else 0
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=count(usage, "completion_tokens"),
        cache_read_tokens=cached,
    )
