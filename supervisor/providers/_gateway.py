"""The model gateway: every model call of every agent goes through here.

One shared ``httpx.AsyncClient`` over ``GatewayTransport`` (connection
pool, bodies decoded a read at a time), one global concurrency limit,
retries with backoff. API keys stay in the supervisor process.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Self

import httpx
import trio

from protocol import ModelRequest, ModelResult

from ._anthropic import ANTHROPIC_DEFAULT_BASE_URL, AnthropicProvider
from ._base import ModelEvent, ModelProvider, TextSink
from ._config import GatewayConfig, ProviderConfig
from ._errors import ModelProviderError, ModelResponseError, ModelStringError, UnknownProviderError
from ._gateway_pool import GatewayPool, PooledProvider, pool_size
from ._model_string import ModelSpec, parse_model_string
from ._openai import OPENAI_DEFAULT_BASE_URL, OpenAIProvider
from ._retry import retry_delay
from ._scripted import ScriptedProvider
from ._transport import GatewayTransport

__all__ = ["ModelGateway"]

logger = logging.getLogger(__name__)


class ModelGateway:
    """Routes ``ModelRequest`` s to providers by model string, with limits and retries.

    Use as ``async with ModelGateway(config) as gateway:`` (or call
    ``aclose``). ``transport`` replaces the HTTP transport (tests pass a
    local or mock one), ``env`` the environment API keys are read from,
    ``providers`` adds or replaces providers by name, ``rng`` drives jitter,
    ``read_rounds_s`` is ``GatewayTransport``'s.

    ``config.max_concurrency`` bounds the calls in flight across the HTTP
    providers (a slot is free while a call waits to retry), and a provider's
    own ``max_concurrency`` its calls; a caller can learn that its call
    waits for a slot (``on_wait``). Once
    ``config.pool_after`` of them are in flight, their calls go to gateway
    processes (``GatewayPool``), unless ``transport`` was given: a test's
    transport lives in this process. The offline
    ``scripted`` provider has no remote rate limit to protect, so stress runs
    on it are not throttled. A failed attempt is retried only while no text delta of it has
    reached the caller, so a caller never sees the same text twice.
    """

    def __init__(
        self,
        config: GatewayConfig | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        env: Mapping[str, str] | None = None,
        providers: Mapping[str, ModelProvider] | None = None,
        rng: random.Random | None = None,
        read_rounds_s: float | None = None,
    ) -> None:
        self.config = config or GatewayConfig()
        self._client = httpx.AsyncClient(
            transport=transport
            or GatewayTransport(max_idle=self.config.max_concurrency, read_rounds_s=read_rounds_s),
            # The limiter below bounds concurrency; the pool must never be the
            # tighter limit, or calls would queue inside httpx and time out.
            limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=self.config.max_concurrency
            ),
            follow_redirects=False,
        )
        self._limiter = trio.CapacityLimiter(self.config.max_concurrency)
        #: Each capped provider's own slots, taken before one of ``_limiter``'s.
        self._provider_limiters = {
            name: trio.CapacityLimiter(provider.max_concurrency)
            for name, provider in self.config.providers.items()
            if provider.max_concurrency is not None
        }
        self._rng = rng or random.Random()
        self._closed = False
        environment = os.environ if env is None else env
        size = pool_size(self.config.processes) if transport is None and env is None else 0
        #: The gateway processes, when the config asks for them (started on demand).
        self.pool = GatewayPool(self.config, size) if size else None
        self._providers: dict[str, ModelProvider] = {"scripted": ScriptedProvider()}
        for name, provider_config in self.config.providers.items():
            local = _http_provider(name, provider_config, self._client, environment)
            self._providers[name] = local if self.pool is None else PooledProvider(local, self.pool)
        self._providers.update(providers or {})

    @property
    def known_providers(self) -> tuple[str, ...]:
        """The provider names a model string may use, sorted."""
        return tuple(sorted(self._providers))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the shared HTTP client and the gateway processes; later calls raise."""
        self._closed = True
        if self.pool is not None:
            await self.pool.aclose()
        await self._client.aclose()

    def process_cpu_seconds(self, *, starting: bool = True) -> float:
        """CPU the gateway processes have used so far (0 without any).

        ``starting=False``: less what each used to start (imports), before its first call.
        """
        return self.pool.cpu_seconds(starting=starting) if self.pool is not None else 0.0

    def resolve(self, model: str) -> tuple[ModelSpec, ModelProvider]:
        """The parsed model string and its provider.

        Raises ``ModelStringError`` for a malformed string or an inherit alias
        (the caller must resolve those first, S-MODEL-1) and
        ``UnknownProviderError`` for a provider nobody configured.
        """
        spec = parse_model_string(model)
        if spec is None:
            raise ModelStringError(
                f"model string {model!r} means 'inherit the parent's model'; resolve it to a "
                "concrete provider:model before calling the gateway (S-MODEL-1)"
            )
        provider = self._providers.get(spec.provider)
        if provider is None:
            raise UnknownProviderError(spec.provider, self.known_providers)
        return spec, provider

    async def call(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        *,
        on_wait: Callable[[bool], None] | None = None,
    ) -> ModelResult:
        """Make one model call; ``on_text`` receives its text pieces as they arrive.

        ``on_wait(True)`` is called when the call has to wait for a model slot,
        ``on_wait(False)`` once it has one.
        """
        # Without a sink of its own the text is dropped as it is read: the
        # answer is whole in the result, and a streamed body wakes us once.
        sink = on_text or _drop_text
        async with aclosing(self.stream(request, on_wait=on_wait, on_text=sink)) as events:
            async for event in events:
                if isinstance(event, ModelResult):
                    return event
        raise AssertionError("ModelGateway.stream ended without a ModelResult")

    async def stream(
        self,
        request: ModelRequest,
        *,
        on_wait: Callable[[bool], None] | None = None,
        on_text: TextSink | None = None,
    ) -> AsyncGenerator[ModelEvent, None]:
        """Make one model call, yielding text deltas and then exactly one ``ModelResult``.

        With ``on_text`` the deltas go to it instead (synchronously, as the
        provider reads them: an HTTP stream then wakes this generator once),
        and only the result is yielded. Close it early with
        ``contextlib.aclosing`` if you stop iterating; ``on_wait`` is as for
        ``call``.
        """
        if self._closed:
            raise RuntimeError("ModelGateway is closed")
        spec, provider = self.resolve(request.model)
        # An explicit request effort beats the model string's "$effort".
        if request.effort is None and spec.effort is not None:
            request = request.model_copy(update={"effort": spec.effort})
        attempt = 1
        while True:
            result: ModelResult | None = None
            delivery = _Delivery(on_text)
            sink = delivery if on_text is not None else None

            # The token, not the task, holds the slot: trio may finalize an
            # abandoned generator in another task.
            slot = object()
            limiters: tuple[trio.CapacityLimiter, ...] = ()
            if not isinstance(provider, ScriptedProvider):
                own = self._provider_limiters.get(spec.provider)
                limiters = (self._limiter,) if own is None else (own, self._limiter)
            try:
                if limiters:
                    await self._acquire(slot, limiters, on_wait)
                try:
                    events = provider.stream(request, spec.model, on_text=sink)
                    try:
                        async for event in events:
                            if result is not None:
                                raise _protocol_error(spec, "yielded an event after its result")
                            if isinstance(event, ModelResult):
                                result = event
                            elif not event.text:
                                continue
                            elif sink is not None:
                                sink(event.text)
                            else:
                                delivery.delivered = True
                                yield event
                    finally:
                        await _aclose(events)
                finally:
                    for limiter in limiters:
                        limiter.release_on_behalf_of(slot)
                if result is None:
                    raise _protocol_error(spec, "ended without a result")
            except ModelProviderError as exc:
                exc.attempts = attempt
                if delivery.delivered or not exc.retryable or attempt > self.config.max_retries:
                    raise
                delay = retry_delay(self.config, attempt, exc.retry_after, self._rng)
                # ``exc.message``: ``str(exc)`` would say it was given up on.
                logger.warning(
                    "%s; attempt %d of %d failed, trying again %s",
                    exc.message,
                    attempt,
                    self.config.max_retries + 1,
                    f"in {delay:.2f} s" if delay >= 0.005 else "now",
                )
            else:
                yield result
                return
            await trio.sleep(delay)
            attempt += 1

    async def _acquire(
        self,
        slot: object,
        limiters: tuple[trio.CapacityLimiter, ...],
        on_wait: Callable[[bool], None] | None,
    ) -> None:
        """Take a slot of each limiter for ``slot``, in order; all or, if cancelled, none.

        The provider's own slot comes first: a call waiting for it holds no
        gateway slot, which the other providers' calls may use meanwhile.
        """
        if self.pool is not None and self._limiter.borrowed_tokens + 1 >= self.config.pool_after:
            self.pool.start_soon()
        # Told only when it will wait: most calls find a slot at once.
        told = on_wait if not all(lim.available_tokens for lim in limiters) else None
        if told is not None:
            told(True)
        taken: list[trio.CapacityLimiter] = []
        try:
            for limiter in limiters:
                await limiter.acquire_on_behalf_of(slot)
                taken.append(limiter)
        except BaseException:
            for limiter in taken:
                limiter.release_on_behalf_of(slot)
            raise
        finally:
            if told is not None:
                told(False)


