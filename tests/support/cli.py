"""Running the ``subvisor`` command line in a subprocess, as a user would."""

from __future__ import annotations

import atexit
import inspect
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.cli_forkserver import ANSWER

__all__ = ["CHECKOUT", "cli_env", "run_cli", "start_cli"]

#: This checkout: a child started in another directory imports its code, not an installed copy.
CHECKOUT = Path(__file__).resolve().parents[2]
#: Set to 1 to start every ``run_cli`` child cold (``python -m supervisor.cli``), unforked.
COLD_ENV = "SUBVISOR_TESTS_COLD_CLI"
#: The environment this process started with, before any test changed it.
_STARTING_ENVIRON = dict(os.environ)
#: What a forked child's environment may differ in: its home, the user's (each test has
#: its own), and the name pytest gives the test that runs.
_PER_CALL = ("SUBVISOR_HOME", "HOME", "PYTEST_CURRENT_TEST")


def cli_env(home: Path) -> dict[str, str]:
    """This environment for a ``subvisor`` child: its own home, wide output, not in a tree,
    this checkout's code whatever its working directory."""
    return _child_env(home, os.environ)


def _child_env(home: Path, environ: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k not in ("SUBVISOR_TREE", "SUBVISOR_MODEL")}
    env["SUBVISOR_HOME"] = str(home)
    env["COLUMNS"] = "200"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHECKOUT), env.get("PYTHONPATH")]))
    return env


