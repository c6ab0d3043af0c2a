"""Passing file descriptors over Unix sockets (``SCM_RIGHTS``), and shedding inherited ones."""

from __future__ import annotations

import array
import os
import socket

__all__ = ["FD_SIZE", "MAX_SPAWN_FDS", "close_fds_except", "fds_ancillary", "received_fds"]

FD_SIZE = array.array("i").itemsize
#: A spawn's fds: the two pipe ends, and at most 8 ``cgroup.procs`` files.
MAX_SPAWN_FDS = 10


def fds_ancillary(fds: list[int]) -> list[tuple[int, int, bytes]]:
    """Ancillary data carrying ``fds`` for ``sendmsg``."""
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]


def received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    """The fds that arrived with a ``recvmsg``."""
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % FD_SIZE
            fds.extend(array.array("i", data[:usable]))
    return fds


def close_fds_except(keep: set[int]) -> None:
    """Close every fd of this process but ``keep`` (a forked child sheds its parent's)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
