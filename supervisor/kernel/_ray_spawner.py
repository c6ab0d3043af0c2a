"""``RaySpawner``: workers on the nodes of a Ray cluster (S-DIST-1, S-DIST-2).

What runs where:
- Here, in the supervisor: placement (which node gets a worker), every
  worker's protocol end (``WorkerHandle``), and everything above the kernel,
  keys included. Nothing of that changes: a remote worker is a
  ``SpawnedProcess`` whose stream is a node link's channel.
- On each node: one ``NodeHost`` in a Ray actor pinned to that node
  (``NodeAffinitySchedulingStrategy``, hard), running subvisor's zygote and
  that node's workers with every local protection.
- Ray provides the node list, puts each host on its node, and fate-shares
  the hosts with this process (a driver's actors die with it). Frames do
  not travel through Ray: each host listens on its node's address and the
  supervisor connects to it with the host's one-time token, one TCP stream
  per node (``_node_link``). An actor call per frame costs a Ray round trip
  and a thread hop here for every frame of every worker; the stream costs a
  TCP round trip (``python -m benchmarks ray`` measures both).

Workers cannot reach Ray: they are denied the network (Landlock TCP rules,
forced on every remote worker), Ray's session directory (its sockets, the
object store's) is hidden from them like the supervisor's home, Landlock
scopes keep them from abstract sockets and from signalling out of their
domain, and their environment is the local allowlist (no Ray variables).

Placement: a worker claims ``cpus`` and ``memory_mb`` (its profile's, or
the config's); it goes only to a node whose Ray resources less what the
workers placed there claim can hold it, the least loaded such node per GB.
A claim no node could ever hold fails at once (``UnplaceableError``); one
that fits nodes that are busy now waits until a worker ends there (at most
``spawn_timeout_s``), as a local launch waits for a slot: spreading it onto
a full node would oversubscribe the CPUs it claimed.

Failures (S-DIST-2): a node's link ending (its raylet killed, its host
dead, the machine gone: TCP keepalive and ``TCP_USER_TIMEOUT`` notice
within ~11 s; a host that is hung or stopped while its kernel still ACKs:
no answer to the link's heartbeat for 10 s) ends each of its workers once,
as "node lost"; the next spawn on that node, if Ray still lists it, starts
a fresh host. Each host reports its workers' RSS about every second, so a
remote worker's ``sample_rss`` (``top``, ``ps``) reads like a local one's.

Races:
- Two spawns may place on one node at once: a claim is reserved only when
  its spawn request goes out, so placement checks the room again after any
  wait (starting that node's host) and places anew if it was taken.
- A worker may end while a placement waits for room: the wait is for an
  event taken before the room was judged, so that end is not missed.
- A spawn cancelled after its request went out: the worker still starts
  there, and is killed as soon as its ``spawned`` arrives.
- A node lost while a spawn waits for its answer: the spawn is retried once,
  on whichever node placement picks then.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from protocol import (
    LINK_TOKEN_BYTES,
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
from worker._privileges import set_dumpable

from ._environment import IMPORT_ROOT
from ._errors import PlacementError, SpawnError, UnplaceableError
from ._exit import ExitKind, ProcessStatus
from ._node_host import NodeHost
from ._node_link import Heartbeat, LinkChannel, NodeLink, tune_link_socket
from ._spawner import SpawnedProcess, WorkerStream

__all__ = ["NodeHostActor", "RaySpawner", "RemoteProcess", "ray_available"]

log = logging.getLogger("subvisor")

#: How often the node list is asked of Ray, at most.
_NODES_TTL_S = 2.0
_MIB = 1024 * 1024
_PROBE_TIMEOUT_S = 5.0
#: Claims add and subtract floats (0.1 CPU + 0.2 CPU ...): rounding is not a shortage.
_SLACK = 1e-6


def ray_available() -> str | None:
    """None if Ray can be imported here; else what to install."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed: pip install 'subvisor[ray]'"
    return None


