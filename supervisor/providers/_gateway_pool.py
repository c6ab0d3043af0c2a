"""``GatewayPool``: the gateway's processes, which read model traffic beside the supervisor.

Every model call of every agent goes through the supervisor's gateway; at
fleet scale reading the streamed answers is most of its work (a chunk per
agent every few tens of ms), and it would share one core, and one event
loop, with launches, approvals and notifications. So once enough calls
stream at once (``GatewayConfig.pool_after``), the gateway starts
``processes`` gateway processes (``_gateway_process``) and sends its HTTP
providers' calls to them, least busy first; they read and parse the
streams on other cores, and send the text back in batches (one frame per
read round, ``TEXT_BATCH_S``, for all their calls). Until the pool is ready, calls are
made here, as they are when ``processes`` is 0.

The gateway keeps everything that decides: the model slots, the retries,
the accounting. A process makes one attempt per call. The processes run in
a cpu cgroup of their own that weighs more than the fleet, where one can be
made (``HelperCgroup``): streamed text goes before a launch storm.

Races handled here:
- A gateway process that exits (killed, crashed) fails each of its calls
  with a retryable ``ModelConnectionError``: the gateway retries them (here,
  or on another process); the pool starts it again for later calls, but
  stops using processes that keep dying (``_MAX_DEATHS``), saying so once.
- A call whose caller is cancelled sends ``cancel`` and forgets the call;
  what the process still sends for it is dropped.
- The pool starts in a system task of the trio run that first needs it. A
  call made while it starts runs here while fewer than ``pool_after`` calls
  already do; past that it waits until a process is ready (or the start
  failed: then it runs here too). At fleet scale one is ready long before
  the streams it would take on here would end. The test of ``ready`` and
  the choice of a process have no checkpoint between them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio

from protocol import ModelRequest, ModelResult, ModelStreamDelta
from worker import Outcome, PipeStream

from ..kernel import HelperCgroup, launch_python, reap_child
from ._base import ModelEvent, ModelProvider, TextSink
from ._config import GatewayConfig
from ._errors import ModelConnectionError, ModelProviderError
from ._gateway_link import (
    LinkDecoder,
    config_fields,
    error_from_fields,
    key_free,
    link_frame,
)

__all__ = ["GatewayPool", "PooledProvider", "pool_size"]

log = logging.getLogger(__name__)

_READ_SIZE = 256 * 1024
_START_TIMEOUT_S = 30.0
#: Deaths of gateway processes after which the pool is no longer used.
_MAX_DEATHS = 3


@dataclass(eq=False)
class _Call:
    on_text: TextSink | None
    outcome: Outcome[ModelResult | ModelProviderError] = field(default_factory=Outcome)
    texts: list[str] = field(default_factory=list)


class _GatewayProcess:
    """One started gateway process: its link and the calls it is making."""

    def __init__(self, pid: int, link: PipeStream) -> None:
        self.pid = pid
        self.link = link
        self.calls: dict[int, _Call] = {}
        #: Ready for calls: said ``ready``, and not gone since.
        self.alive = False
        self.reaped = trio.Event()
        self.cpu_seconds = 0.0
        #: What it used to start (imports, mostly), before its first call.
        self.start_cpu_seconds = 0.0

    def end(self, why: str) -> None:
        """It is gone: fail every call it had, retryably."""
        self.alive = False
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call.outcome.set(
                ModelConnectionError(
                    f"the gateway process {self.pid} {why}", provider="gateway", model=""
                )
            )

    def sample_cpu(self) -> None:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(self.pid).cpu_times()
            self.cpu_seconds = times.user + times.system


def pool_size(processes: int | str) -> int:
    """How many gateway processes ``GatewayConfig.processes`` asks for on this machine.

    ``auto``: one per two CPUs this process may run on, at most 8, none with one CPU.
    """
    if processes != "auto":
        return int(processes)
    cpus = len(os.sched_getaffinity(0))
    return 0 if cpus < 2 else min(8, cpus // 2)


class GatewayPool:
    """Gateway processes for ``config``'s HTTP providers (see the module)."""

    def __init__(self, config: GatewayConfig, size: int) -> None:
        # The processes make calls; they must never start processes of their own.
        self._config = config.model_copy(update={"processes": 0})
        self._size = size
        self._processes: list[_GatewayProcess] = []
        self._ids = itertools.count(1)
        self._starting: object | None = None
        #: Set once the start in progress has a process ready, or has ended.
        self._started = trio.Event()
        #: Calls of the pooled providers streaming in this process now.
        self.local_calls = 0
        #: While the pool starts, more calls than this in the supervisor wait for it.
        self.local_limit = config.pool_after
        self._deaths = 0
        self._closed = False
        self._reaped: list[_GatewayProcess] = []
        self._cgroup: HelperCgroup | None = None
        #: Why its processes do not weigh more than the fleet for the CPU ("" when they do).
        self.cpu_weight_error = "not started"

    @property
    def ready(self) -> bool:
        """Whether calls go to the processes now."""
        return any(process.alive for process in self._processes)

    @property
    def pids(self) -> list[int]:
        """The pids of its processes, started or starting."""
        return [process.pid for process in self._processes]

    def start_soon(self) -> None:
        """Start the processes, in the background of this trio run (once; idempotent)."""
        if self._closed or self._deaths >= _MAX_DEATHS:
            return
        run = trio.lowlevel.current_root_task()
        if self._starting is run or self.ready:
            return
        self._starting = run
        self._started = trio.Event()
        trio.lowlevel.spawn_system_task(self._start, run, name="GatewayPool start")

    async def wait_started(self) -> None:
        """Return once the start in progress (in this run) has a process ready or has ended.

        At once if none is in progress.
        """
        if self._starting is trio.lowlevel.current_root_task():
            await self._started.wait()

    def cpu_seconds(self, *, starting: bool = True) -> float:
        """CPU its processes have used so far (those reaped included).

        ``starting=False`` leaves out what each used to start, before its first call.
        """
        for process in self._processes:
            if process.alive:
                process.sample_cpu()
        return sum(
            p.cpu_seconds - (0.0 if starting else p.start_cpu_seconds)
            for p in (*self._processes, *self._reaped)
        )

    async def stream(
        self, request: ModelRequest, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        """One attempt of ``request`` in the least busy process: its deltas, then its result."""
        process = min((p for p in self._processes if p.alive), key=lambda p: len(p.calls))
        call_id = next(self._ids)
        call = process.calls[call_id] = _Call(on_text)
        try:
            await process.link.send_all(
                link_frame(["call", call_id, request.model_dump(mode="json")])
            )
            await call.outcome.wait()
        except trio.Cancelled:
            if process.calls.pop(call_id, None) is not None and process.alive:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(1),
                    contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
                ):
                    await process.link.send_all(link_frame(["cancel", call_id]))
            raise
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            process.calls.pop(call_id, None)
            raise ModelConnectionError(
                f"the gateway process {process.pid} is gone ({exc})", provider="gateway", model=""
            ) from None
        outcome = call.outcome.value
        if isinstance(outcome, ModelProviderError):
            raise outcome
        assert outcome is not None
        if call.texts:
            yield ModelStreamDelta(text="".join(call.texts))
        yield outcome

    async def aclose(self) -> None:
        """Close every link; each process exits on it (killed if it does not within 2 s).

        Returns once every process is reaped (or 2 s after killing the last ones).
        """
        self._closed = True
        for process in self._processes:
            process.sample_cpu()
            process.link.close()
        await self._reaped_within(2)
        for process in self._processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        # Reaped before we return: none is left behind as a dying child.
        await self._reaped_within(2)
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None:
            await trio.to_thread.run_sync(cgroup.remove)

    async def _reaped_within(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            for process in list(self._processes):
                await process.reaped.wait()

    # -- the processes ----------------------------------------------------------------

    async def _start(self, run: object) -> None:
        # A system task: nothing may escape it.
        try:
            if self._cgroup is None:
                cgroup, self.cpu_weight_error = await trio.to_thread.run_sync(
                    HelperCgroup.create, "gateway"
                )
                if cgroup is not None and self._closed:
                    # ``aclose`` ran meanwhile, and found no cgroup to remove.
                    await trio.to_thread.run_sync(cgroup.remove)
                    return
                self._cgroup = cgroup
                if self.cpu_weight_error:
                    log.info(
                        "gateway processes keep the supervisor's CPU weight: %s",
                        self.cpu_weight_error,
                    )
            for _ in range(self._size - len(self._processes)):
                if self._closed or not await self._launch():
                    break
        except Exception:
            log.exception("could not start the gateway's processes; calls stay in the supervisor")
        finally:
            if self._starting is run:
                self._starting = None
                self._started.set()

    async def _launch(self) -> bool:
        """Start one process; True once it is ready (it is in ``_processes`` from its start)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = launch_python(
                "supervisor.providers._gateway_process",
                [f"--fd={theirs.fileno()}", f"--parent-pid={os.getpid()}"],
                # Proxies, CA files and the like, but no key: those come over the link.
                key_free(self._config, os.environ),
                [theirs.fileno()],
            )
        finally:
            theirs.close()
        if self._cgroup is not None:
            # Trusted, and no worker's kin: ahead of a launch storm (see ``HelperCgroup``).
            self.cpu_weight_error = self._cgroup.add(pid)
        fd = ours.detach()
        link = PipeStream(fd, os.dup(fd))
        process = _GatewayProcess(pid, link)
        # Listed at once: ``aclose`` ends it even while it starts.
        self._processes.append(process)
        trio.lowlevel.spawn_system_task(self._reap, process, os.pidfd_open(pid))
        decoder = LinkDecoder()
        try:
            start = config_fields(self._config, os.environ)
            await link.send_all(link_frame(["start", start]))
            with trio.move_on_after(_START_TIMEOUT_S):
                while data := await link.receive_some(_READ_SIZE):
                    messages = decoder.feed(data)
                    if messages and messages[0] == ["ready"]:
                        process.sample_cpu()
                        process.start_cpu_seconds = process.cpu_seconds
                        process.alive = not self._closed
                        trio.lowlevel.spawn_system_task(self._read, process, decoder)
                        self._started.set()
                        return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False  # it died starting, or the pool was closed meanwhile
        log.warning("a gateway process did not start (pid %d); calls stay in the supervisor", pid)
        link.close()
        return False

    async def _read(self, process: _GatewayProcess, decoder: Any) -> None:
        try:
            while data := await process.link.receive_some(_READ_SIZE):
                for message in decoder.feed(data):
                    self._take(process, message)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:
            log.exception("the link to gateway process %d broke", process.pid)
        finally:
            process.end("closed its link")

    def _take(self, process: _GatewayProcess, message: list[Any]) -> None:
        kind = message[0]
        if kind == "texts":
            calls = process.calls
            for call_id, text in message[1]:
                call = calls.get(call_id)
                if call is None:
                    continue
                if call.on_text is not None:
                    call.on_text(text)
                else:
                    call.texts.append(text)
            return
        call = process.calls.pop(message[1], None)
        if call is None:
            return
        if kind == "result":
            call.outcome.set(ModelResult.model_validate(message[2]))
        else:
            call.outcome.set(error_from_fields(message[2]))

    async def _reap(self, process: _GatewayProcess, pidfd: int) -> None:
        # Not shielded: a run that ends without closing the gateway must not wait
        # for its processes (they die with the supervisor, by parent-death signal).
        try:
            status = await reap_child(process.pid, pidfd)
        except Exception:
            log.exception("could not reap gateway process %d", process.pid)
            return
        process.cpu_seconds = max(process.cpu_seconds, status.cpu_seconds)
        self._reaped.append(process)
        if not self._closed:
            self._deaths += 1
            how = f"signal {status.signal}" if status.signal else f"exit code {status.exit_code}"
            log.warning(
                "gateway process %d ended (%s)%s",
                process.pid,
                how,
                "; calls stay in the supervisor from now on" if self._deaths >= _MAX_DEATHS else "",
            )
        process.link.close()
        process.end("exited")
        self._processes = [p for p in self._processes if p is not process]
        process.reaped.set()


class PooledProvider:
    """An HTTP provider whose calls go to the gateway's processes once they run, else here."""

    def __init__(self, local: ModelProvider, pool: GatewayPool) -> None:
        self.local = local
        self._pool = pool

    async def stream(
        self, request: ModelRequest, model: str, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        """One attempt: in a gateway process when the pool is ready, else in this one.

        While the pool starts and ``local_limit`` calls already stream here,
        the attempt first waits for a process to be ready (or the start to fail).
        """
        pool = self._pool
        if not pool.ready and pool.local_calls >= pool.local_limit:
            await pool.wait_started()
        # No checkpoint between this test and the pool picking a process.
        local = not pool.ready
        events = (
            self.local.stream(request, model, on_text=on_text)
            if local
            else pool.stream(request, on_text=on_text)
        )
        if local:
            pool.local_calls += 1
        try:
            async for event in events:
                yield event
        finally:
            if local:
                pool.local_calls -= 1
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
