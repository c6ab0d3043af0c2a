"""A warm ``python -m supervisor.cli``: one fresh process forked per call (tests only).

``tests.support.cli`` (``run_cli``, ``start_cli``) starts it once, as ``python -m
tests.support.cli_forkserver FD`` in the checkout, FD being its end of a socket
pair with the test process. It imports what ``python -m supervisor.cli``
imports before ``main()`` runs (about 0.7 s that every call paid) and ``AHEAD``
(0.1 to 0.2 s more of most calls), then serves one message per call: the
call's argv, working directory, environment and whether it starts a session
of its own (``start_new_session``), with four fds: a socket for the answers,
and the child's stdin, stdout and stderr. It forks, answers the child's pid,
and once the child has ended its raw wait status. It exits when the test
process closes the pair.

The child then becomes what a cold start is: its only fds are those three as
0, 1 and 2; it starts a session of its own if the call asks; it runs in that
directory with that environment, and ``sys.path[0]`` is the directory, as
``-m`` makes it; its signal dispositions are Python's defaults; it runs
``supervisor.cli`` as ``__main__`` and exits as the interpreter does
(``SystemExit``; a traceback and 1; a ``KeyboardInterrupt`` as SIGINT). The
server never runs CLI code, so no call sees another's state.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import runpy
import selectors
import signal
import socket
import struct
import sys
from typing import Any

#: The most a call's message (argv, directory, environment) may take.
MAX_MESSAGE = 1 << 20
#: The fds that come with a message: the answer socket, stdin, stdout, stderr.
FDS = 4
#: What the answer socket carries: the child's pid, then its raw wait status.
ANSWER = struct.Struct("!q")


def serve(control: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """Serve until the test process closes ``control`` (then exit); return only in a child."""
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    # Ctrl-C at the terminal reaches the whole process group: it is the test run's, not ours.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    answers: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "call")
    selector.register(wake_read, selectors.EVENT_READ, "child ended")
    while True:
        for key, _ in selector.select():
            if key.data == "call":
                message, fds, _, _ = socket.recv_fds(control, MAX_MESSAGE, FDS)
                if not message:
                    sys.exit(0)
                answer, *stdio = (socket.socket(fileno=fds[0]), *fds[1:])
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    selector.close()
                    for resource in (control, wake_read, wake_write, answer, *answers.values()):
                        resource.close()
                    return pickle.loads(message), stdio
                for fd in stdio:
                    os.close(fd)
                answer.sendall(ANSWER.pack(pid))
                answers[pid] = answer
            else:
                while True:
                    try:
                        wake_read.recv(4096)
                    except BlockingIOError:
                        break
                while answers:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    answer = answers.pop(pid)
                    with contextlib.suppress(OSError):  # the caller may be gone
                        answer.sendall(ANSWER.pack(status))
                    answer.close()


def become(call: dict[str, Any], stdio: list[int]) -> None:
    """Turn this forked child into ``python -m supervisor.cli ARGS`` as started cold."""
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    for fd in set(stdio) - {0, 1, 2}:
        os.close(fd)
    if call["new_session"]:
        os.setsid()
    os.chdir(call["cwd"])
    os.environ.clear()
    os.environ.update(call["env"])
    # `python -m` puts the working directory first on the path.
    sys.path[0] = os.getcwd()
    sys.argv = ["-m", *call["args"]]


#: Imported ahead too: what ``main()`` imports first for the commands the suite runs most
#: (run and demo, trust, ps, logs, stop and bg, agents), none of them reading the
#: environment or the directory at import. Not those of ``top`` (textual), ``mcp`` (the
#: mcp SDK), ``doctor``, ``workflow`` or ``stress``: their children import them as cold.
AHEAD = (
    "supervisor.cli._run",
    "supervisor.cli._trust",
    "supervisor.cli._task_commands",
    "supervisor.cli._agents",
    "supervisor.cli._interrupt",
    "supervisor.config._config_files",
    "supervisor.config._project_trust",
)


if __name__ == "__main__":
    import importlib

    import supervisor.cli._main  # noqa: F401  (what supervisor/cli/__main__.py imports)

    for module in AHEAD:
        importlib.import_module(module)

    call, stdio = serve(socket.socket(fileno=int(sys.argv[1])))
    become(call, stdio)
    runpy.run_module("supervisor.cli", run_name="__main__", alter_sys=True)