class NodeHostActor:
    """The Ray actor holding one ``NodeHost`` on its node (run there by Ray).

    Its host runs trio in a thread of its own; when the host is done (its
    supervisor left, or never came) the actor's process exits, so a spent
    host is never reused and nothing it started outlives it.
    """

    def __init__(self, settings: dict[str, Any]) -> None:
        import ray

        # Its memory holds the link's token: no worker (same uid, no ptrace
        # capability) may read it.
        set_dumpable(False)
        node_id = ray.get_runtime_context().get_node_id()
        hidden = (*settings["hidden"], *_ray_private_paths())
        self._host = NodeHost(
            tree_id=settings["tree_id"],
            node_id=node_id,
            hidden=tuple(dict.fromkeys(os.path.realpath(p) for p in hidden)),
            standby=settings["standby"],
            nice=settings["nice"],
            zygote_start_timeout_s=settings["zygote_start_timeout_s"],
            sample_interval_s=settings["sample_interval_s"],
            tree_caps=settings["tree_caps"],
        )
        self._token = secrets.token_bytes(LINK_TOKEN_BYTES)
        self._ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self._accept_timeout_s: float = settings["accept_timeout_s"]
        self._address: tuple[str, int] | None = None
        self._listening = threading.Event()
        threading.Thread(target=self._serve, name="subvisor-node-host", daemon=True).start()
        if not self._listening.wait(30) or self._address is None:
            raise RuntimeError("the node host could not listen on its node's address")

    def _serve(self) -> None:
        try:
            trio.run(self._main)
        except BaseException:
            log.exception("node host failed")
        finally:
            # Exit the actor's process: Ray sees the host gone, and the zygote
            # (spawned by this thread) got its parent-death signal already.
            os._exit(0)

    async def _main(self) -> None:
        try:
            listener = (await trio.open_tcp_listeners(0, host=self._ip))[0]
            assert isinstance(listener, trio.SocketListener)
            ip, port = listener.socket.getsockname()[:2]
            self._address = (str(ip), int(port))
        finally:
            # Wakes ``__init__`` either way: it fails if no address was set.
            self._listening.set()
        await self._host.serve(listener, self._token, accept_timeout_s=self._accept_timeout_s)

    def address(self) -> tuple[str, int, bytes]:
        """Where to connect, and the token to present (asked once, by its supervisor)."""
        assert self._address is not None
        return (*self._address, self._token)


def _ray_private_paths() -> list[str]:
    """Ray's own directories on this node (session, sockets, object store spill)."""
    import ray._private.worker as ray_worker

    node = getattr(ray_worker.global_worker, "node", None)
    paths = ["/tmp/ray"]
    if node is not None:
        paths.append(node.get_temp_dir_path())
    return paths


@dataclass(eq=False)
class RemoteProcess(SpawnedProcess):
    """A worker on another node: its stream is its channel, its signals go to its host."""

    channel: LinkChannel | None = None
    link: NodeLink | None = None
    channel_id: int = 0
    #: Memory it reserved on its node for placement (its ``memory_mb`` cap).
    memory_mb: float = 0.0
    #: CPUs it reserved on its node for placement (its ``cpus`` claim).
    cpus: float = 0.0
    #: Started for a spawn that was cancelled meanwhile: no handle drives it.
    orphaned: bool = False

    def open_stream(self) -> WorkerStream:
        assert self.channel is not None
        return self.channel

    def signal_tree(self, sig: int) -> None:
        assert self.link is not None
        self.link.send_control(NodeSignal(channel=self.channel_id, signal=sig))


class NodeLostError(SpawnError):
    """The node's link ended before it answered a spawn."""


@dataclass(eq=False)
class _PendingSpawn:
    worker_id: str
    channel: LinkChannel
    memory_mb: float
    cpus: float
    answer: trio.MemorySendChannel[RemoteProcess | NodeSpawnFailed]


