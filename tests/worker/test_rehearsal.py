"""The zygote's rehearsal: forks start with a worker's common path warm, and nothing else changes.

Each test runs in a fresh interpreter, as the zygote does: the rehearsal
runs its own event loop and checks that the process is left with one thread.
"""

from __future__ import annotations

from tests.support.fresh_python import run_fresh_python

_PRELUDE = """
import dis, os, threading
import worker.zygote  # what the zygote imports before it rehearses
from worker import _rehearsal
from worker._rehearsal import RehearsalError, rehearse

def specialized(function):
    code = function.__code__
    plain = {i.opname for i in dis.get_instructions(code)}
    return {i.opname for i in dis.get_instructions(code, adaptive=True)} - plain
"""


def _run(script: str) -> str:
    return run_fresh_python(script, prelude=_PRELUDE)


def test_a_worker_forked_after_the_rehearsal_starts_with_its_message_path_specialized() -> None:
    """The rehearsal runs the real worker code: what every message goes through is warm."""
    out = _run(
        """
        from protocol._connection import Connection
        from worker._channel import SupervisorLink
        from worker._runtime import _Session
        from worker.agent._loop import AgentLoop
        hot = [Connection.send, Connection.receive_data, SupervisorLink.call, SupervisorLink.emit,
               _Session.run_request, AgentLoop.run]
        assert not any(specialized(f) for f in hot)
        rehearse()
        pid = os.fork()
        if pid == 0:
            cold = [f.__qualname__ for f in hot if not specialized(f)]
            os._exit(1 if cold else 0)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        """
    )
    assert out.split() == ["child", "0"]


def test_the_rehearsal_leaves_one_thread_no_fd_and_no_file() -> None:
    out = _run(
        """
        fds = sorted(os.listdir("/proc/self/fd"))
        here = sorted(os.listdir("."))
        rehearse()
        assert threading.active_count() == 1, threading.enumerate()
        assert sorted(os.listdir("/proc/self/fd")) == fds, (fds, os.listdir("/proc/self/fd"))
        assert sorted(os.listdir(".")) == here
        print("clean")
        """
    )
    assert out.split() == ["clean"]


def test_a_source_the_tools_cannot_read_inline_means_no_tool_call_and_no_thread() -> None:
    """Where the tools would start a thread (the file is missing), the model asks for none."""
    out = _run(
        """
        from pathlib import Path
        _rehearsal._SOURCE = Path("/nonexistent/subvisor/rehearsal.py")
        rehearse()
        assert threading.active_count() == 1, threading.enumerate()
        print("cold tools, warm rest")
        """
    )
    assert out.strip() == "cold tools, warm rest"


def test_a_failed_play_is_a_rehearsal_error_that_says_what_failed() -> None:
    """The zygote then forks cold workers: it says so in one line and goes on."""
    out = _run(
        """
        async def broken(link, **kwargs):
            raise OSError("no pipe today")
        _rehearsal.serve = broken
        try:
            rehearse()
        except RehearsalError as exc:
            print(exc)
        assert threading.active_count() == 1
        """
    )
    assert out.strip().startswith("the zygote's rehearsal failed: ")
    assert "no pipe today" in out


def test_a_thread_left_behind_stops_the_zygote_instead_of_forking_beside_it() -> None:
    """Were a tool to go to a thread (its file not read inline after all), no fork may follow."""
    out = _run(
        """
        from pathlib import Path
        _rehearsal._SOURCE = Path("/nonexistent/subvisor/rehearsal.py")
        _rehearsal.inline_size = lambda path: 1  # the model believes the file small
        try:
            rehearse()
        except RehearsalError as exc:
            raise AssertionError(f"a soft failure, forks would follow: {exc}")
        except RuntimeError as exc:
            print(exc)
        """
    )
    assert out.strip() == "the zygote's rehearsal left a thread behind"
