"""Typed errors of the model gateway and its providers.

Every error says what happened and what to do. ``ModelProviderError`` carries
what the gateway needs to decide on a retry (``retryable``, ``retry_after``).
"""

from __future__ import annotations

from .._errors import SubvisorError

__all__ = [
    "ModelAuthError",
    "ModelBadRequestError",
    "ModelConnectionError",
    "ModelError",
    "ModelProviderError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelServerError",
    "ModelStringError",
    "ScenarioError",
    "UnknownProviderError",
]


class ModelError(SubvisorError):
    """Base class of every error raised by ``supervisor.providers``."""


class ModelStringError(ModelError, ValueError):
    """A model string (S-PROF-6) is malformed, or names no concrete model."""


class UnknownProviderError(ModelError, LookupError):
    """A model string names a provider the gateway does not know."""

    def __init__(self, provider: str, known: tuple[str, ...]) -> None:
        self.provider = provider
        self.known = known
        super().__init__(
            f"unknown model provider {provider!r}: known providers are "
            f"{', '.join(known)}; to add one, put [gateway.providers.{provider}] with "
            "api = 'openai' (or 'anthropic') and base_url in subvisor.toml"
        )


class ModelProviderError(ModelError):
    """A model call failed at the provider.

    ``status_code`` is the HTTP status (``None`` when no response came back),
    ``provider_message`` what the provider itself said, ``attempts`` how many
    attempts the gateway made before giving up.
    """

    #: Whether trying the same call again may succeed.
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        model: str,
        status_code: int | None = None,
        provider_message: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.model = model
        self.status_code = status_code
        self.provider_message = provider_message
        self.retry_after = retry_after
        self.attempts = 1

    def __str__(self) -> str:
        if self.attempts > 1:
            return f"{self.message} (gave up after {self.attempts} attempts)"
        return self.message


class ModelAuthError(ModelProviderError):
    """The provider rejected the credentials (HTTP 401/403)."""


class ModelRateLimitError(ModelProviderError):
    """The provider is rate limiting us (HTTP 429); retried with backoff."""

    retryable = True


class ModelServerError(ModelProviderError):
    """The provider failed or is overloaded (HTTP 5xx or an error event); retried."""

    retryable = True


class ModelBadRequestError(ModelProviderError):
    """The provider refused the request (HTTP 4xx other than 401/403/429); not retried."""


class ModelConnectionError(ModelProviderError):
    """No complete answer came back: connection refused or dropped, or a timeout.

    Retried unless the cause cannot change by itself (e.g. an unsupported URL).
    """

    retryable = True

    def __init__(self, message: str, *, provider: str, model: str, retryable: bool = True) -> None:
        super().__init__(message, provider=provider, model=model)
        self.retryable = retryable


class ModelResponseError(ModelProviderError):
    """The provider answered something we cannot understand; not retried."""


class ScenarioError(ModelProviderError):
    """A scripted scenario file is malformed or cannot answer a call.

    ``path`` is the scenario file, ``agent_key`` the key the call resolved to
    (``None`` when the file itself is at fault or no key matched).
    """

    def __init__(self, message: str, *, path: str, agent_key: str | None = None) -> None:
        super().__init__(message, provider="scripted", model=path)
        self.path = path
        self.agent_key = agent_key