class _RemoteNode:
    """One node's host as the supervisor sees it: its actor, its link, its workers."""

    def __init__(
        self,
        node_id: str,
        ip: str,
        actor: Any,
        link: NodeLink,
        welcome: NodeWelcome,
        on_freed: Callable[[], None] = lambda: None,
    ) -> None:
        self.node_id = node_id
        self.ip = ip
        self.actor = actor
        self.link = link
        self.welcome = welcome
        self.live: dict[int, RemoteProcess] = {}
        #: Memory caps of the workers placed here and not yet ended, in MB.
        self.reserved_mb = 0.0
        #: CPU claims of the workers placed here and not yet ended.
        self.reserved_cpus = 0.0
        self._on_freed = on_freed
        self._pending: dict[int, _PendingSpawn] = {}
        self._channels = itertools.count(1)

    @property
    def label(self) -> str:
        """``10.0.0.7 (a1b2c3d4)``: how a node is named in reasons and logs."""
        return f"{self.ip} ({self.node_id[:8]})"

    @property
    def load(self) -> int:
        """Workers placed here and not yet ended."""
        return len(self.live) + len(self._pending)

    def _release(self, memory_mb: float, cpus: float) -> None:
        self.reserved_mb -= memory_mb
        self.reserved_cpus -= cpus
        self._on_freed()

    def on_control(self, message: NodeControl) -> None:
        """A control message from the host (called in order by the link's reader)."""
        if isinstance(message, NodeSpawned):
            pending = self._pending.pop(message.channel, None)
            if pending is None:
                return
            process = RemoteProcess(
                pending.worker_id,
                message.pid,
                read_fd=-1,
                write_fd=-1,
                node=self.node_id,
                tree_caps=f"{self.welcome.tree_caps} on node {self.label}",
                channel=pending.channel,
                link=self.link,
                channel_id=message.channel,
                memory_mb=pending.memory_mb,
                cpus=pending.cpus,
            )
            # Registered here, in report order, so an ``exited`` right behind finds it.
            self.live[message.channel] = process
            try:
                pending.answer.send_nowait(process)
            except trio.BrokenResourceError:
                # Its spawn was cancelled: nobody will drive it (nor close its channel).
                process.orphaned = True
                process.signal_tree(signal.SIGKILL)
        elif isinstance(message, NodeSpawnFailed):
            pending = self._pending.pop(message.channel, None)
            if pending is not None:
                self._release(pending.memory_mb, pending.cpus)
                pending.channel.close()
                with contextlib.suppress(trio.BrokenResourceError):
                    pending.answer.send_nowait(message)
        elif isinstance(message, NodeWorkerExited):
            ended = self.live.pop(message.channel, None)
            if ended is None:
                return
            self._release(ended.memory_mb, ended.cpus)
            if ended.orphaned and ended.channel is not None:
                ended.channel.close()
            cause = None
            if message.cause_kind is not None:
                cause = (ExitKind(message.cause_kind), message.cause_reason or message.cause_kind)
            ended.set_status(
                ProcessStatus(
                    exit_code=message.exit_code,
                    signal=message.signal,
                    cpu_seconds=message.cpu_seconds,
                    max_rss_bytes=message.max_rss_kb * 1024,
                    cause=cause,
                )
            )
        elif isinstance(message, NodeMemory):
            for channel, rss in message.rss:
                remote = self.live.get(channel)
                if remote is not None:
                    remote.reported_rss_bytes = rss
        else:
            log.warning("node %s: unexpected %s from its host", self.label, message)

    async def spawn(
        self, worker_id: str, limits: ResourceLimits, sandbox: SandboxPolicy
    ) -> RemoteProcess:
        """Ask the host for a worker; ``NodeLostError`` if the link ends first."""
        if self.link.ended.is_set():
            raise NodeLostError(self.link.end_reason)
        channel_id = next(self._channels)
        send, receive = trio.open_memory_channel[RemoteProcess | NodeSpawnFailed](1)
        memory, cpus = limits.memory_mb or 0.0, limits.cpus or 0.0
        self._pending[channel_id] = _PendingSpawn(
            worker_id, self.link.channel(channel_id), memory, cpus, send
        )
        self.reserved_mb += memory
        self.reserved_cpus += cpus
        self.link.send_control(
            NodeSpawn(channel=channel_id, worker_id=worker_id, limits=limits, sandbox=sandbox)
        )
        with receive:
            try:
                outcome = await receive.receive()
            except trio.EndOfChannel:
                raise NodeLostError(self.link.end_reason) from None
        if isinstance(outcome, NodeSpawnFailed):
            raise SpawnError(
                f"node {self.label} could not start worker {worker_id}: {outcome.error}"
            )
        return outcome

    def lost(self, why: str) -> None:
        """The link ended: every worker here ended with it, once, as "node lost"."""
        for pending in self._pending.values():
            pending.answer.close()
        self._pending.clear()
        cause = (ExitKind.NODE_LOST, f"node lost: node {self.label}: {why}")
        for process in self.live.values():
            process.set_status(ProcessStatus(None, None, 0.0, 0, cause=cause))
        self.live.clear()
        self.reserved_mb = self.reserved_cpus = 0.0
        self._on_freed()


@dataclass(frozen=True, slots=True)
class _NodeInfo:
    """A live node as Ray lists it."""

    node_id: str
    ip: str
    memory_mb: float
    cpus: float

    @property
    def label(self) -> str:
        """``10.0.0.7 (a1b2c3d4)``, as ``_RemoteNode.label``."""
        return f"{self.ip} ({self.node_id[:8]})"