def _http_provider(
    name: str, config: ProviderConfig, client: httpx.AsyncClient, env: Mapping[str, str]
) -> ModelProvider:
    api_key = config.api_key.get_secret_value() if config.api_key is not None else None
    api_key_env = config.key_variable(name)
    timeout = httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
    if config.api == "openai":
        return OpenAIProvider(
            client,
            name=name,
            base_url=config.base_url or OPENAI_DEFAULT_BASE_URL,
            api_key=api_key,
            api_key_env=api_key_env,
            env=env,
            streaming=config.streaming,
            timeout=timeout,
            max_tokens_param=config.max_tokens_param,
            call_timeout_s=config.call_timeout_s,
        )
    return AnthropicProvider(
        client,
        name=name,
        base_url=config.base_url or ANTHROPIC_DEFAULT_BASE_URL,
        api_key=api_key,
        api_key_env=api_key_env,
        env=env,
        streaming=config.streaming,
        timeout=timeout,
        call_timeout_s=config.call_timeout_s,
    )


class _Delivery:
    """An attempt's text sink: passes pieces on, and remembers whether any went."""

    __slots__ = ("_on_text", "delivered")

    def __init__(self, on_text: TextSink | None) -> None:
        self.delivered = False
        self._on_text = on_text

    def __call__(self, text: str) -> None:
        self.delivered = True
        if self._on_text is not None:
            self._on_text(text)


def _drop_text(text: str) -> None:
    pass


def _protocol_error(spec: ModelSpec, what: str) -> ModelResponseError:
    return ModelResponseError(
        f"{spec.provider} model {spec.model!r}: the provider's stream {what}",
        provider=spec.provider,
        model=spec.model,
    )


async def _aclose(events: AsyncIterator[ModelEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
