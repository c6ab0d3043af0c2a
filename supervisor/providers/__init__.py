"""Model gateway and providers: every model call of every agent goes through here.

``ModelGateway`` routes a ``ModelRequest`` by its model string (S-PROF-6) to
the ``scripted``, ``openai`` or ``anthropic`` provider (or another configured
OpenAI/Anthropic-compatible endpoint), with one shared HTTP client, a global
concurrency limit and retries.
"""

from ._anthropic import ANTHROPIC_API_VERSION, ANTHROPIC_DEFAULT_BASE_URL, AnthropicProvider
from ._base import ModelEvent, ModelProvider, TextSink
from ._config import GatewayConfig, ProviderConfig
from ._errors import (
    ModelAuthError,
    ModelBadRequestError,
    ModelConnectionError,
    ModelError,
    ModelProviderError,
    ModelRateLimitError,
    ModelResponseError,
    ModelServerError,
    ModelStringError,
    ScenarioError,
    UnknownProviderError,
)
from ._gateway import ModelGateway
from ._http import parse_retry_after
from ._model_string import INHERIT_ALIASES, ModelSpec, parse_model_string
from ._openai import OPENAI_DEFAULT_BASE_URL, MaxTokensParam, OpenAIProvider
from ._retry import retry_delay
from ._scripted import Scenario, ScriptedProvider, ScriptedToolCall, ScriptedTurn, load_scenario

__all__ = [
    "ANTHROPIC_API_VERSION",
    "ANTHROPIC_DEFAULT_BASE_URL",
    "INHERIT_ALIASES",
    "OPENAI_DEFAULT_BASE_URL",
    "AnthropicProvider",
    "GatewayConfig",
    "MaxTokensParam",
    "ModelAuthError",
    "ModelBadRequestError",
    "ModelConnectionError",
    "ModelError",
    "ModelEvent",
    "ModelGateway",
    "ModelProvider",
    "ModelProviderError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelServerError",
    "ModelSpec",
    "ModelStringError",
    "OpenAIProvider",
    "ProviderConfig",
    "Scenario",
    "ScenarioError",
    "ScriptedProvider",
    "ScriptedToolCall",
    "ScriptedTurn",
    "TextSink",
    "UnknownProviderError",
    "load_scenario",
    "parse_model_string",
    "parse_retry_after",
    "retry_delay",
]
