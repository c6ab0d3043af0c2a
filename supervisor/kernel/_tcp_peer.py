"""Which processes hold the other end of a loopback TCP connection (S-SEC-2, S-SRV-5).

``subvisor mcp --http`` on loopback takes no token, and a subagent with
``network = "allow"`` may connect to any local port: without a check it
could call the Agent tool and launch a subagent wider than its own
(workspace-write from read-only, a second level of delegation, the user's
keys). A loopback peer is on this machine and in this network namespace, so
the kernel can say who it is: ``/proc/net/tcp{,6}`` names the socket at the
peer's address and port (with its owner's uid and its inode), and the
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
yet (no inode until ``accept``).
"""

from __future__ import annotations

import ipaddress
import os
import sys

from ._worker_tree import in_worker_tree

__all__ = ["LocalServerCheck", "socket_holders", "tcp_socket"]

_TABLES = (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6))
#: ``st`` of a listening socket in ``/proc/net/tcp{,6}``.
_LISTEN = "0A"


def _hex_address(host: str, port: int) -> str:
    """``host:port`` as ``/proc/net/tcp{,6}`` writes it (each 32-bit word in host order)."""
    packed = ipaddress.ip_address(host).packed
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    # The kernel prints each word of the address as a native-endian integer.
    text = "".join(f"{int.from_bytes(word, sys.byteorder):08X}" for word in words)
    return f"{text}:{port:04X}"


def _mapped(host: str) -> str:
    """An IPv4 host as IPv6 lists it when the socket is a dual-stack one (``::ffff:a.b.c.d``)."""
    return f"::ffff:{host}" if ipaddress.ip_address(host).version == 4 else host


def tcp_socket(peer: tuple[str, int], local: tuple[str, int]) -> tuple[int, int] | None:
    """``(uid, inode)`` of the socket at ``peer`` connected to our ``local``; None if none."""
    candidates = []
    for table, convert in (("/proc/net/tcp", str), ("/proc/net/tcp6", _mapped)):
        try:
            wanted = (
                _hex_address(convert(peer[0]), peer[1]),
                _hex_address(convert(local[0]), local[1]),
            )
        except ValueError:
            continue  # an IPv6 address has no IPv4 form
        candidates.append((table, wanted))
    for table, (peer_hex, local_hex) in candidates:
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 9 and fields[1] == peer_hex and fields[2] == local_hex:
                        inode = int(fields[9])
                        return (int(fields[7]), inode) if inode else None
        except OSError:
            continue
    return None


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


def _table_rows() -> list[tuple[int, list[str]]]:
    """Every row of ``/proc/net/tcp`` and ``tcp6``, as (4 or 6, its fields)."""
    rows = []
    for table, version in _TABLES:
        try:
            with open(table) as f:
                next(f, None)
                rows += [(version, line.split()) for line in f]
        except OSError:
            continue
    return rows


def _forms(host: str, version: int) -> set[str]:
    """How ``host`` appears in a table of IP ``version``, the wildcard address included."""
    if version == 4:
        if ipaddress.ip_address(host).version != 4:
            return set()
        return {_hex_address(h, 0)[:-5] for h in (host, "0.0.0.0")}
    return {_hex_address(h, 0)[:-5] for h in (_mapped(host), "::")}


class LocalServerCheck:
    """Whether the server of a TCP connection we made is outside every worker tree.

    ``refusal`` reads the socket tables once per new connection (blocking:
    call it from a thread); the walk of ``/proc`` for the processes that hold
    the listening sockets is made once per set of them, and its verdict kept.
    """

    _KEPT = 256

    def __init__(self) -> None:
        self._verdicts: dict[frozenset[int], str | None] = {}

    def refusal(self, server: tuple[str, int], ours: tuple[str, int]) -> str | None:
        """Why our connection ``ours`` -> ``server`` must not be used; None if it may.

        A server of another uid is not one of our workers (they run as ours);
        one not in this machine's tables is elsewhere. Fail closed: a server of
        our uid whose listening sockets, or their holders, cannot be found is
        refused, as is one any holder of which runs inside a worker tree.
        """
        rows = _table_rows()
        port = f"{server[1]:04X}"
        reached = None
        for version, fields in rows:
            try:
                wanted = _hex_address(_mapped(server[0]) if version == 6 else server[0], server[1])
                ours_hex = _hex_address(_mapped(ours[0]) if version == 6 else ours[0], ours[1])
            except ValueError:
                continue
            if len(fields) > 9 and fields[1] == wanted and fields[2] == ours_hex:
                reached = fields
                break
        if reached is None:
            return None  # not served from this machine's network namespace
        if int(reached[7]) != os.geteuid():
            return None
        listeners = frozenset(
            int(fields[9])
            for version, fields in rows
            if len(fields) > 9
            and fields[3] == _LISTEN
            and fields[1].endswith(f":{port}")
            and fields[1][:-5] in _forms(server[0], version)
        )
        where = f"{server[0]}:{server[1]}"
        if not listeners or 0 in listeners:
            return f"no process can be shown to serve {where}"
        if listeners not in self._verdicts:
            if len(self._verdicts) >= self._KEPT:
                self._verdicts.pop(next(iter(self._verdicts)))
            self._verdicts[listeners] = self._judge(listeners, where)
        return self._verdicts[listeners]

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