def run_cli(
    home: Path, *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``subvisor ARGS`` to completion, its output captured, like ``subprocess.run``.

    The child is a process of its own, ``python -m supervisor.cli ARGS`` with
    ``cli_env(home)``: forked, as ``tests.support.cli_forkserver`` says, by a
    warm interpreter that has already done the imports every cold start does
    first (0.7 s a call; the suite makes about 200). A forked child's
    ``/proc/PID/environ`` and ``cmdline`` are that interpreter's, so where the
    environment differs from it in more than the home (say a key a test put
    there for a subagent to look for) the child is started cold instead.
    """
    # As subprocess.run does it, on the Popen that start_cli gives.
    with start_cli(
        home, *args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def start_cli(
    home: Path, *args: str, cwd: Path | None = None, **options: Any
) -> subprocess.Popen[Any]:
    """``subvisor ARGS`` started with ``cli_env(home)``, as ``subprocess.Popen`` starts it
    (``options`` are Popen's: pipes, ``text``, ``start_new_session``); forked warm where the
    warm interpreter can serve the call (see ``run_cli``), else cold. Either way the result
    is a ``subprocess.Popen``."""
    env = cli_env(home)
    argv = [sys.executable, "-m", "supervisor.cli", *args]
    warm = _warm_cli()
    if (
        warm is not None
        and _WarmPopen.WORKS
        and options.keys() <= _WarmPopen.OPTIONS
        and warm.serves(env, cwd)
    ):
        try:
            return _WarmPopen(warm, argv, cwd=cwd, env=env, **options)
        except _NotForked:
            pass
    return subprocess.Popen(argv, cwd=cwd, env=env, **options)


class _NotForked(Exception):
    """The warm interpreter is gone: the call was not made."""


class _WarmCli:
    """The test process's end of ``tests.support.cli_forkserver``."""

    def __init__(self) -> None:
        self.env = _child_env(Path("/nonexistent/home-of-the-warm-cli"), _STARTING_ENVIRON)
        self._lock = threading.Lock()
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Its stdout is a pipe, as a `run_cli` child's is: Python buffers stdout by what
        # fd 1 is when it starts, and a forked child keeps that.
        unread, stdout = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.cli_forkserver", str(theirs.fileno())],
                cwd=CHECKOUT,
                env=self.env,
                stdout=stdout,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
            os.close(unread)
            os.close(stdout)
        atexit.register(self.close)

    def serves(self, env: dict[str, str], cwd: Path | None) -> bool:
        """Whether a forked child would be what a cold start is, for this call."""
        if self.process.poll() is not None or (cwd is not None and not Path(cwd).is_dir()):
            return False
        mine = {k: v for k, v in self.env.items() if k not in _PER_CALL}
        return mine == {k: v for k, v in env.items() if k not in _PER_CALL}

    def start(
        self,
        args: list[str],
        cwd: str | None,
        env: dict[str, str],
        stdio: list[int],
        *,
        new_session: bool = False,
    ) -> tuple[socket.socket, int]:
        """Fork ``subvisor ARGS`` on ``stdio`` (its fds 0, 1, 2); its answer socket and pid.

        Raises ``_NotForked`` where the warm interpreter is gone.
        """
        answers, theirs = socket.socketpair()
        call = {
            "args": args,
            "cwd": cwd or os.getcwd(),
            "env": env,
            "new_session": new_session,
        }
        try:
            with self._lock:
                socket.send_fds(self._control, [pickle.dumps(call)], [theirs.fileno(), *stdio])
            pid = _read_answer(answers)
        except OSError as exc:
            answers.close()
            raise _NotForked from exc
        finally:
            theirs.close()
        if pid is None:
            answers.close()
            raise _NotForked
        return answers, pid

    def close(self) -> None:
        self._control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _WarmPopen(subprocess.Popen[Any]):
    """A ``subprocess.Popen`` whose child the warm interpreter forks: Popen does the rest
    (pipes, ``communicate``, signals); only starting the child and learning its wait status
    go through the warm interpreter, the child's parent."""

    #: The Popen options it takes (any other starts the child cold).
    OPTIONS = frozenset({"stdin", "stdout", "stderr", "text", "start_new_session"})
    #: Whether this Python's Popen starts its child as this class expects (3.11 to 3.13).
    WORKS = tuple(inspect.signature(subprocess.Popen._execute_child).parameters) == (
        "self", "args", "executable", "preexec_fn", "close_fds", "pass_fds", "cwd", "env",
        "startupinfo", "creationflags", "shell", "p2cread", "p2cwrite", "c2pread",
        "c2pwrite", "errread", "errwrite", "restore_signals", "gid", "gids", "uid", "umask",
        "start_new_session", "process_group",
    )  # fmt: skip

    def __init__(self, warm: _WarmCli, argv: list[str], **options: Any) -> None:
        self._warm = warm
        self._answers: socket.socket | None = None
        super().__init__(argv, **options)

    def _execute_child(  # type: ignore[override]
        self, args: list[str], executable: Any, preexec_fn: Any, close_fds: bool,
        pass_fds: Any, cwd: str | None, env: dict[str, str], startupinfo: Any,
        creationflags: int, shell: bool, p2cread: int, p2cwrite: int, c2pread: int,
        c2pwrite: int, errread: int, errwrite: int, restore_signals: bool, gid: Any,
        gids: Any, uid: Any, umask: int, start_new_session: bool, process_group: int,
    ) -> None:  # fmt: skip
        # A stream Popen leaves alone (-1) is inherited, as from a fork. On _NotForked,
        # Popen closes what it opened, as when any start fails.
        stdio = [fd if fd != -1 else std for std, fd in enumerate((p2cread, c2pwrite, errwrite))]
        self._answers, self.pid = self._warm.start(
            list(args)[3:], cwd, env, stdio, new_session=start_new_session
        )
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        """``waitpid`` of the child, through the warm interpreter that reaps it."""
        answers = self._answers
        if answers is None:
            return self.pid, 0  # as Popen reports a child it cannot wait for
        if wait_flags & os.WNOHANG and not select.select([answers], [], [], 0)[0]:
            return 0, 0
        status = _read_answer(answers)
        answers.close()
        self._answers = None
        return self.pid, 0 if status is None else status

    def _internal_poll(self, _deadstate: int | None = None, **_: Any) -> int | None:
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def _read_answer(answers: socket.socket) -> int | None:
    """The next number on an answer socket (None at its end), waiting for it."""
    data = b""
    while len(data) < ANSWER.size:
        if not (piece := answers.recv(ANSWER.size - len(data))):
            return None
        data += piece
    (number,) = ANSWER.unpack(data)
    return number


_warm: _WarmCli | None = None
_warm_failed = False
_warm_lock = threading.Lock()


def _warm_cli() -> _WarmCli | None:
    """The warm interpreter, started at the first call; None where it cannot serve."""
    global _warm, _warm_failed
    if os.environ.get(COLD_ENV) == "1":
        return None
    with _warm_lock:
        if _warm is None and not _warm_failed:
            try:
                _warm = _WarmCli()
            except OSError as exc:
                _warm_failed = True
                warnings.warn(f"no warm CLI server ({exc}): every call starts cold", stacklevel=3)
        return _warm
