"""``Supervisor``: spawns, watches, caps and stops a fleet of worker processes."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import resource
import time
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self

import trio

from protocol import (
    EchoRequest,
    EchoResult,
    FrameLimits,
    NodeWelcome,
    ResourceLimits,
    SandboxPolicy,
    WorkerRequest,
)
from worker._mounts import missing_vcs_dirs
from worker._privileges import set_dumpable

from ._byte_budget import ByteBudget
from ._cgroups import CgroupTree, WorkerCgroup
from ._environment import new_tree_id, worker_environment
from ._errors import (
    FleetCapacityError,
    FleetExhaustedError,
    SpawnError,
    SubvisorError,
    UnplaceableError,
)
from ._handle import RequestHandler, RequestRefusedError, WireTap, WorkerHandle
from ._own_code import own_code, own_code_below
from ._planted_repos import CTIME_SLACK_S, RepositorySweeps
from ._sandbox_support import (
    SandboxUnsupportedError,
    landlock_abi_max_from_env,
    unsupported_message,
)
from ._spawner import ExecSpawner, SpawnedProcess, Spawner, ZygoteSpawner
from ._supervisor_config import SpawnMode, SupervisorConfig
from ._supervisor_mark import mark_supervisor, unmark_supervisor
from ._temp_dirs import WorkerTempDirs
from ._tree_caps import TreeSampler, tree_breach
from ._user_files import UserFileProtection, protect_below
from ._worker_tree import refuse_inside_worker_tree

if TYPE_CHECKING:
    from ._ray_spawner import RaySpawner

__all__ = ["Supervisor"]

log = logging.getLogger("subvisor")

#: How long after SIGKILL a worker's exit report may take before shutdown stops waiting.
_REAP_WAIT_S = 2.0
#: How long one resolution of the user-level files is reused (``Supervisor._user_files``).
USER_FILES_TTL_S = 1.0
#: Workers the watchdog judges per task step (see ``Supervisor._watch``).
_WATCH_SLICE = 64


async def default_request_handler(handle: WorkerHandle, request: WorkerRequest) -> EchoResult:
    """Answer what every worker may ask (``supervisor.echo``); refuse the rest.

    A worker spawned without a handler of its own is served by this one: it
    runs commands, not an agent, so it has no model, rules or MCP to ask for.
    """
    if isinstance(request, EchoRequest):
        return EchoResult(value=request.params.value)
    raise RequestRefusedError(
        "unsupported", f"this worker runs no agent; {request.method} is not served to it"
    )


def _raise_open_files_limit() -> None:
    # Each worker costs the supervisor two pipe fds (three in exec mode with
    # its pidfd); the usual soft limit of 1024 would cap the fleet near 400.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class Supervisor:
    """The parent of every worker process of one tree.

    Use as ``async with Supervisor() as sup: handle = await sup.spawn()``.
    Leaving the block stops every worker (SIGTERM, grace, SIGKILL on each
    process group) and the zygote, also on cancellation and Ctrl-C.
    """

    def __init__(
        self,
        config: SupervisorConfig | None = None,
        *,
        frame_limits: FrameLimits | None = None,
        wire_tap: WireTap | None = None,
    ) -> None:
        self.config = config or SupervisorConfig()
        self._wire_tap = wire_tap
        self.tree_id = new_tree_id()
        self.workers: dict[str, WorkerHandle] = {}
        self.spawned_total = 0
        self._frame_limits = frame_limits or FrameLimits()
        #: What all its workers' requests may make it hold together (S-SEC-8).
        frame = self._frame_limits.max_frame_size
        self._byte_budget = ByteBudget(self.config.fleet_answering_frames * frame, reserve=frame)
        self._slots = trio.Semaphore(self.config.max_workers)
        self._stack = contextlib.AsyncExitStack()
        self._nursery: trio.Nursery | None = None
        self._spawners: dict[SpawnMode, Spawner] = {}
        self._ray: RaySpawner | None = None
        self._closed = False
        self._marked = False
        self._landlock_abi_max = landlock_abi_max_from_env()
        self._temp_dirs = WorkerTempDirs()
        #: ``ROOT/.git`` of writable roots that had none when a worker got them:
        #: the worker makes each an empty read-only placeholder (S-SEC-3).
        self._vcs_placeholders: set[str] = set()
        self._user_files_cache: dict[tuple[str, ...], tuple[float, UserFileProtection]] = {}
        #: When each worker with ``swept_roots`` started: they are walked for
        #: planted repositories, from then, once its tree is gone.
        self._sweep_since: dict[str, float] = {}
        self._sweeps = RepositorySweeps()
        self._hidden_paths = tuple(os.path.realpath(p) for p in self.config.hidden_paths)
        self._cgroups: CgroupTree | None = None
        # One thread each: the kernel serializes cgroup changes anyway, and a
        # slow removal (a tree's survivors to kill) must not hold up launches.
        self._cgroup_making = trio.CapacityLimiter(1)
        self._cgroup_removing = trio.CapacityLimiter(1)
        #: How caps over each worker's whole tree are enforced here (S-SEC-4).
        self.tree_caps = "sampling"
        self._sampler = TreeSampler()

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        refuse_inside_worker_tree()
        # Our memory and /proc/PID/environ hold the keys: no process of our
        # uid without CAP_SYS_PTRACE (no worker has it) may read them (S-SEC-1).
        set_dumpable(False)
        _raise_open_files_limit()
        if self.config.tree_caps == "auto":
            self._cgroups, why = CgroupTree.create(self.tree_id)
            self.tree_caps = self._cgroups.mechanism if self._cgroups else f"sampling ({why})"
            if self._cgroups is not None and self._cgroups.cpu_weight_error:
                log.warning(
                    "the fleet has no CPU weight of its own (%s): a worker's tree is "
                    "held below the supervisor by its nice value alone",
                    self._cgroups.cpu_weight_error,
                )
        # What we start outside a worker tree acts for a model (S-SEC-2): it is marked by us.
        mark_supervisor()
        self._marked = True
        try:
            self._nursery = await self._stack.enter_async_context(trio.open_nursery())
            env = worker_environment(self.tree_id)
            self._spawners["exec"] = ExecSpawner(env, self._nursery, nice=self.config.worker_nice)
            zygote = self._zygote_spawner(env, self._nursery)
            self._spawners["zygote"] = zygote
            self._nursery.start_soon(self._watch)
            if self.config.spawn_mode == "zygote":
                await zygote.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    def _zygote_spawner(
        self, env: dict[str, str], nursery: trio.Nursery
    ) -> ZygoteSpawner | RaySpawner:
        if self.config.placement == "ray":
            # Imported only here: Ray is an optional extra.
            from ._ray_spawner import RaySpawner

            self._ray = RaySpawner(
                self.config.ray_address,
                nursery,
                tree_id=self.tree_id,
                hidden=self._hidden_paths,
                standby=self.config.zygote_standby,
                nice=self.config.worker_nice,
                start_timeout=self.config.zygote_start_timeout_s,
                sample_interval_s=self.config.sample_interval_s,
                tree_caps=self.config.tree_caps,
                placement_timeout_s=self.config.spawn_timeout_s,
            )
            return self._ray
        return ZygoteSpawner(
            env,
            nursery,
            start_timeout=self.config.zygote_start_timeout_s,
            stop_grace=max(1.0, self.config.kill_grace_s),
            standby=self.config.zygote_standby,
            hidden=self._hidden_paths,
            nice=self.config.worker_nice,
        )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every worker and the zygote; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._close()
        finally:
            # Also when a cancellation cut the close short: a name left would
            # make everything this process starts later count as ours.
            if self._marked:
                self._marked = False
                unmark_supervisor()

    async def _close(self) -> None:
        with trio.CancelScope(shield=True):
            # A zygote worker is reaped by its zygote. One that cannot answer
            # (stopped, wedged) would leave these waits hanging; closing the
            # spawner below kills it, and its workers end as lost.
            with trio.move_on_after(self.config.kill_grace_s + _REAP_WAIT_S):
                async with trio.open_nursery() as nursery:
                    for handle in list(self.workers.values()):
                        nursery.start_soon(handle.kill, "the supervisor shut down")
            for spawner in self._spawners.values():
                await spawner.aclose()
            if self._cgroups is not None:
                await trio.to_thread.run_sync(self._cgroups.close)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        await self._stack.aclose()
        # Every worker has ended: their temp dirs (and any left by a worker's
        # background jobs) can go.
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._temp_dirs.close)
            await trio.to_thread.run_sync(self._remove_vcs_placeholders)
        self._sweeps.close()

    def _user_files(self, roots: tuple[str, ...]) -> UserFileProtection:
        """``protect_below`` for ``roots``, reused for ``USER_FILES_TTL_S``.

        Resolving every user-level path of every known home costs milliseconds
        a spawn, and a burst of spawns asks with the same roots. What it
        resolves can only be changed by a process outside every restricted
        sandbox: a worker it protects has those paths read-only and the
        directories on the way pinned, and other paths are outside its roots.
        So an answer at most ``USER_FILES_TTL_S`` old misses only what you (or
        a ``full`` worker, which is your own shell) changed within that time.
        """
        now = time.monotonic()
        cached = self._user_files_cache.get(roots)
        if cached is not None and now - cached[0] < USER_FILES_TTL_S:
            return cached[1]
        user = protect_below(self.config.protected_paths, roots, self._hidden_paths)
        self._user_files_cache = {roots: (now, user)}
        return user

    def _remove_vcs_placeholders(self) -> None:
        """Remove each placeholder ``.git`` still empty, now that no worker's namespace binds it.

        One left by a killed supervisor stays, empty: git skips it as if absent.
        One another supervisor's workers still bind stays too: removing a mount
        point on the host unmounts it in every namespace.
        """
        bound = _mount_points_elsewhere(self._vcs_placeholders)
        for path in self._vcs_placeholders - bound:
            with contextlib.suppress(OSError):  # not empty (the user's own git init), or gone
                os.rmdir(path)

    @property
    def zygote_boot_ms(self) -> float | None:
        """How long the zygote took from exec to ready (once started)."""
        zygote = self._spawners.get("zygote")
        return zygote.boot_ms if isinstance(zygote, ZygoteSpawner) else None

    @property
    def zygote_pid(self) -> int | None:
        """The zygote's pid while it runs."""
        zygote = self._spawners.get("zygote")
        return zygote.pid if isinstance(zygote, ZygoteSpawner) else None

    @property
    def remote_nodes(self) -> dict[str, NodeWelcome]:
        """With ``placement = "ray"``: each node with a connected host, as that host said hello."""
        if self._ray is None:
            return {}
        return {node_id: node.welcome for node_id, node in self._ray.nodes.items()}

    # -- spawning -------------------------------------------------------------------

    async def spawn(
        self,
        limits: ResourceLimits | None = None,
        *,
        mode: SpawnMode | None = None,
        worker_id: str | None = None,
        sandbox: SandboxPolicy | None = None,
        handler: RequestHandler | None = None,
        on_queue: Callable[[], None] | None = None,
    ) -> WorkerHandle:
        """Start a worker and return its handle once the handshake is done.

        Waits for a free slot when ``max_workers`` are alive (at most
        ``spawn_timeout_s``); fails once ``max_total_workers`` were started.
        The worker applies ``sandbox`` before its handshake; a filesystem
        sandbox gets a private temp dir, removed when the worker ends. A
        sandbox the worker could not enforce fails the spawn with
        ``SandboxUnsupportedError``, unless the policy says ``warn`` (S-SBX-2).
        ``handler`` answers the worker's requests (``default_request_handler``
        when None): each worker is served by whoever drives it.
        ``on_queue`` is called just before the spawn joins the FIFO queue for
        a slot, with no checkpoint in between (see ``LaunchOrder``).
        """
        limits = limits or self.config.default_limits
        mode = mode or self.config.spawn_mode
        self._admit(limits, mode)
        worker_id = worker_id or f"w_{uuid.uuid4().hex[:12]}"
        await self._acquire_slot(on_queue)
        started = time.time() - CTIME_SLACK_S
        process, policy, cgroup = await self._start_process(worker_id, limits, mode, sandbox)
        handle = WorkerHandle(
            process,
            mode=mode,
            cgroup=cgroup,
            tree_caps=process.tree_caps
            or (self._cgroups.mechanism if cgroup and self._cgroups else "sampling"),
            limits=limits,
            frame_limits=self._frame_limits,
            event_buffer=self.config.event_buffer,
            kill_grace_s=self.config.kill_grace_s,
            write_stall_s=self.config.write_stall_s,
            request_handler=handler or default_request_handler,
            wire_tap=self._wire_tap,
            event_budget=self.config.event_budget,
            byte_budget=self._byte_budget,
        )
        if (
            policy.protect_vcs
            and policy.restricts_filesystem
            and policy.writable_dirs
            and not self._spawners[mode].remote
        ):
            handle.swept_roots = policy.writable_dirs
            self._sweep_since[worker_id] = started
            self._sweeps.begin(worker_id, policy.writable_dirs)
        self.workers[worker_id] = handle
        # From here on the slot belongs to the worker: released when it ends.
        assert self._nursery is not None
        self._nursery.start_soon(self._supervise, handle)
        try:
            await self._handshake(handle)
        except BaseException:
            with trio.CancelScope(shield=True):
                await handle.kill("spawn abandoned before the handshake completed")
            raise
        self._check_cgroup(handle)
        await self._check_sandbox(handle, policy)
        return handle

    def _admit(self, limits: ResourceLimits, mode: SpawnMode) -> None:
        """Refuse a spawn this supervisor cannot make; else count it."""
        if self._nursery is None or self._closed:
            raise SubvisorError("the supervisor is not running: use `async with Supervisor()`")
        if limits.cpus is not None and not self._spawners[mode].remote:
            _check_local_cpus(limits.cpus)
        cap = self.config.max_total_workers
        if cap is not None and self.spawned_total >= cap:
            raise FleetExhaustedError(
                f"this supervisor already started {self.spawned_total} workers, "
                f"its max_total_workers; raise the cap or start a new supervisor"
            )
        self.spawned_total += 1

    async def _start_process(
        self,
        worker_id: str,
        limits: ResourceLimits,
        mode: SpawnMode,
        sandbox: SandboxPolicy | None,
    ) -> tuple[SpawnedProcess, SandboxPolicy, WorkerCgroup | None]:
        """Start the worker's process (its slot is held); undo everything if that fails."""
        cgroup: WorkerCgroup | None = None
        join: list[int] = []
        try:
            # Only now: a launch waiting for a slot holds no temp dir.
            spawner = self._spawners[mode]
            # A worker on another node gets its temp dir there, from its node host;
            # a zygote's worker, from its zygote.
            policy = self._sandbox_policy(
                sandbox or SandboxPolicy(),
                worker_id,
                temp_dir=not spawner.remote,
                make_temp_dir=not spawner.makes_temp_dirs,
            )
            # A worker on another node gets its cgroups there. A local one
            # writes itself into its own first, before anything else: every
            # process of its tree is born inside (S-SEC-4).
            cgroup, join = await self._worker_cgroup(worker_id, limits, local=not spawner.remote)
            process = await spawner.spawn(worker_id, limits, policy, cgroups=join)
        except BaseException:
            self._slots.release()
            self._temp_dirs.remove(self._temp_dirs.release(worker_id))
            if cgroup is not None:
                self._drop_cgroup(worker_id, cgroup)
            raise
        finally:
            for fd in join:
                os.close(fd)
        return process, policy, cgroup

    def _check_cgroup(self, handle: WorkerHandle) -> None:
        """A worker that could not join its cgroups is sampled instead, and said to be."""
        hello, cgroup = handle.hello, handle.cgroup
        if cgroup is None or hello is None or not hello.cgroup_error:
            return
        log.warning(
            "worker %s: could not join its cgroups (%s); its tree is sampled",
            handle.worker_id,
            hello.cgroup_error,
        )
        handle.cgroup, handle.tree_caps = None, "sampling"
        self._drop_cgroup(handle.worker_id, cgroup)

    async def _worker_cgroup(
        self, worker_id: str, limits: ResourceLimits, *, local: bool
    ) -> tuple[WorkerCgroup | None, list[int]]:
        """A local worker's cgroups, with its caps set, and their ``cgroup.procs`` to join.

        Made in a thread: a cgroup ``mkdir`` waits for the kernel's cgroup lock,
        which every worker joining its cgroups holds while the kernel moves it,
        so in a launch storm one blocked for up to 80 ms here (the relay
        benchmark, 500 workers), and the event loop must not. Shielded: what
        the thread made is always returned, so the caller can undo it.
        """
        tree = self._cgroups
        if tree is None or not local:
            return None, []

        def make() -> tuple[WorkerCgroup | None, list[int]]:
            cgroup = None
            try:
                cgroup = tree.add_worker(worker_id, limits)
                return cgroup, cgroup.open_procs()
            except OSError as exc:
                log.warning("worker %s: no cgroup (%s); its tree is sampled", worker_id, exc)
                if cgroup is not None:
                    tree.workers.pop(worker_id, None)
                    cgroup.try_remove()
                return None, []

        with trio.CancelScope(shield=True):
            made = await trio.to_thread.run_sync(make, limiter=self._cgroup_making)
        return made

    def _drop_cgroup(self, worker_id: str, cgroup: WorkerCgroup) -> bool:
        """Forget a cgroup no worker holds; its empty dirs go now, the rest at close.

        True when all of it is gone.
        """
        if self._cgroups is not None:
            self._cgroups.workers.pop(worker_id, None)
        return cgroup.try_remove()

    def _sandbox_policy(
        self,
        policy: SandboxPolicy,
        worker_id: str,
        *,
        temp_dir: bool = True,
        make_temp_dir: bool = True,
    ) -> SandboxPolicy:
        update: dict[str, object] = {}
        hidden = tuple(dict.fromkeys((*policy.hidden_paths, *self._hidden_paths)))
        if hidden != policy.hidden_paths:
            update["hidden_paths"] = hidden
        if policy.landlock_abi_max is None and self._landlock_abi_max is not None:
            update["landlock_abi_max"] = self._landlock_abi_max
        if policy.protect_vcs and policy.mode != "full":
            self._vcs_placeholders.update(missing_vcs_dirs(policy.writable_roots))
        if policy.mode != "full":
            below, holder = own_code_below(policy.writable_dirs)
            if holder is not None:
                raise SpawnError(
                    f"{policy.mode} refused: a writable root holds or is inside subvisor's own "
                    f"code ({holder}), which a worker could rewrite for a gateway process (which "
                    "holds the keys) or a zygote started later to run; install subvisor outside "
                    "the project (`pipx install`, or a virtualenv elsewhere), or run with "
                    "`--sandbox read-only`"
                )
            user = self._user_files(tuple(policy.writable_dirs))
            if user.refused is not None:
                raise SpawnError(
                    f"{policy.mode} refused: {user.refused} leads to a user-level file of "
                    "subvisor's (a user profile dir, its config) and is, or holds, a writable "
                    "root or a symlink directly in one, which a worker could rewrite or replace; "
                    "run from another directory, or with `--sandbox read-only`"
                )
            below = (*below, *user.read_only)
            if below:
                update["read_only_paths"] = tuple(dict.fromkeys((*policy.read_only_paths, *below)))
            if user.pinned:
                update["pinned_paths"] = user.pinned
            if user.uncreatable:
                update["uncreatable_paths"] = user.uncreatable
                self._vcs_placeholders.update(user.uncreatable)
        else:
            # Every place is writable in full: every place of the code is read-only.
            update["read_only_paths"] = tuple(dict.fromkeys((*policy.read_only_paths, *own_code())))
        if temp_dir and policy.restricts_filesystem and policy.temp_dir is None:
            update["temp_dir"] = self._temp_dirs.make(worker_id, create=make_temp_dir)
        return policy.model_copy(update=update) if update else policy

    async def _check_sandbox(self, handle: WorkerHandle, policy: SandboxPolicy) -> None:
        report = handle.sandbox
        isolated = report is not None and report.isolates(policy)
        if isolated and (not policy.requested or (report is not None and report.enforced)):
            return
        message = unsupported_message(policy, report)
        if policy.on_unsupported == "error":
            # It has run nothing yet: tools run only when we ask (S-SBX-2).
            with trio.CancelScope(shield=True):
                await handle.kill("its sandbox could not be enforced")
            raise SandboxUnsupportedError(message)
        log.warning(
            "SANDBOX NOT ENFORCED for worker %s (%s; on_unsupported = warn): %s",
            handle.worker_id,
            policy.label,
            report.reason if report is not None else "no report",
        )

    async def _acquire_slot(self, on_queue: Callable[[], None] | None) -> None:
        timeout = self.config.spawn_timeout_s
        if on_queue is not None:
            on_queue()
        if timeout is None:
            await self._slots.acquire()
            return
        with trio.move_on_after(timeout):
            await self._slots.acquire()
            return
        raise FleetCapacityError(
            f"all {self.config.max_workers} worker slots stayed busy for {timeout:g} s; "
            "raise max_workers or spawn_timeout_s, or stop some workers"
        )

    async def _handshake(self, handle: WorkerHandle) -> None:
        timeout = self.config.handshake_timeout_s
        with trio.move_on_after(timeout) as scope:
            await handle.wait_ready()
        if scope.cancelled_caught:
            exit = await handle.kill(f"no handshake within {timeout:g} s")
            raise SpawnError(
                f"worker {handle.worker_id} did not complete its handshake: {exit.reason}"
            )
        if handle.hello is None:
            exit = await handle.wait()
            raise SpawnError(f"worker {handle.worker_id} ended before its handshake: {exit.reason}")

    async def _supervise(self, handle: WorkerHandle) -> None:
        released = False

        async def release() -> tuple[str, ...]:
            nonlocal released
            if released:
                return ()
            released = True
            self.workers.pop(handle.worker_id, None)
            self._slots.release()
            cgroup = handle.cgroup
            if cgroup is not None:
                if self._cgroups is not None:
                    self._cgroups.workers.pop(handle.worker_id, None)
                await trio.to_thread.run_sync(
                    _remove_worker_cgroup, cgroup, limiter=self._cgroup_removing
                )
            doomed = self._temp_dirs.release(handle.worker_id)
            if doomed:
                await trio.to_thread.run_sync(self._temp_dirs.remove, doomed)
            since = self._sweep_since.pop(handle.worker_id, None)
            if since is None:
                return ()
            # Its tree is gone (its cgroup removed): nothing of it races the walk.
            return await self._sweeps.after(handle.worker_id, handle.swept_roots, since)

        try:
            await handle.supervise(release)
        except Exception:
            # A bug in supervising one worker must not take the fleet down.
            log.exception("supervising worker %s failed", handle.worker_id)
        finally:
            with trio.CancelScope(shield=True):
                await release()

    async def _watch(self) -> None:
        """Each round, judge every worker: its deadlines, and its tree against its caps.

        One task for the fleet, not a watchdog task per worker. A worker over
        a cap is stopped at once, naming it (S-SEC-4); one past its wall or
        idle deadline after the usual grace.
        """
        assert self._nursery is not None
        interval = self.config.sample_interval_s
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            handles = [h for h in self.workers.values() if not h.stopping]
            if any(h.cgroup is None and h.node is None for h in handles):
                self._sampler.refresh()
            for index, handle in enumerate(handles):
                if index and index % _WATCH_SLICE == 0:
                    # A round over 500 workers reads 1500 cgroup files, 5-9 ms
                    # of CPU: in one step, every launch, approval and streamed
                    # text waited for it. Between slices a worker may have
                    # ended or been stopped: it is judged no more.
                    await trio.lowlevel.checkpoint()
                    now = trio.current_time()
                if handle.stopping or self.workers.get(handle.worker_id) is not handle:
                    continue
                overdue = handle.overdue(now)
                if overdue is not None:
                    self._nursery.start_soon(handle.terminate, *overdue)
                    continue
                if handle.node is not None:
                    continue  # its tree is judged on its node, by its node host
                # The peak RSS comes with the exit status; ``top`` samples it live.
                found = tree_breach(
                    handle.pid, handle.limits, handle.cgroup, self._sampler, handle.tree_caps
                )
                if found is not None:
                    # No grace: a memory or fork bomb keeps growing while it is asked nicely.
                    kind, reason = found
                    self._nursery.start_soon(
                        functools.partial(handle.terminate, kind, reason, grace=0)
                    )


