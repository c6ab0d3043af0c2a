"""Which processes hold the other end of a loopback TCP connection (S-SEC-2, S-SRV-5).

``subvisor mcp --http`` on loopback takes no token, and a subagent with
``network = "allow"`` may connect to any local port: without a check it
could call the Agent tool and launch a subagent wider than its own
(workspace-write from read-only, a second level of delegation, the user's
keys). A loopback peer is on this machine and in this network namespace, so
the kernel can say who it is: ``/proc/net/tcp{,6}`` names the socket at the
peer's address and port (with its owner's uid and its inode; asked over
netlink, ``_sock_diag``, the tables read only where it cannot be), and the
processes holding that inode are found through ``/proc/PID/fd``.

Invariants:

- Fail closed: a connection whose socket, or any holder of it, cannot be
  found (the process exited, or its fds are out of our reach: a worker is
  not dumpable, so a supervisor that is not root cannot read them) is
  refused, and so is one that any holder passed into a worker tree.
- The check is per socket (its inode): HTTP/1.1 and HTTP/2 clients keep one
  connection for many requests, and only a new connection pays the walk of
  ``/proc``.

Races: the process that connected may hand its socket to another and exit;
every process holding it at the time of the check is checked, and none
may be inside a worker tree.

The same tables tell who *serves* a connection we made (``LocalServerCheck``):
a model provider or MCP server on this machine (``http://localhost:11434``)
is a port any process may take while its server is down, and a subagent
under network allow that took it got the provider's key with every request
and wrote the root agent's turns (red team R). A server is judged by its
listening sockets, since the one our connection reached may not be accepted
yet (no inode until ``accept``); the kernel is asked over netlink
(``_sock_diag``), the tables read only where it cannot be.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass

import trio

from ._sock_diag import TcpSocket, listening, serving, unmapped
from ._worker_tree import in_worker_tree

__all__ = ["LocalServerCheck", "socket_holders", "tcp_socket"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
#: ``st`` of a listening socket in ``/proc/net/tcp{,6}``.
_LISTEN = "0A"


def tcp_socket(peer: tuple[str, int], local: tuple[str, int]) -> tuple[int, int] | None:
    """``(uid, inode)`` of the socket at ``peer`` connected to our ``local``; None if none
    (or if no file holds it yet)."""
    try:
        found: TcpSocket | None = serving(peer, local)
    except OSError:
        found = _table_row(_table_sockets(), peer, local)
    return (found.uid, found.inode) if found is not None and found.inode else None


def socket_holders(inode: int) -> tuple[int, ...]:
    """Every process with an fd on socket ``inode`` that we can see (a walk of ``/proc``)."""
    target = f"socket:[{inode}]"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    found.append(int(name))
                    break
            except OSError:
                continue
    return tuple(found)


def _table_sockets() -> list[_TableSocket]:
    """Every socket of ``/proc/net/tcp`` and ``tcp6`` (where ``NETLINK_SOCK_DIAG`` fails),
    with its remote end as ``(address, port)`` and whether it listens."""
    found = []
    for table in _TABLES:
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9:
                        found.append(_table_socket(fields))
        except OSError:
            continue
    return found


@dataclass(frozen=True, slots=True)
class _TableSocket(TcpSocket):
    remote: tuple[str, int]
    listens: bool


def _table_socket(fields: list[str]) -> _TableSocket:
    def address(text: str) -> tuple[str, int]:
        host, port = text.split(":")
        raw = b"".join(
            int(host[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(host), 8)
        )
        return str(ipaddress.ip_address(raw)), int(port, 16)

    (local, port), remote = address(fields[1]), address(fields[2])
    listens = fields[3] == _LISTEN
    return _TableSocket(local, port, int(fields[7]), int(fields[9]), remote, listens)


def _table_row(
    rows: list[_TableSocket], at: tuple[str, int], to: tuple[str, int]
) -> _TableSocket | None:
    """The row of the socket at ``at`` connected to ``to`` (``serving`` from the tables)."""
    return next(
        (
            row
            for row in rows
            if row.port == at[1]
            and _same_host(row.address, at[0])
            and row.remote[1] == to[1]
            and _same_host(row.remote[0], to[0])
        ),
        None,
    )


def _same_host(listed: str, host: str) -> bool:
    """Whether a socket listed at ``listed`` is at ``host`` (an IPv4 address may be listed
    as IPv6's mapped form)."""
    return unmapped(listed) == unmapped(host)


def _serves(listener: TcpSocket, host: str) -> bool:
    """Whether ``listener`` takes connections to ``host`` (its address, or any)."""
    return ipaddress.ip_address(listener.address).is_unspecified or _same_host(
        listener.address, host
    )


def _server_sockets(
    server: tuple[str, int], ours: tuple[str, int]
) -> tuple[TcpSocket | None, list[TcpSocket]]:
    """The socket serving our connection (None: not in this namespace), and the listening
    sockets on its port that take connections to its address."""
    try:
        reached = serving(server, ours)
        listeners = listening(server[1]) if reached is not None else []
    except OSError:
        rows = _table_sockets()
        reached = _table_row(rows, server, ours)
        listeners = [row for row in rows if row.listens and row.port == server[1]]
    return reached, [s for s in listeners if _serves(s, server[0])]


class LocalServerCheck:
    """Whether the server of a TCP connection we made is outside every worker tree.

    Each new connection costs two or three questions to the kernel
    (``_sock_diag``, tens of microseconds); the walk of ``/proc`` for the
    processes that hold the listening sockets (milliseconds beside a large
    fleet: ``verdict`` makes it in a thread) is made once per set of them,
    and its verdict kept.
    """

    _KEPT = 256

    def __init__(self) -> None:
        self._verdicts: dict[frozenset[int], str | None] = {}

    async def verdict(self, server: tuple[str, int], ours: tuple[str, int]) -> str | None:
        """``refusal``, from the event loop: settled there where no walk of ``/proc`` is
        needed (a few netlink questions), else in a thread."""
        walk, verdict = self._settle(server, ours)
        if walk is None:
            return verdict
        return await trio.to_thread.run_sync(self._walk, walk, server)

    def refusal(self, server: tuple[str, int], ours: tuple[str, int]) -> str | None:
        """Why our connection ``ours`` -> ``server`` must not be used; None if it may.

        A server not in this namespace's tables is elsewhere. One whose every
        listening socket is another uid's is not one of our workers (they run
        as ours). The uid of the socket our connection reached is not asked:
        one not accepted yet (``TCP_DEFER_ACCEPT`` holds it back until data
        comes) is listed as uid 0, and a squatter passed as "another user's"
        (red team S). Fail closed: a server whose listening sockets, or the
        holders of those of our uid, cannot be found is refused, as is one
        any such holder of which runs inside a worker tree.
        """
        walk, verdict = self._settle(server, ours)
        return verdict if walk is None else self._walk(walk, server)

    def _settle(
        self, server: tuple[str, int], ours: tuple[str, int]
    ) -> tuple[frozenset[int] | None, str | None]:
        """The listeners to walk, or None and the verdict without a walk."""
        reached, listeners = _server_sockets(server, ours)
        if reached is None:
            return None, None
        where = f"{server[0]}:{server[1]}"
        if not listeners:
            return None, f"no process can be shown to serve {where}"
        inodes = frozenset(s.inode for s in listeners if s.uid == os.geteuid())
        if not inodes:
            return None, None
        if 0 in inodes:
            return None, f"no process can be shown to serve {where}"
        if inodes in self._verdicts:
            return None, self._verdicts[inodes]
        return inodes, None

    def _walk(self, listeners: frozenset[int], server: tuple[str, int]) -> str | None:
        """Judge ``listeners`` by a walk of ``/proc``, and keep the verdict."""
        if len(self._verdicts) >= self._KEPT:
            self._verdicts.pop(next(iter(self._verdicts)))
        verdict = self._verdicts[listeners] = self._judge(listeners, f"{server[0]}:{server[1]}")
        return verdict

    def _judge(self, listeners: frozenset[int], where: str) -> str | None:
        for inode in listeners:
            holders = socket_holders(inode)
            if not holders:
                return (
                    f"the process that listens on {where} cannot be checked (gone, or not ours "
                    "to see, as a worker is not)"
                )
            inside = [pid for pid in holders if in_worker_tree(pid)]
            if inside:
                return f"process {inside[0]}, which listens on {where}, runs inside a worker tree"
        return None
