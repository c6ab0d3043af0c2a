"""The interface every model provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

from protocol import ModelRequest, ModelResult, ModelStreamDelta

__all__ = ["ModelEvent", "ModelProvider", "TextSink"]

#: What a provider stream yields: text deltas, then exactly one result.
ModelEvent = ModelStreamDelta | ModelResult

#: Takes the pieces of an answer's text as they arrive (synchronously: it must not block).
TextSink = Callable[[str], None]


class ModelProvider(Protocol):
    """A way to call one family of models.

    ``stream`` yields ``ModelStreamDelta`` text pieces as they arrive and
    finally exactly one ``ModelResult`` whose ``text`` is the whole answer.
    ``model`` is the model part of the model string (no provider, no effort);
    the effort, if any, is in ``request.effort``. Failures are raised as
    ``ModelProviderError`` subclasses so the gateway can decide on retries.
    With ``on_text`` a provider may hand the text pieces to it as it reads
    them, wherever it reads them, instead of yielding them: a streamed answer
    then wakes its caller once, not once a piece.
    """

    def stream(
        self, request: ModelRequest, model: str, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        """Call ``model`` with ``request``, yielding deltas (or giving them to ``on_text``)
        and then the result."""
        ...
