"""How long the gateway waits before retrying a failed model call."""

from __future__ import annotations

import random

from ._config import GatewayConfig

__all__ = ["retry_delay"]


def retry_delay(
    config: GatewayConfig, attempt: int, retry_after: float | None, rng: random.Random
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    The provider's ``Retry-After`` wins, capped at ``config.retry_after_max_s``;
    otherwise an exponential backoff from ``backoff_base_s`` up to
    ``backoff_max_s`` with "equal jitter": at least half the backoff, so many
    callers retrying at once spread out but never retry immediately.
    """
    if retry_after is not None:
        return min(retry_after, config.retry_after_max_s)
    ceiling = min(config.backoff_max_s, config.backoff_base_s * 2.0 ** (attempt - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)
