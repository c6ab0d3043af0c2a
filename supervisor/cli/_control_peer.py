"""Who connected to a control channel, and whether the channel may serve them (S-SEC-2).

An abstract UNIX socket has no file permissions, and Landlock fences it off
only from sandboxed processes (its abstract-socket scope). So the server
asks the kernel who is at the other end of each connection it accepts and
serves only a process that

- runs as our uid (anyone on the machine could otherwise connect), and
- is not inside a subvisor worker tree (``supervisor.kernel._worker_tree``): no
  subagent, nor anything it started, detached or not, steers its siblings;
- was not started by a supervisor, this session's or any other's (one named
  ``subvisor-sup`` above it, ``supervisor.kernel._supervisor_mark``): the MCP
  servers a supervisor lends its agents, its gateway and a root agent's tools
  act for a model, not for the user.

Races: ``SO_PEERCRED`` holds the credentials of the process that called
``connect``, taken at that moment, so the check is on the process that
connected, whoever holds the socket later; the connection stays open while
we check. That process may exit meanwhile (a child keeping the socket) and
its pid be reused, and the ancestry walk would then read another process:
``SO_PEERPIDFD`` (Linux 6.5) gives a pidfd of the connecting process itself,
and a connection whose connecting process ended before the walk was over is
refused. Older kernels lack it; there the pid is trusted as it stands.
Ancestors that exit during the walk are the worker tree's concern: a worker
is a child subreaper, so its descendants are re-parented to it, not out of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
from dataclasses import dataclass

import trio

from ..kernel import UNSETTLED, in_worker_tree, supervisor_ancestor

__all__ = ["PeerCredentials", "peer_credentials", "refusal", "started_by_a_supervisor"]

#: ``SO_PEERPIDFD`` from ``<asm-generic/socket.h>`` (Python 3.11 lacks the name).
_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)
_UCRED = struct.Struct("3i")

#: A connected UNIX socket, blocking or trio's.
_Socket = socket.socket | trio.socket.SocketType


@dataclass(frozen=True, slots=True)
class PeerCredentials:
    """``struct ucred`` of a connection's other end, as of its ``connect``."""

    pid: int
    uid: int
    gid: int


def peer_credentials(sock: _Socket) -> PeerCredentials:
    """The credentials the kernel recorded for ``sock``'s peer when it connected."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def _peer_pidfd(sock: _Socket) -> int | None:
    """A pidfd of the process that connected, or ``None`` where the kernel has none.

    Raises ``OSError`` when the kernel has them but cannot give this one.
    """
    try:
        return sock.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
    except OSError as exc:
        if exc.errno == errno.ENOPROTOOPT:
            return None
        raise


def _has_exited(pidfd: int) -> bool:
    # A pidfd polls readable once its process has exited (zombie or reaped);
    # poll, not select: a busy supervisor's descriptors pass FD_SETSIZE.
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def refusal(sock: _Socket, peer: PeerCredentials) -> str | None:
    """Why the control channel must not serve ``peer`` on ``sock``; ``None`` if it may."""
    if peer.uid != os.geteuid():
        return f"uid {peer.uid} is not this session's owner (uid {os.geteuid()})"
    if peer.pid <= 0:
        return "the connecting process is in another pid namespace, so it cannot be checked"
    try:
        pidfd = _peer_pidfd(sock)
    except OSError as exc:
        return f"process {peer.pid} cannot be checked ({exc.strerror})"
    try:
        inside = in_worker_tree(peer.pid)
        started = started_by_a_supervisor(peer.pid)
        if pidfd is not None and _has_exited(pidfd):
            return f"process {peer.pid} exited before it could be checked"
    finally:
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)
    if inside:
        return (
            f"process {peer.pid} runs inside a subvisor worker tree: subagents cannot use"
            " the control channel (S-SEC-2)"
        )
    if started is not None:
        return f"{started}: it cannot use the control channel (S-SEC-2)"
    return None


def started_by_a_supervisor(pid: int) -> str | None:
    """Why ``pid`` counts as started by a subvisor supervisor; None if it does not.

    One with a supervisor above it (any session's), or whose ancestry could not
    be settled (fail closed).
    """
    above = supervisor_ancestor(pid)
    if above is None:
        return None
    if above == UNSETTLED:
        return (
            f"the ancestry of process {pid} kept changing (or it is gone), so it cannot be "
            "shown not to be started by a subvisor supervisor"
        )
    return (
        f"process {pid} was started by subvisor supervisor {above} (an MCP server, gateway "
        "or tool of its agents, acting for a model)"
    )
