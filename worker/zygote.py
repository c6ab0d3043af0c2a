"""The zygote: a single-threaded fork server for worker processes.

Started once per supervisor by exec (``python -m worker.zygote``) with a
scrubbed environment. It imports the worker stack, plays a worker's common
path once (``_rehearsal``, so forks start with that code warm), freezes the
GC (so forked children share those pages instead of copying them when the
collector walks them), and then forks one worker per ``spawn`` datagram on
its control socket. It reaps every worker and reports each wait status with
its resource usage, so the supervisor learns of a death as soon as the
kernel does.

Races handled here:
- The zygote and each worker arm a parent-death signal and then re-check
  ``getppid()``: the parent may have died before the signal was armed.
- The zygote calls ``setpgid`` for the child as well as the child for itself,
  so the worker's process group exists before the supervisor hears its pid,
  whichever of the two runs first after ``fork``.
- SIGCHLD only wakes the loop (through the wakeup fd); reaping is a
  ``wait4(-1, WNOHANG)`` loop, because signals coalesce.
- The zygote is a child subreaper: what a dead worker left running is
  re-parented to it, and it SIGKILLs every child that is neither a worker
  nor a standby, each time it reaps (a killed orphan's own children come
  back to it the same way, one round later).
- Its parent-death signal is SIGTERM, handled, not SIGKILL: when the
  supervisor dies, even by SIGKILL, the zygote still takes every worker and
  everything below them down before it exits (S-SEC-5).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import selectors
import signal
import socket
import stat
import sys
import traceback

# The worker stack, imported once here so every fork starts with it loaded
# (``worker/__init__`` has already pulled in the runtime and what it uses).
import msgpack  # noqa: F401
import pydantic  # noqa: F401
import trio  # noqa: F401

from protocol import (
    MAX_CONTROL_DATAGRAM,
    WORKER_PROCESS_NAME,
    ZYGOTE_PROCESS_NAME,
    RemoteProtocolError,
    SpawnFailed,
    SpawnWorker,
    WorkerExited,
    WorkerSpawned,
    ZygoteReady,
    decode_spawn_request,
    encode_control,
)

from ._fdpass import FD_SIZE, MAX_SPAWN_FDS, close_fds_except, fds_ancillary, received_fds
from ._privileges import set_child_subreaper, set_dumpable
from ._process import die_with_parent, end_tree_with_parent, lower_priority, set_process_name
from ._rehearsal import RehearsalError, rehearse
from ._runtime import EXIT_INTERNAL_ERROR, run_standby, run_worker
from ._sandbox import isolate_mounts
from ._subtree import kill_descendants, signal_subtrees

__all__ = ["main"]

#: How many nice levels below the supervisor the zygote runs (never below its workers).
ZYGOTE_NICE_STEP = 5


class Zygote:
    """The fork server's state: control socket, wakeup pipe, live workers."""

    def __init__(self, control: socket.socket, *, standby: int = 0, nice: int = 0) -> None:
        self.control = control
        self.nice = nice
        self.pid = os.getpid()
        self.workers: dict[int, str] = {}
        self.standby_target = standby
        # Pre-forked children with their runtime already started, each
        # waiting on its end of a socket pair for a worker id and pipes.
        self.standbys: list[tuple[int, socket.socket]] = []
        self.terminating = False
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGTERM, self._on_terminate)

    def _on_terminate(self, signum: int, frame: object) -> None:
        self.terminating = True

    def report(self, message: WorkerSpawned | SpawnFailed | WorkerExited | ZygoteReady) -> None:
        self.control.send(encode_control(message))

    def serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.control, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj is self.control:
                    if not self.handle_control():
                        return
                else:
                    self.drain_wakeups()
            if self.terminating:
                return
            self.reap()
            # Refilled after the spawn was answered: the fork is off the
            # spawn's critical path.
            self.fill_standbys()

    def handle_control(self) -> bool:
        try:
            data, ancdata, _, _ = self.control.recvmsg(
                MAX_CONTROL_DATAGRAM, socket.CMSG_SPACE(MAX_SPAWN_FDS * FD_SIZE)
            )
        except ConnectionResetError:
            return False
        fds = received_fds(ancdata)
        if not data:
            return False
        try:
            request = decode_spawn_request(data)
            if len(fds) != 2 + request.cgroups:
                raise RemoteProtocolError(
                    f"spawn request carried {len(fds)} fds, expected {2 + request.cgroups}"
                )
        except RemoteProtocolError as exc:
            for fd in fds:
                os.close(fd)
            self.report(SpawnFailed(worker_id="?", error=str(exc)))
            return True
        self.fork_worker(request, fds)
        return True

    def fill_standbys(self) -> None:
        while len(self.standbys) < self.standby_target:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                pid = os.fork()
            except OSError:
                ours.close()
                theirs.close()
                return  # no standby now; spawns fork directly
            if pid == 0:
                self.become_standby(theirs.fileno())
            theirs.close()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.setpgid(pid, pid)
            self.standbys.append((pid, ours))

    def become_standby(self, assign_fd: int) -> None:
        code = EXIT_INTERNAL_ERROR
        try:
            self.prepare_child({assign_fd})
            code = run_standby(assign_fd)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def assign_standby(self, request: SpawnWorker, fds: list[int]) -> int | None:
        """Hand the request and its fds to a waiting standby; its pid, or None if none could."""
        while self.standbys:
            pid, sock = self.standbys.pop(0)
            try:
                sock.sendmsg([encode_control(request)], fds_ancillary(fds))
            except OSError:
                # It died while waiting; the reaper will collect it.
                continue
            finally:
                sock.close()
            return pid
        return None

    def fork_worker(self, request: SpawnWorker, fds: list[int]) -> None:
        """Fork (or assign a standby) for ``request``; ``fds``: its pipe ends, then cgroups."""
        refused = _make_temp_dir(request.sandbox.temp_dir)
        if refused:
            _close_all(fds)
            self.report(SpawnFailed(worker_id=request.worker_id, error=refused))
            return
        pid = self.assign_standby(request, fds)
        if pid is not None:
            _close_all(fds)
            self.workers[pid] = request.worker_id
            self.report(WorkerSpawned(worker_id=request.worker_id, pid=pid))
            return
        try:
            pid = os.fork()
        except OSError as exc:
            _close_all(fds)
            self.report(SpawnFailed(worker_id=request.worker_id, error=f"fork failed: {exc}"))
            return
        if pid == 0:
            self.become_worker(request, fds)
        # The child may have got there first (or already exited); both are fine.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.setpgid(pid, pid)
        _close_all(fds)
        self.workers[pid] = request.worker_id
        self.report(WorkerSpawned(worker_id=request.worker_id, pid=pid))

    def become_worker(self, request: SpawnWorker, fds: list[int]) -> None:
        code = EXIT_INTERNAL_ERROR
        try:
            self.prepare_child(set(fds))
            code = run_worker(
                fds[0],
                fds[1],
                worker_id=request.worker_id,
                limits=request.limits,
                spawn_mode="zygote",
                sandbox=request.sandbox,
                cgroup_fds=fds[2:],
            )
        except BaseException:
            traceback.print_exc()
        finally:
            # Never return into the zygote's loop from a child.
            os._exit(code)

    def prepare_child(self, keep: set[int]) -> None:
        """In a fresh child: shed the zygote's signal setup and fds, own group, die with it."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Inherit nothing of the zygote's (control socket, selector, wakeup
        # pipe, other standbys' sockets): only stdio and ``keep``.
        close_fds_except({0, 1, 2, *keep})
        set_process_name(WORKER_PROCESS_NAME)
        os.setpgid(0, 0)
        end_tree_with_parent(self.pid)
        # Standbys too: their start-up must not compete with the supervisor either.
        lower_priority(self.nice)

    def drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def reap(self) -> None:
        reaped = False
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped = True
            worker_id = self.workers.pop(pid, None)
            if worker_id is None:
                # A standby that died unassigned (it is refilled), or an
                # adopted orphan.
                self.standbys = [(p, s) for p, s in self.standbys if p != pid]
                continue
            self.report(
                WorkerExited(
                    worker_id=worker_id,
                    pid=pid,
                    exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                    cpu_seconds=usage.ru_utime + usage.ru_stime,
                    max_rss_kb=usage.ru_maxrss,
                )
            )
        if reaped:
            self.kill_orphans()

    def kill_orphans(self) -> None:
        """SIGKILL what dead workers left behind: every child not a worker or standby."""
        signal_subtrees(keep={*self.workers, *(pid for pid, _ in self.standbys)})

    def kill_all(self) -> None:
        for pid, sock in self.standbys:
            sock.close()
            self.workers[pid] = "standby"
        self.standbys.clear()
        for pid in list(self.workers):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        # Every worker, standby and whatever lives below them, adopted
        # orphans included, until no child is left.
        kill_descendants()


def _make_temp_dir(path: str | None) -> str:
    """Make a worker's temp dir (mode 0700) unless it is there already; why not, or ``""``.

    One there already must be a directory of ours, not a symlink: the
    worker's ``TMPDIR`` and its one writable place in ``read-only``. The
    supervisor names it (``SpawnWorker``) under its own 0700 dir, where no
    worker can write.
    """
    if path is None:
        return ""
    try:
        os.mkdir(path, 0o700)
        return ""
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot make its temp dir {path}: {exc.strerror or exc}"
    try:
        st = os.lstat(path)
    except OSError as exc:  # removed since: the zygote's loop must not die of it
        return f"cannot check its temp dir {path}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return f"its temp dir {path} exists and is not a directory of this user's: refused"
    return ""


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m worker.zygote --control-fd N --parent-pid P``."""
    parser = argparse.ArgumentParser(prog="python -m worker.zygote")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--standby", type=int, default=0, help="pre-forked workers to keep")
    parser.add_argument("--nice", type=int, default=0, help="every worker's nice value")
    parser.add_argument("--hide", action="append", default=[], help="a path no worker may reach")
    args = parser.parse_args(argv)
    # Until the Zygote installs its handler, SIGTERM's default (exit) is
    # right: no worker exists yet.
    die_with_parent(args.parent_pid, signal.SIGTERM)
    set_process_name(ZYGOTE_PROCESS_NAME)
    set_child_subreaper()
    # Between the supervisor and the workers. A launch is mostly the
    # supervisor's work (~8 ms of CPU against the fork's ~5), and the zygote
    # shares the supervisor's scheduling group (its session's autogroup):
    # at equal weight, in a launch storm it took the CPU that the
    # supervisor's launches and streamed text were waiting for. Raising a
    # nice value needs no privilege; it is the workers' when they run as equals.
    step = min(ZYGOTE_NICE_STEP, args.nice)
    if step > 0:
        os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + step))
    # One mount namespace for every worker this zygote forks: a spawn pays
    # nothing for it. A failure is left for each worker to carve with
    # Landlock instead, and to report.
    isolate_mounts(args.hide)
    # Not dumpable (after the namespace: a user namespace needs us dumpable to
    # map uids): no worker may read our memory or ptrace us (S-SEC-1).
    set_dumpable(False)
    control = socket.socket(fileno=args.control_fd)
    # A worker's common path, run once here, starts every fork warm (see
    # ``_rehearsal``); it also does trio's first-run setup in the pages every
    # fork shares. It leaves no thread behind.
    try:
        rehearse()
    except RehearsalError as exc:
        print(f"subvisor zygote: {exc}; workers start cold", file=sys.stderr)
    gc.collect()
    gc.freeze()
    zygote = Zygote(control, standby=max(0, args.standby), nice=args.nice)
    if os.getppid() != args.parent_pid:
        return 0  # the SIGTERM may have come before its handler
    zygote.report(ZygoteReady(pid=os.getpid()))
    zygote.fill_standbys()
    try:
        zygote.serve()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        # The supervisor closed the control socket (or died): no worker may
        # outlive it.
        zygote.kill_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
