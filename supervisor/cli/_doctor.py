"""``subvisor doctor``: check that this machine can run subvisor, and how fast."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import socket
import sys
import tempfile
import time
from dataclasses import dataclass

import trio

from protocol import KERNEL_ECHO, NETWORK_ABI, EchoParams, ResourceLimits, SandboxPolicy
from worker import landlock_abi

from ..kernel import (
    LANDLOCK_ABI_MAX_ENV,
    SpawnMode,
    SubvisorError,
    Supervisor,
    SupervisorConfig,
    landlock_abi_max_from_env,
    mode_enforcement,
)

__all__ = ["Check", "run_checks"]

_PR_GET_PDEATHSIG = 2
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass(frozen=True, slots=True)
class Check:
    """One doctor finding."""

    name: str
    ok: bool
    detail: str


def _platform_checks() -> list[Check]:
    checks = [
        Check(
            "platform",
            sys.platform == "linux",
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
            + ("" if sys.platform == "linux" else ": subvisor needs Linux"),
        ),
        Check(
            "fork",
            hasattr(os, "fork"),
            "os.fork available"
            if hasattr(os, "fork")
            else "os.fork missing: only exec spawn mode could work",
        ),
    ]
    try:
        fd = os.pidfd_open(os.getpid())
        os.close(fd)
        checks.append(Check("pidfd", True, "pidfd_open works (exact, race-free reaping)"))
    except (AttributeError, OSError) as exc:
        checks.append(Check("pidfd", False, f"pidfd_open failed: {exc} (needs Linux >= 5.3)"))
    value = ctypes.c_int(0)
    ok = _LIBC.prctl(_PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) == 0
    checks.append(
        Check(
            "prctl", ok, "parent-death signal available" if ok else "prctl(PR_GET_PDEATHSIG) failed"
        )
    )
    try:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        a.close()
        b.close()
        checks.append(
            Check("seqpacket", True, "AF_UNIX SOCK_SEQPACKET for the zygote control socket")
        )
    except OSError as exc:
        checks.append(Check("seqpacket", False, f"SOCK_SEQPACKET unavailable: {exc}"))
    return checks


async def _spawn_check(sup: Supervisor, mode: SpawnMode) -> Check:
    try:
        started = time.perf_counter()
        handle = await sup.spawn(ResourceLimits(), mode=mode)
        ready_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        echoed = (await handle.request(KERNEL_ECHO, EchoParams(value="doctor"))).value
        roundtrip_us = (time.perf_counter() - started) * 1e6
        exit = await handle.shutdown()
    except SubvisorError as exc:
        return Check(f"spawn ({mode})", False, str(exc))
    ok = echoed == "doctor" and exit.ok
    return Check(
        f"spawn ({mode})",
        ok,
        f"ready in {ready_ms:.1f} ms, echo round trip {roundtrip_us:.0f} us, {exit.reason}",
    )


def _sandbox_checks() -> list[Check]:
    """The Landlock ABI, and what each sandbox mode will enforce with it (S-SBX-1)."""
    ceiling = landlock_abi_max_from_env()
    abi = landlock_abi(ceiling)
    seam = f" (capped by {LANDLOCK_ABI_MAX_ENV}={ceiling})" if ceiling is not None else ""
    if abi >= NETWORK_ABI:
        detail = f"Landlock ABI {abi}{seam}: every sandbox mode and network deny are enforced"
    else:
        detail = (
            f"Landlock ABI {abi}{seam}: "
            + ("absent or disabled" if abi == 0 else "too old")
            + f"; the default sandboxes need ABI >= {NETWORK_ABI} (Linux >= 6.7 with landlock "
            'in the LSM list), or put sandbox.on_unsupported = "warn" in subvisor.toml to run '
            "unenforced"
        )
    checks = [Check("landlock", abi >= NETWORK_ABI, detail)]
    for mode, ok, what in mode_enforcement(abi):
        # Informational: what cannot be enforced is already the landlock check's failure.
        checks.append(Check(f"sandbox {mode}", True, what if ok else f"NOT enforced: {what}"))
    return checks


async def _sandboxed_spawn_check(sup: Supervisor) -> Check:
    name = "spawn (sandboxed)"
    try:
        started = time.perf_counter()
        handle = await sup.spawn(sandbox=SandboxPolicy(mode="read-only", network="deny"))
        ready_ms = (time.perf_counter() - started) * 1000
        report = handle.sandbox
        await handle.shutdown()
    except SubvisorError as exc:
        return Check(name, False, str(exc))
    ok = report is not None and report.enforced
    summary = report.summary if report is not None else "no sandbox report"
    return Check(name, ok, f"ready in {ready_ms:.1f} ms, {summary}")


_PR_GET_DUMPABLE = 3


async def _protection_checks(sup: Supervisor, scratch: str) -> list[Check]:
    """Each protection of the boundary (S-SEC-1..7), as a real worker reports it in force."""
    home, project = os.path.join(scratch, "home"), os.path.join(scratch, "project")
    os.makedirs(os.path.join(project, ".git"))
    os.makedirs(home)
    checks: list[Check] = []
    policies = {
        "full": SandboxPolicy(mode="full", network="allow", hidden_paths=(home,)),
        "workspace-write": SandboxPolicy(
            mode="workspace-write", writable_roots=(project,), hidden_paths=(home,)
        ),
    }
    reports = {}
    nice: int | None = None
    for mode, policy in policies.items():
        try:
            handle = await sup.spawn(sandbox=policy.model_copy(update={"on_unsupported": "warn"}))
            reports[mode] = handle.sandbox
            nice = handle.hello.nice if handle.hello is not None else None
            await handle.shutdown()
        except SubvisorError as exc:
            checks.append(Check(f"protections ({mode})", False, str(exc)))
    full, write = reports.get("full"), reports.get("workspace-write")
    if full is not None:
        checks.append(
            Check(
                "no capabilities",
                full.privileges_dropped,
                "every capability dropped (bounding set too), no_new_privs"
                if full.privileges_dropped
                else f"NOT enforced: a worker keeps capabilities ({full.reason})",
            )
        )
        hidden = home in full.hidden
        checks.append(
            Check(
                "home hidden",
                hidden,
                f"subvisor's home is out of every worker's reach, by {full.isolation}"
                if hidden
                else f"NOT enforced: {full.reason}",
            )
        )
        checks.append(
            Check(
                "landlock domain",
                full.landlock_domain,
                "every worker, full mode too, is in a Landlock domain (no ptrace or "
                f"/proc/PID/environ outside it); scopes: {', '.join(full.scopes) or 'none'}"
                if full.landlock_domain
                else "NOT enforced: no Landlock domain; ptrace and environ rest on "
                "capabilities and non-dumpable processes alone",
            )
        )
    if full is not None:
        checks.append(
            Check(
                "syscall filter",
                full.syscall_filter,
                "every worker has a seccomp filter: no prlimit or scheduling change on another "
                "process, no user namespace, no kernel keyring (add_key, request_key, keyctl), "
                "no netlink socket but route and sock_diag (no proc connector), no SIGSTOP; "
                "under network deny no socket but TCP (which Landlock refuses) and local ones"
                if full.syscall_filter
                else f"NOT enforced: no seccomp filter ({full.reason})",
            )
        )
        checks.append(
            Check(
                "other processes hidden",
                full.processes_hidden,
                "every worker has a /proc of its own (hidepid=ptraceable): it sees its own "
                "tree's processes, no other process's command line"
                if full.processes_hidden
                else "NOT enforced: every process's command line is readable by a worker "
                f"({full.reason})",
            )
        )
        checks.append(
            Check(
                "ipc namespace",
                full.ipc_namespace,
                "every worker has an IPC namespace of its own: its shared memory, semaphores "
                "and message queues end with its tree"
                if full.ipc_namespace
                else f"NOT enforced: workers share the IPC namespace ({full.reason})",
            )
        )
    if write is not None:
        temps = os.path.dirname((write.temp_dir or "").rstrip("/"))
        private = bool(write.temp_dir) and temps in write.hidden
        checks.append(
            Check(
                "temp dirs",
                private,
                "a sandboxed worker sees its own temp dir and no other worker's"
                if private
                else f"NOT enforced: other workers' temp dirs are visible ({write.reason})",
            )
        )
        checks.append(
            Check(
                "unix sockets",
                write.unix_sockets_blocked,
                "a read-only or workspace-write worker makes no UNIX socket (socketpairs only), "
                "so it reaches no socket file (Docker's, D-Bus, an ssh-agent), whatever its "
                "network; `allow_unix_sockets = true` in config.toml lifts it"
                if write.unix_sockets_blocked
                else "NOT enforced: a sandboxed worker can connect to any socket file it can "
                f"name ({write.reason})",
            )
        )
        git = os.path.join(project, ".git")
        checks.append(
            Check(
                ".git read-only",
                git in write.read_only,
                f"a workspace-write worker cannot write .git, by {write.isolation}"
                if git in write.read_only
                else f"NOT enforced: {write.reason}",
            )
        )
        checks.append(
            Check(
                "file metadata",
                write.metadata_read_only,
                "outside the paths it may write, a restricted worker's mounts are read-only: "
                "no file's mode, times or xattrs change (chmod, touch, setfattr)"
                if write.metadata_read_only
                else "NOT enforced: a restricted worker can chmod, touch and set xattrs on "
                f"files it owns but may not write ({write.reason})",
            )
        )
    dumpable = _LIBC.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    checks.append(
        Check(
            "not dumpable",
            dumpable == 0,
            "the supervisor and zygote are not dumpable (memory and environ closed)"
            if dumpable == 0
            else "NOT enforced: the supervisor is dumpable",
        )
    )
    scoped = full is not None and "abstract-unix-socket" in full.scopes
    checks.append(
        Check(
            "control channel",
            True,
            "an abstract socket that refuses peers of another uid or inside a worker tree"
            + (", beyond every worker's abstract-socket scope" if scoped else ""),
        )
    )
    checks.append(
        Check(
            "no survivors",
            True,
            "workers and the zygote are child subreapers: setsid and double forks stay in the "
            "tree, which is killed when its worker ends or the supervisor dies (even SIGKILL)",
        )
    )
    if nice is not None:
        wanted = sup.config.worker_nice
        checks.append(
            Check(
                "worker priority",
                nice >= wanted,
                f"every worker runs at nice {nice} (SCHED_BATCH) and cannot lower it: under "
                "load the supervisor, which serves every agent, runs first"
                if nice >= wanted
                else f"NOT in force: a worker runs at nice {nice}, not {wanted}",
            )
        )
    capped = sup.tree_caps.startswith("cgroup")
    checks.append(
        Check(
            "tree caps",
            True,
            f"memory, process and CPU caps over each worker's whole tree by {sup.tree_caps}; "
            "file size by RLIMIT_FSIZE (space reserved past a file's end by seccomp)"
            + ("" if capped else " (sampled: a breach is seen at the next sample)"),
        )
    )
    return checks


async def _process_checks() -> list[Check]:
    checks: list[Check] = []
    async with Supervisor(SupervisorConfig(spawn_mode="zygote")) as sup:
        checks.append(
            Check("zygote", True, f"booted with the worker stack in {sup.zygote_boot_ms:.0f} ms")
        )
        for mode in ("zygote", "exec"):
            checks.append(await _spawn_check(sup, mode))
        checks.append(await _sandboxed_spawn_check(sup))
        with tempfile.TemporaryDirectory(prefix="subvisor-doctor-") as scratch:
            checks.extend(await _protection_checks(sup, scratch))
    return checks


def run_checks() -> list[Check]:
    """Run every check; never raises for an unhealthy machine, it reports it."""
    checks = _platform_checks()
    if all(check.ok for check in checks):
        checks.extend(_sandbox_checks())
        try:
            checks.extend(trio.run(_process_checks))
        except (SubvisorError, OSError) as exc:
            checks.append(Check("supervisor", False, f"could not start: {exc}"))
    return checks
