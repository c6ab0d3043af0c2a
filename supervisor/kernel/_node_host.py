"""``NodeHost``: one supervisor's workers on one cluster node (S-DIST-1).

The host runs on the node (inside a Ray actor, ``_ray_spawner``) and serves
exactly one supervisor, over one authenticated node link. It owns what
must be local to the workers' machine: a zygote (the same ``ZygoteSpawner``
a local supervisor uses, so the same sandbox, environment allowlist and
hidden paths), each worker's cgroup and private temp dir, the caps over
each worker's tree, and the signals that stop them. It speaks no worker
protocol: it relays each worker's pipes to its channel, byte for byte; the
supervisor is the only end of every worker's protocol, and holds every key.

Invariants:
- Nothing outlives the host: when its link ends (the supervisor is gone,
  or closed it), it closes its zygote, which kills every worker and what
  they started; a host that dies takes its zygote down by its parent-death
  signal, and the zygote its workers.
- Each worker's end is reported once, after the last of its output: the
  exit report is queued on the link behind the bytes read from its pipe.
- About every ``_MEMORY_REPORT_S`` the host reports each live worker's RSS
  (``NodeMemory``), so the supervisor reads a remote worker's memory as it
  reads a local one's; it answers the supervisor's heartbeat pings from
  its link's reader (``_node_link``).

Races handled here:
- A spawn may be answered after its supervisor stopped waiting: that is the
  supervisor's to handle (it kills what it did not wait for).
- A signal may name a worker just reaped: it is ignored, as its pid may be
  gone or, after reaping, someone else's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
from dataclasses import dataclass, field

import psutil
import trio

from protocol import (
    NodeControl,
    NodeMemory,
    NodeSignal,
    NodeSpawn,
    NodeSpawned,
    NodeSpawnFailed,
    NodeWelcome,
    NodeWorkerExited,
    ResourceLimits,
    SandboxPolicy,
)

from ._cgroups import CgroupTree, WorkerCgroup
from ._environment import worker_environment
from ._errors import SpawnError
from ._exit import ExitKind
from ._node_link import LinkChannel, NodeLink, NodeLinkAuthError, tune_link_socket
from ._spawner import SpawnedProcess, WorkerStream, ZygoteSpawner
from ._temp_dirs import WorkerTempDirs
from ._tree_caps import TreeSampler, TreeUsage, breach, signal_tree, tree_breach

__all__ = ["NodeHost"]

log = logging.getLogger("subvisor.node")

_READ_SIZE = 256 * 1024
_DRAIN_AFTER_EXIT_S = 1.0
#: How often each worker's RSS is sent to the supervisor (for ``top`` and ``ps``).
_MEMORY_REPORT_S = 1.0


@dataclass(eq=False)
class _HostedWorker:
    """One worker of this host: its process, channel and what enforces its caps."""

    process: SpawnedProcess
    channel: LinkChannel
    limits: ResourceLimits
    cgroup: WorkerCgroup | None
    ps: psutil.Process | None
    cause: tuple[ExitKind, str] | None = None
    drained: trio.Event = field(default_factory=trio.Event)


class NodeHost:
    """Serves one supervisor's workers on this node, over one authenticated link."""

    def __init__(
        self,
        *,
        tree_id: str,
        node_id: str,
        hidden: tuple[str, ...] = (),
        standby: int = 0,
        nice: int = 0,
        zygote_start_timeout_s: float = 30.0,
        sample_interval_s: float = 0.25,
        tree_caps: str = "auto",
    ) -> None:
        self.node_id = node_id
        self._tree_id = tree_id
        self._hidden = hidden
        self._standby = standby
        self._nice = nice
        self._zygote_start_timeout_s = zygote_start_timeout_s
        self._sample_interval_s = sample_interval_s
        self._tree_caps_mode = tree_caps
        self._workers: dict[int, _HostedWorker] = {}
        self._temp_dirs = WorkerTempDirs()
        self._sampler = TreeSampler()
        self._cgroups: CgroupTree | None = None
        self._tree_caps = "sampling"
        self._zygote: ZygoteSpawner | None = None
        self._link: NodeLink | None = None
        self._nursery: trio.Nursery | None = None

    async def serve(
        self, listener: trio.SocketListener, token: bytes, *, accept_timeout_s: float
    ) -> None:
        """Wait for the supervisor holding ``token``, then serve it until its link ends.

        Connections that do not present the token are closed; after
        ``accept_timeout_s`` without the supervisor, the host gives up.
        """
        link = None
        with trio.move_on_after(accept_timeout_s):
            while link is None:
                stream = await listener.accept()
                with contextlib.suppress(OSError):
                    tune_link_socket(stream.socket)
                candidate = NodeLink(stream)
                try:
                    with trio.fail_after(5):
                        await candidate.accept(token)
                except (NodeLinkAuthError, trio.TooSlowError, trio.BrokenResourceError, OSError):
                    await stream.aclose()
                    continue
                link = candidate
        await listener.aclose()
        if link is None:
            log.warning("node host %s: no supervisor connected; exiting", self.node_id)
            return
        self._link = link
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self._start(nursery)
                nursery.start_soon(self._sample_trees)
                nursery.start_soon(self._report_memory)
                await link.run(self._on_control)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._close()

    async def _start(self, nursery: trio.Nursery) -> None:
        assert self._link is not None
        if self._tree_caps_mode == "auto":
            self._cgroups, why = CgroupTree.create(self._tree_id)
            self._tree_caps = self._cgroups.mechanism if self._cgroups else f"sampling ({why})"
        self._zygote = ZygoteSpawner(
            worker_environment(self._tree_id),
            nursery,
            start_timeout=self._zygote_start_timeout_s,
            standby=self._standby,
            hidden=self._hidden,
            nice=self._nice,
        )
        await self._zygote.start()
        assert self._zygote.pid is not None
        self._link.send_control(
            NodeWelcome(
                node_id=self.node_id,
                host_pid=os.getpid(),
                zygote_pid=self._zygote.pid,
                tree_caps=self._tree_caps,
            )
        )

    async def _close(self) -> None:
        # The zygote kills every worker and all below them as it exits (S-SEC-5).
        if self._zygote is not None:
            await self._zygote.aclose()
        if self._cgroups is not None:
            await trio.to_thread.run_sync(self._cgroups.close)
        await trio.to_thread.run_sync(self._temp_dirs.close)

    # -- control messages (called by the link's reader; they never wait) ------------------

    def _on_control(self, message: NodeControl) -> None:
        assert self._link is not None and self._nursery is not None
        if isinstance(message, NodeSpawn):
            # Opened now, so bytes sent right behind the spawn are kept for the worker.
            channel = self._link.channel(message.channel)
            self._nursery.start_soon(self._run_worker, message, channel)
        elif isinstance(message, NodeSignal):
            worker = self._workers.get(message.channel)
            if worker is not None and not worker.process.reaped.is_set():
                signal_tree(worker.process.pid, message.signal, worker.cgroup, worker.ps)
        else:
            log.warning("node host %s: unexpected %s from the supervisor", self.node_id, message)

    # -- one worker ---------------------------------------------------------------------

    async def _run_worker(self, request: NodeSpawn, channel: LinkChannel) -> None:
        assert self._link is not None and self._zygote is not None
        sandbox = self._local_sandbox(request.sandbox, request.worker_id)
        try:
            process = await self._zygote.spawn(request.worker_id, request.limits, sandbox)
        except SpawnError as exc:
            self._link.send_control(NodeSpawnFailed(channel=request.channel, error=str(exc)))
            channel.close()
            self._temp_dirs.remove(self._temp_dirs.release(request.worker_id))
            return
        cgroup = None
        if self._cgroups is not None:
            try:
                cgroup = self._cgroups.add_worker(request.worker_id, request.limits)
                cgroup.add(process.pid)
            except OSError as exc:
                log.warning("worker %s: no cgroup (%s); its tree is sampled", process.pid, exc)
                cgroup = None
        ps = None
        with contextlib.suppress(psutil.NoSuchProcess):
            ps = psutil.Process(process.pid)
        worker = _HostedWorker(process, channel, request.limits, cgroup, ps)
        self._workers[request.channel] = worker
        self._link.send_control(NodeSpawned(channel=request.channel, pid=process.pid))
        pipe = process.open_stream()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_out, pipe, worker)
                nursery.start_soon(self._pump_in, channel, pipe)
                await process.reaped.wait()
                # What it wrote just before it died is still in the pipe.
                with trio.move_on_after(_DRAIN_AFTER_EXIT_S):
                    await worker.drained.wait()
                nursery.cancel_scope.cancel()
        finally:
            pipe.close()
            self._workers.pop(request.channel, None)
            await self._report_exit(request, worker)

    async def _report_exit(self, request: NodeSpawn, worker: _HostedWorker) -> None:
        assert self._link is not None
        status = worker.process.status
        assert status is not None
        cause = worker.cause
        if cause is None and worker.cgroup is not None and status.signal == signal.SIGKILL:
            # The kernel's OOM killer, inside its cgroup, before a sample saw it.
            usage = TreeUsage.from_cgroup(worker.cgroup.usage(), self._tree_caps)
            found = breach(usage, worker.limits)
            if found is not None and found[0] is ExitKind.MEMORY_CAP:
                cause = found
        self._link.send_control(
            NodeWorkerExited(
                channel=request.channel,
                exit_code=status.exit_code,
                signal=status.signal,
                cpu_seconds=status.cpu_seconds,
                max_rss_kb=status.max_rss_bytes // 1024,
                cause_kind=cause[0].value if cause else None,
                cause_reason=cause[1] if cause else None,
            )
        )
        worker.channel.close()
        if worker.cgroup is not None and self._cgroups is not None:
            self._cgroups.workers.pop(request.worker_id, None)
            await trio.to_thread.run_sync(functools.partial(worker.cgroup.remove, deadline_s=0.25))
        doomed = self._temp_dirs.release(request.worker_id)
        if doomed:
            await trio.to_thread.run_sync(self._temp_dirs.remove, doomed)

    def _local_sandbox(self, policy: SandboxPolicy, worker_id: str) -> SandboxPolicy:
        """The policy with this node's hidden paths, and a private temp dir here if it needs one."""
        update: dict[str, object] = {
            "hidden_paths": tuple(dict.fromkeys((*policy.hidden_paths, *self._hidden)))
        }
        if policy.restricts_filesystem and policy.temp_dir is None:
            update["temp_dir"] = self._temp_dirs.make(worker_id)
        return policy.model_copy(update=update)

    async def _pump_out(self, pipe: WorkerStream, worker: _HostedWorker) -> None:
        """The worker's frames, from its pipe to its channel; EOF when it closes its end."""
        try:
            while data := await pipe.receive_some(_READ_SIZE):
                await worker.channel.send_all(data)
            worker.channel.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            worker.drained.set()

    async def _pump_in(self, channel: LinkChannel, pipe: WorkerStream) -> None:
        """The supervisor's frames, from the channel to the worker's pipe."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await channel.receive_some(_READ_SIZE):
                await pipe.send_all(data)

    async def _sample_trees(self) -> None:
        """Judge each worker's tree against its caps; stop one over a cap at once (S-SEC-4)."""
        while True:
            await trio.sleep(self._sample_interval_s)
            workers = [w for w in self._workers.values() if w.cause is None]
            if any(w.cgroup is None for w in workers):
                self._sampler.refresh()
            for worker in workers:
                pid = worker.process.pid
                found = tree_breach(
                    pid, worker.limits, worker.cgroup, self._sampler, self._tree_caps
                )
                if found is None or worker.process.reaped.is_set():
                    continue
                worker.cause = found
                signal_tree(pid, signal.SIGKILL, worker.cgroup, worker.ps)

    async def _report_memory(self) -> None:
        """Each live worker's RSS to the supervisor, about every second (one small frame)."""
        assert self._link is not None
        while True:
            await trio.sleep(_MEMORY_REPORT_S)
            rss: list[tuple[int, int]] = []
            for channel, worker in list(self._workers.items()):
                if worker.ps is None or worker.process.reaped.is_set():
                    continue
                with contextlib.suppress(psutil.Error):
                    rss.append((channel, int(worker.ps.memory_info().rss)))
            if rss:
                self._link.send_control(NodeMemory(rss=rss))
