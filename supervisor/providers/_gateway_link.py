"""The link between the gateway and one of its processes: what each frame carries.

Both ends are subvisor's own: the supervisor, and a gateway process it
started (``_gateway_process``). The link is a stream of msgpack arrays, one
per message (msgpack frames them itself; the decoder bounds what it holds):

==============================  ==================================================
supervisor -> gateway process
``["start", config]``           first and once: the ``GatewayConfig``, keys included
``["call", id, request]``       one attempt of a ``ModelRequest`` at its provider
``["cancel", id]``              stop that attempt (it is still answered)
gateway process -> supervisor
``["ready"]``                   once, after ``start``: it takes calls
``["texts", [[id, text]...]]``  the text read since the last batch, per call
``["result", id, result]``      the attempt's ``ModelResult``
``["failed", id, error]``       the attempt's ``ModelProviderError``, as fields
==============================  ==================================================

Invariants: every call is answered exactly once, ``result`` or ``failed``,
and after every ``texts`` piece of it; the pieces of one call arrive in
order. A gateway process reads its streams in rounds, one per
``TEXT_BATCH_S`` at most, and sends what a round read in one batch right
after it; batches are at least ``TEXT_GAP_S`` apart whatever else reads,
and whatever the number of calls streaming: the supervisor reads one frame
per batch, not one per chunk. An error crosses as its class name and fields, and is
rebuilt as the same class on the other side (retries depend on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from protocol import LocalProtocolError, RemoteProtocolError

from ._config import GatewayConfig
from ._errors import (
    ModelAuthError,
    ModelBadRequestError,
    ModelConnectionError,
    ModelProviderError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
)

__all__ = [
    "MAX_MESSAGE_BYTES",
    "TEXT_BATCH_S",
    "TEXT_GAP_S",
    "LinkDecoder",
    "config_fields",
    "error_fields",
    "error_from_fields",
    "key_free",
    "link_frame",
]

#: How often a gateway process reads its streams, and so sends their text (at most).
#: Each round's reads cost less the more each holds: at 50 chunks a second per
#: stream, 20 ms rounds cost a quarter less CPU per chunk than 10 ms ones.
TEXT_BATCH_S = 0.02
#: The least time between two batches of text (bodies read outside the rounds,
#: TLS ones, each by its own task, make text at any time).
TEXT_GAP_S = 0.005

#: A request holds a whole conversation: larger than a worker's frames may be.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

_ERRORS: dict[str, type[ModelProviderError]] = {
    cls.__name__: cls
    for cls in (
        ModelAuthError,
        ModelBadRequestError,
        ModelConnectionError,
        ModelProviderError,
        ModelRateLimitError,
        ModelResponseError,
        ModelServerError,
    )
}


def link_frame(message: list[Any]) -> bytes:
    """One message of the link, encoded."""
    body: bytes = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_MESSAGE_BYTES:
        raise LocalProtocolError(
            f"a gateway link message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}: "
            "the request is too large to send",
            limit="max_frame_size",
        )
    return body


class LinkDecoder:
    """The link's bytes in, its messages (arrays) out."""

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(
            raw=False, max_buffer_size=MAX_MESSAGE_BYTES, strict_map_key=False
        )

    def feed(self, data: bytes) -> list[list[Any]]:
        """Take bytes; return the messages they complete."""
        try:
            self._unpacker.feed(data)
            messages = list(self._unpacker)
        except (msgpack.BufferFull, ValueError, msgpack.UnpackException) as exc:
            raise RemoteProtocolError(f"the gateway link broke: {exc}") from exc
        for message in messages:
            if not isinstance(message, list) or not message:
                raise RemoteProtocolError(f"a gateway link message is not an array: {message!r}")
        return messages


def config_fields(config: GatewayConfig, env: Mapping[str, str]) -> dict[str, Any]:
    """``config`` as plain data, every key in it: what ``start`` carries.

    A key the config leaves to the environment is taken from ``env`` here,
    so that a gateway process's own environment needs none (``key_free``).
    """
    fields = config.model_dump(mode="json", exclude={"providers"})
    providers: dict[str, Any] = {}
    for name, provider in config.providers.items():
        key = provider.api_key.get_secret_value() if provider.api_key else None
        providers[name] = {
            **provider.model_dump(mode="json", exclude={"api_key"}),
            "api_key": key or env.get(provider.key_variable(name)) or None,
        }
    fields["providers"] = providers
    return fields


def key_free(config: GatewayConfig, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables ``config`` reads keys from: a gateway process's."""
    keys = {provider.key_variable(name) for name, provider in config.providers.items()}
    return {name: value for name, value in env.items() if name not in keys}


def error_fields(exc: ModelProviderError) -> dict[str, Any]:
    """What rebuilds ``exc`` on the other side of the link."""
    return {
        "kind": type(exc).__name__ if type(exc).__name__ in _ERRORS else "ModelProviderError",
        "message": exc.message,
        "provider": exc.provider,
        "model": exc.model,
        "status_code": exc.status_code,
        "provider_message": exc.provider_message,
        "retry_after": exc.retry_after,
        "retryable": exc.retryable,
    }


def error_from_fields(fields: dict[str, Any]) -> ModelProviderError:
    """The error ``error_fields`` described."""
    cls = _ERRORS.get(str(fields.get("kind")), ModelProviderError)
    provider, model = str(fields.get("provider", "")), str(fields.get("model", ""))
    message = str(fields.get("message", "the model call failed in a gateway process"))
    error: ModelProviderError
    if cls is ModelConnectionError:
        error = ModelConnectionError(
            message, provider=provider, model=model, retryable=bool(fields.get("retryable"))
        )
    else:
        error = cls(
            message,
            provider=provider,
            model=model,
            status_code=fields.get("status_code"),
            provider_message=str(fields.get("provider_message") or ""),
            retry_after=fields.get("retry_after"),
        )
    return error
