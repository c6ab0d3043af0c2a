"""Configuration of the model gateway and its HTTP providers."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ._openai import MaxTokensParam

__all__ = ["GatewayConfig", "ProviderConfig"]

_PROVIDER_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_BUILT_IN_APIS = ("openai", "anthropic")


class ProviderConfig(BaseModel):
    """One HTTP provider: which wire ``api`` it speaks, where, and with which key.

    ``api_key`` wins over the environment variable ``api_key_env`` (default
    ``<NAME>_API_KEY``, e.g. ``OPENAI_API_KEY``). ``base_url`` defaults to the
    API's public endpoint. ``read_timeout_s`` bounds the wait for each piece
    of the answer; ``call_timeout_s`` the whole answer, from the request on
    (a provider that trickles bytes holds a model slot no longer), and a
    call past it is not retried. ``max_concurrency`` bounds this provider's
    calls in flight, within the gateway's own bound (a local server that
    serves two at a time, a key's rate limit); ``None``: only the gateway's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    api: Literal["openai", "anthropic"]
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None
    streaming: bool = True
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=300.0, gt=0)
    call_timeout_s: float = Field(default=1800.0, gt=0)
    max_tokens_param: MaxTokensParam | None = None
    max_concurrency: int | None = Field(default=None, ge=1)

    def key_variable(self, name: str) -> str:
        """The environment variable the key of provider ``name`` is read from."""
        return self.api_key_env or f"{name.upper().replace('-', '_')}_API_KEY"


class GatewayConfig(BaseModel):
    """The model gateway: providers by name, concurrency limit, retry policy.

    ``providers`` always holds ``openai`` and ``anthropic`` (defaults unless
    given); more entries such as ``ollama: {api: openai, base_url: ...}``
    make ``ollama:llama3`` work. ``scripted`` needs no configuration.
    Retries happen on 429, 5xx and connection failures, waiting
    ``Retry-After`` (at most ``retry_after_max_s``) or an exponential
    backoff from ``backoff_base_s`` up to ``backoff_max_s``, with jitter.
    Once ``pool_after`` calls stream at once, the HTTP providers' calls are
    made by ``processes`` gateway processes beside the supervisor (``auto``:
    one per two CPUs; 0: always in the supervisor); while they start, calls
    past ``pool_after`` wait for them rather than stream in the supervisor.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    max_concurrency: int = Field(default=16, ge=1)
    max_retries: int = Field(default=4, ge=0)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    retry_after_max_s: float = Field(default=60.0, ge=0)
    processes: int | Literal["auto"] = Field(default="auto")
    #: 64, not 8: measured on two cores (``relay``, three runs each), 50 streams
    #: kept in the supervisor ended in 4.7-4.8 s, not 5.3-5.6 s (no call waits for
    #: the pool to start), with a chunk lag p99 of 9-10 ms, not 23-24, for the same
    #: CPU; at 200 streams, 38-55 ms against 84-255, for 10 % more CPU.
    pool_after: int = Field(default=64, ge=1)

    @field_validator("processes")
    @classmethod
    def _check_processes(cls, processes: int | str) -> int | str:
        if isinstance(processes, int) and not 0 <= processes <= 64:
            raise ValueError("processes must be 'auto' or 0 to 64")
        return processes

    @model_validator(mode="before")
    @classmethod
    def _add_built_in_providers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = data.get("providers") or {}
        if not isinstance(given, dict):
            return data
        providers = dict(given)
        for api in _BUILT_IN_APIS:
            entry = providers.get(api)
            if entry is None:
                providers[api] = {"api": api}
            elif isinstance(entry, dict) and "api" not in entry:
                # The built-in names imply their wire API.
                providers[api] = {**entry, "api": api}
        return {**data, "providers": providers}

    @field_validator("providers")
    @classmethod
    def _check_provider_names(
        cls, providers: dict[str, ProviderConfig]
    ) -> dict[str, ProviderConfig]:
        for name in providers:
            if name == "scripted":
                raise ValueError("'scripted' is built in and cannot be configured")
            if not _PROVIDER_NAME.fullmatch(name):
                raise ValueError(
                    f"provider name {name!r} must be lower-case letters, digits, '-' and '_',"
                    " starting with a letter"
                )
        return providers