class RaySpawner:
    """Places workers on the nodes of a Ray cluster, each through its node's host.

    ``start`` connects to the cluster (``address``: ``auto`` or ``host:port``)
    and starts a host on every live node; a node that joins later, or whose
    host died, gets one at its first spawn. Spread: each worker goes to the
    node with the fewest live workers per GB of memory among those with room
    for its ``memory_mb`` cap and its ``cpus`` claim; it waits for room (at
    most ``placement_timeout_s``, None: as long as it takes) while every node
    that could hold it is busy.
    """

    remote = True
    makes_temp_dirs = True

    def __init__(
        self,
        address: str,
        nursery: trio.Nursery,
        *,
        tree_id: str,
        hidden: tuple[str, ...] = (),
        standby: int = 0,
        nice: int = 0,
        start_timeout: float = 60.0,
        sample_interval_s: float = 0.25,
        tree_caps: str = "auto",
        placement_timeout_s: float | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self.pid: int | None = None
        self._placement_timeout_s = placement_timeout_s
        self._heartbeat = heartbeat or Heartbeat()
        #: Set (and replaced) whenever a worker's claims are given back somewhere.
        self._freed = trio.Event()
        self.address = address
        self._nursery = nursery
        self._start_timeout = start_timeout
        self._host_settings: dict[str, Any] = {
            "tree_id": tree_id,
            "hidden": hidden,
            "standby": standby,
            "nice": nice,
            "zygote_start_timeout_s": start_timeout,
            "sample_interval_s": sample_interval_s,
            "tree_caps": tree_caps,
            "accept_timeout_s": start_timeout,
        }
        self._actor_class: Any = None
        #: The environment before ``ray.init`` (which sets variables of its own).
        self._environ_before_ray: dict[str, str] | None = None
        self._nodes: dict[str, _RemoteNode] = {}
        self._node_locks: dict[str, trio.Lock] = {}
        self._node_list: list[_NodeInfo] = []
        self._node_list_at = -float("inf")
        self._start_lock = trio.Lock()
        self._started = False
        self._closing = False
        self._owns_ray = True

    def _on_freed(self) -> None:
        self._freed.set()
        self._freed = trio.Event()

    @property
    def nodes(self) -> dict[str, _RemoteNode]:
        """The nodes with a connected host, by Ray node id."""
        return dict(self._nodes)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the cluster and start a host on every live node."""
        async with self._start_lock:
            if self._started:
                return
            if self._closing:
                raise SpawnError("the supervisor is shutting down; it starts no more workers")
            await trio.to_thread.run_sync(self._connect)
            self._started = True
            nodes = await self._live_nodes()
            failures: list[str] = []

            async def host(info: _NodeInfo) -> None:
                try:
                    await self._host(info)
                except SpawnError as exc:
                    failures.append(str(exc))

            async with trio.open_nursery() as nursery:
                for info in nodes:
                    nursery.start_soon(host, info)
            if not self._nodes:
                raise PlacementError(
                    f"no node host started on the Ray cluster at {self.address}: "
                    + ("; ".join(failures) or "Ray lists no live node")
                )
            for failure in failures:
                log.warning("%s", failure)

    def _connect(self) -> None:
        problem = ray_available()
        if problem is not None:
            raise PlacementError(problem)
        import ray

        if ray.is_initialized():
            # This process is already a Ray driver (its owner's): use its cluster, leave it be.
            self._owns_ray = False
        else:
            self._connect_ray(ray)
        self._actor_class = ray.remote(num_cpus=0, max_restarts=0)(NodeHostActor)

    def _connect_ray(self, ray: Any) -> None:
        _probe(self.address)
        self._environ_before_ray = dict(os.environ)
        try:
            ray.init(
                address=self.address,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise PlacementError(
                f"cannot connect to the Ray cluster at {self.address!r} ({exc}); "
                "start one with `ray start --head` or pass its address to --ray"
            ) from exc

    async def aclose(self) -> None:
        """Close every link (each host then kills its workers), end the hosts, leave Ray."""
        self._closing = True
        nodes = list(self._nodes.values())
        for node in nodes:
            await node.link.aclose()
        with trio.move_on_after(self._start_timeout):
            for node in nodes:
                await node.link.ended.wait()
        if self._started:
            await trio.to_thread.run_sync(self._disconnect, [node.actor for node in nodes])

    def _disconnect(self, actors: list[Any]) -> None:
        import ray

        # Each host exits by itself once its link closed; a wedged one is killed.
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        if self._owns_ray:
            ray.shutdown()
            # ray.init set PYTHONBREAKPOINT and the like for this process: a
            # library must not leave its host's environment changed.
            before = self._environ_before_ray
            if before is not None:
                for name in set(os.environ) - set(before):
                    del os.environ[name]
                os.environ.update(before)

    # -- placement -------------------------------------------------------------------------

    async def spawn(
        self,
        worker_id: str,
        limits: ResourceLimits,
        sandbox: SandboxPolicy,
        *,
        cgroups: Sequence[int] = (),
    ) -> RemoteProcess:
        """Start a worker on the node placement picks; once more elsewhere if that node is lost.

        Its cgroups are its node host's (``cgroups`` is for local workers only).
        """
        await self.start()
        # Remote workers never reach the network, Ray's own services included (S-DIST-1).
        sandbox = sandbox.model_copy(update={"network": "deny"})
        why = ""
        for _ in range(2):
            node = await self._place(limits)
            try:
                return await node.spawn(worker_id, limits, sandbox)
            except NodeLostError as exc:
                why = str(exc)
        raise SpawnError(f"worker {worker_id}: its node was lost while it started ({why})")

    async def _place(self, limits: ResourceLimits) -> _RemoteNode:
        wanted_mb, wanted_cpus = limits.memory_mb or 0.0, limits.cpus or 0.0
        timeout = self._placement_timeout_s
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                if self._closing:
                    raise SpawnError("the supervisor is shutting down; it starts no more workers")
                infos = await self._live_nodes()
                freed = self._freed
                _check_fits(infos, wanted_mb, wanted_cpus)
                candidates = []
                for info in infos:
                    node = self._nodes.get(info.node_id)
                    if not _has_room(node, info, wanted_mb, wanted_cpus):
                        continue
                    load = node.load if node is not None else 0
                    candidates.append(((load + 1) / max(info.memory_mb, 1.0), info))
                if candidates:
                    taken = False
                    for _, info in sorted(candidates, key=lambda c: c[0]):
                        try:
                            node = await self._host(info)
                        except SpawnError as exc:
                            log.warning("%s", exc)
                            continue
                        # Its claims are reserved by ``spawn`` with no checkpoint
                        # after this; another spawn may have taken the room while
                        # this one started the host.
                        if _has_room(node, info, wanted_mb, wanted_cpus):
                            return node
                        taken = True
                        break
                    if not taken:
                        raise SpawnError(
                            "no node host of the Ray cluster could be started; see the log"
                        )
                    continue
                # Every node that could hold it is busy: wait for a worker to end
                # somewhere (or the node list to change).
                with trio.move_on_after(_NODES_TTL_S):
                    await freed.wait()
        raise SpawnError(
            f"no node of the Ray cluster had {_claim(wanted_mb, wanted_cpus)} free within "
            f"{timeout:g} s; raise spawn_timeout_s, add nodes, or stop some workers"
        )

    async def _live_nodes(self) -> list[_NodeInfo]:
        now = trio.current_time()
        if now - self._node_list_at >= _NODES_TTL_S:
            self._node_list = await trio.to_thread.run_sync(_list_nodes)
            self._node_list_at = now
        return self._node_list

    # -- node hosts ------------------------------------------------------------------------

    async def _host(self, info: _NodeInfo) -> _RemoteNode:
        """The node's connected host, started first if it has none (or its last one died)."""
        lock = self._node_locks.setdefault(info.node_id, trio.Lock())
        async with lock:
            node = self._nodes.get(info.node_id)
            if node is not None and not node.link.ended.is_set():
                return node
            if self._closing:
                raise SpawnError("the supervisor is shutting down; it starts no more workers")
            node = await self._start_host(info)
            self._nodes[info.node_id] = node
            self._nursery.start_soon(self._run_link, node)
            return node

    async def _start_host(self, info: _NodeInfo) -> _RemoteNode:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        def create() -> tuple[Any, tuple[str, int, bytes]]:
            import ray

            actor = self._actor_class.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(info.node_id, soft=False),
                # The node imports our packages from where this process does when
                # that path exists there (a checkout); else from its install.
                runtime_env={"env_vars": {"PYTHONPATH": IMPORT_ROOT}},
            ).remote(self._host_settings)
            try:
                address = ray.get(actor.address.remote(), timeout=self._start_timeout)
            except BaseException:
                ray.kill(actor, no_restart=True)
                raise
            return actor, address

        where = f"{info.ip} ({info.node_id[:8]})"
        try:
            actor, (ip, port, token) = await trio.to_thread.run_sync(create)
        except Exception as exc:
            raise SpawnError(f"could not start the node host on {where}: {exc}") from exc
        try:
            with trio.fail_after(self._start_timeout):
                stream = await trio.open_tcp_stream(ip, port)
                tune_link_socket(stream.socket)
                link = NodeLink(stream)
                welcome = await link.authenticate(token)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            await trio.to_thread.run_sync(self._disconnect_actor, actor)
            raise SpawnError(f"could not reach the node host on {where}: {exc}") from exc
        if not isinstance(welcome, NodeWelcome):
            raise SpawnError(f"the node host on {where} answered {welcome.type!r}, not welcome")
        return _RemoteNode(info.node_id, ip, actor, link, welcome, self._on_freed)

    @staticmethod
    def _disconnect_actor(actor: Any) -> None:
        import ray

        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)

    async def _run_link(self, node: _RemoteNode) -> None:
        await node.link.run(node.on_control, heartbeat=self._heartbeat)
        reason = node.link.end_reason or "the node link closed"
        if not self._closing:
            log.warning("node %s: lost (%s)", node.label, reason)
        node.lost(reason if not self._closing else "the supervisor shut down")
        if self._nodes.get(node.node_id) is node:
            del self._nodes[node.node_id]
        if not self._closing:
            # Its next host, if any, is a new actor; make sure this one is gone.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._disconnect_actor, node.actor)
            self._node_list_at = -float("inf")


