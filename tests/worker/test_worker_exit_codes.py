"""How a worker's own end is told apart: the supervisor's protocol violation, or our bug.

A ``RemoteProtocolError`` (the supervisor sent what the protocol forbids) ends
the worker with ``EXIT_PROTOCOL_ERROR`` and one line on stderr. A
``LocalProtocolError`` (the worker tried to send what the protocol forbids)
is the worker's own bug: ``EXIT_INTERNAL_ERROR`` with its traceback, never
reported as the peer's fault.
"""

from __future__ import annotations

import pytest

from protocol import LocalProtocolError, ProtocolError, RemoteProtocolError
from worker._runtime import EXIT_INTERNAL_ERROR, EXIT_PROTOCOL_ERROR, _exit_code_for


def _raised(error: ProtocolError) -> BaseExceptionGroup[ProtocolError]:
    """``error`` as trio delivers it out of a nursery: raised, inside a group."""
    try:
        raise error
    except ProtocolError as exc:
        return BaseExceptionGroup("from the nursery", [exc])


def test_the_supervisors_violation_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """RemoteProtocolError: exit 65, one line naming the worker."""
    code = _exit_code_for(_raised(RemoteProtocolError("unexpected 'welcome'")), "w-1")
    assert code == EXIT_PROTOCOL_ERROR
    assert capsys.readouterr().err == "subvisor worker w-1: protocol error: unexpected 'welcome'\n"


def test_our_own_violation_is_an_internal_error_with_its_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """LocalProtocolError: exit 70 and the traceback, not the supervisor's fault in one line."""
    code = _exit_code_for(_raised(LocalProtocolError("cannot encode frame: set")), "w-1")
    assert code == EXIT_INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "LocalProtocolError: cannot encode frame: set" in err
    assert "protocol error:" not in err
