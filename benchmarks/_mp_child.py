"""The ``multiprocessing`` child of the spawn benchmark.

Importing this module imports the same stack a subvisor worker runs on
(trio, msgpack, pydantic, ``protocol``, ``worker``), so a ``spawn``-context
child pays for those imports the way an exec'd worker does, and a
forkserver that preloads this module holds them the way the zygote does.
"""

from __future__ import annotations

import contextlib
from multiprocessing.connection import Connection

import msgpack  # noqa: F401
import pydantic  # noqa: F401
import trio  # noqa: F401

import protocol  # noqa: F401
import worker  # noqa: F401

__all__ = ["signal_ready"]

READY = b"ready"


def signal_ready(conn: Connection) -> None:
    """Tell the parent we are up, then idle until it kills us or hangs up."""
    conn.send_bytes(READY)
    with contextlib.suppress(EOFError, OSError):
        conn.recv_bytes()