def _probe(address: str) -> None:
    """Fail at once, in one line, when ``host:port`` takes no connection (Ray would retry)."""
    if address == "auto":
        return  # Ray finds this machine's cluster, or says at once that there is none
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=_PROBE_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PlacementError(
            f"cannot reach the Ray cluster at {address!r} ({reason}); start one with "
            "`ray start --head`, or pass --ray auto or the head's host:port"
        ) from None


def _list_nodes() -> list[_NodeInfo]:
    import ray

    return [
        _NodeInfo(
            node_id=str(entry["NodeID"]),
            ip=str(entry["NodeManagerAddress"]),
            memory_mb=float(entry.get("Resources", {}).get("memory", 0)) / _MIB,
            cpus=float(entry.get("Resources", {}).get("CPU", 0)),
        )
        for entry in ray.nodes()  # type: ignore[no-untyped-call]
        if entry.get("Alive")
    ]


def _claim(memory_mb: float, cpus: float) -> str:
    """``2 CPUs and 512 MB``: what a worker claims, in words."""
    parts = [f"{cpus:g} CPUs" if cpus else "", f"{memory_mb:g} MB" if memory_mb else ""]
    return " and ".join(part for part in parts if part) or "room"


def _has_room(node: _RemoteNode | None, info: _NodeInfo, memory_mb: float, cpus: float) -> bool:
    """Whether ``node`` (None: no host yet) has the claim free beside its workers' claims."""
    reserved_mb = node.reserved_mb if node is not None else 0.0
    reserved_cpus = node.reserved_cpus if node is not None else 0.0
    return (
        reserved_mb + memory_mb <= info.memory_mb + _SLACK
        and reserved_cpus + cpus <= info.cpus + _SLACK
    )


