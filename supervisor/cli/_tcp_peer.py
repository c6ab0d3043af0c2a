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
"""

from __future__ import annotations

import ipaddress
import os
import sys

__all__ = ["socket_holders", "tcp_socket"]


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
