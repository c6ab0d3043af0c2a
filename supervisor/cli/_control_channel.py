"""What a session's control channel and its clients agree on: where it is, what it answers.

A live session serves its channel on an abstract UNIX socket (Linux) named
``@subvisor-<128 random bits in hex>``, and names it in its address file
``$SUBVISOR_HOME/run/<session>.addr`` (0600 in a 0700 directory), a JSON
object written atomically once the socket listens and removed when the
session ends::

    {"address": "@subvisor-3f1c...", "pid": 4242, "started_at": 1767225600.0}

The name is not a secret: ``/proc/net/unix`` lists every abstract socket of
the network namespace. Its randomness only keeps it from being guessed ahead
of time and squatted. What keeps others out is the server's check of each
peer (``supervisor.cli._control_peer``) and, for sandboxed workers, Landlock's
abstract-socket scope. An abstract socket vanishes with its last
descriptor, so a supervisor killed without cleaning up leaves an address
file whose name nobody serves: clients find it stale (connection refused).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from ..files._atomic_write import write_atomically

__all__ = [
    "LiveSession",
    "address_file",
    "new_address",
    "read_address_file",
    "socket_address",
    "write_address_file",
]

_ADDRESS_PREFIX = "@subvisor-"
_ADDRESS_SUFFIX = ".addr"


@dataclass(frozen=True, slots=True)
class LiveSession:
    """A session whose supervisor serves (or served) a control channel at ``address``."""

    session_id: str
    #: ``@subvisor-<hex>``: the abstract socket's name, ``@`` standing for its leading NUL.
    address: str
    #: The serving supervisor's process id.
    pid: int
    #: When the channel started (epoch seconds): about when the session did.
    started_at: float


def new_address() -> str:
    """A fresh abstract socket name no one can have bound before."""
    return _ADDRESS_PREFIX + secrets.token_hex(16)


def socket_address(address: str) -> bytes:
    """The ``bind``/``connect`` address of ``address``: its name after a NUL byte.

    Raises ``ValueError`` for anything but a subvisor abstract socket name.
    """
    if not address.startswith(_ADDRESS_PREFIX) or not address.isascii():
        raise ValueError(f"not a subvisor control address: {address!r}")
    return b"\0" + address[1:].encode()


def address_file(home: Path, session_id: str) -> Path:
    """Where the session's address file lives."""
    return home / "run" / f"{session_id}{_ADDRESS_SUFFIX}"


def write_address_file(home: Path, session: LiveSession) -> Path:
    """Publish ``session``'s address (owner-only, atomically); its path."""
    path = address_file(home, session.session_id)
    text = json.dumps(
        {"address": session.address, "pid": session.pid, "started_at": session.started_at}
    )
    write_atomically(path, text + "\n", mode=0o600)
    return path


def read_address_file(path: Path) -> LiveSession | None:
    """The session an address file names; ``None`` if it is gone or not one we wrote."""
    try:
        fields = json.loads(path.read_bytes())
        session = LiveSession(
            session_id=path.name.removesuffix(_ADDRESS_SUFFIX),
            address=str(fields["address"]),
            pid=int(fields["pid"]),
            started_at=float(fields["started_at"]),
        )
        socket_address(session.address)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return session