def _check_fits(infos: list[_NodeInfo], memory_mb: float, cpus: float) -> None:
    """``UnplaceableError`` unless some node, empty, could hold the claim."""
    if any(info.memory_mb >= memory_mb and info.cpus >= cpus for info in infos):
        return
    if not infos:
        raise SpawnError("Ray lists no live node; start one, or check the cluster")
    most_cpus = max(infos, key=lambda info: (info.cpus, info.memory_mb))
    most_memory = max(infos, key=lambda info: (info.memory_mb, info.cpus))
    if most_cpus.cpus < cpus:
        claim, largest = f"{cpus:g} CPUs", f"{most_cpus.label}, has {most_cpus.cpus:g} CPUs"
    elif most_memory.memory_mb < memory_mb:
        claim = f"a {memory_mb:g} MB memory cap"
        largest = f"{most_memory.label}, has {most_memory.memory_mb:.0f} MB"
    else:
        claim = _claim(memory_mb, cpus)
        largest = f"{most_cpus.label}, has {most_cpus.cpus:g} CPUs and {most_cpus.memory_mb:.0f} MB"
    raise UnplaceableError(
        f"it asks for {claim} and the largest node of the Ray cluster, {largest}; "
        "lower the profile's cpus (or the memory_mb cap) or add a larger node"
    )