def _check_local_cpus(cpus: float) -> None:
    """A local worker's ``cpus`` claim: refused above this machine's CPUs, else placement only.

    Nothing reserves or throttles CPUs on this machine (no CPU quota): the
    claim matters for placement on a cluster, where a node must have them free.
    """
    available = len(os.sched_getaffinity(0))
    if cpus > available:
        raise UnplaceableError(
            f"it asks for {cpus:g} CPUs and this machine has {available}; "
            "lower the profile's cpus or run with --ray on a cluster with a node that large"
        )


def _mount_points_elsewhere(paths: set[str]) -> set[str]:
    """Those of ``paths`` that are a mount point in some mount namespace we can read."""
    found: set[str] = set()
    seen: set[str] = set()
    escaped = {p.replace("\\", "\\134").replace(" ", "\\040"): p for p in paths}
    for pid in (name for name in os.listdir("/proc") if name.isdigit()):
        try:
            namespace = os.readlink(f"/proc/{pid}/ns/mnt")
            if namespace in seen:
                continue
            seen.add(namespace)
            with open(f"/proc/{pid}/mountinfo") as f:
                found.update(escaped[m] for m in (line.split()[4] for line in f) if m in escaped)
        except (OSError, IndexError):
            continue
    return found


def _remove_worker_cgroup(cgroup: WorkerCgroup) -> None:
    """Remove a worker's cgroups when it ends (blocking: a thread's work).

    Mostly empty by now: one ``rmdir`` each. Else what its tree left running
    dies with it (S-SEC-5), bounded; one still busy (a zombie not yet
    reaped) is removed at close. Never on the event loop: an ``rmdir`` takes
    the kernel's cgroup lock (see ``Supervisor._worker_cgroup``).
    """
    if not cgroup.try_remove():
        cgroup.remove(deadline_s=0.25)
