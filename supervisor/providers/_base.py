"""The interface every model provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from protocol import ModelRequest, ModelResult, ModelStreamDelta

__all__ = ["ModelEvent", "ModelProvider"]

#: What a provider stream yields: text deltas, then exactly one result.
ModelEvent = ModelStreamDelta | ModelResult


class ModelProvider(Protocol):
    """A way to call one family of models.

    ``stream`` yields ``ModelStreamDelta`` text pieces as they arrive and
    finally exactly one ``ModelResult`` whose ``text`` is the whole answer.
    ``model`` is the model part of the model string (no provider, no effort);
    the effort, if any, is in ``request.effort``. Failures are raised as
    ``ModelProviderError`` subclasses so the gateway can decide on retries.
    """

    def stream(self, request: ModelRequest, model: str) -> AsyncIterator[ModelEvent]:
        """Call ``model`` with ``request``, yielding deltas and then the result."""
        ...
