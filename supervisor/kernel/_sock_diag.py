"""TCP sockets of this network namespace, asked of the kernel over ``NETLINK_SOCK_DIAG``.

What ``ss`` does: the kernel answers for one socket by its address pair, or
dumps those in given states, each with its owner's uid and its inode. Unlike
reading ``/proc/net/tcp{,6}``, which formats every socket of the namespace
as text (4 ms a read beside a thousand connections), the kernel filters, so
a question costs tens of microseconds however busy the machine is.

Layouts (``linux/inet_diag.h``): a request is ``nlmsghdr`` + ``inet_diag_req_v2``
(family, protocol, ext, pad, states, ``inet_diag_sockid``); an answer is
``nlmsghdr`` + ``inet_diag_msg`` (family, state, timer, retrans, the sockid,
expires, rqueue, wqueue, uid, inode). Ports and addresses are big-endian.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

__all__ = ["TcpSocket", "listening", "serving", "unmapped"]

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_LISTEN = 10
_ALL_STATES = 0xFFFFFFFF
_NO_COOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")
# family, state, timer, retrans; sport, dport, src, dst (big-endian bytes); if, cookie[2];
# expires, rqueue, wqueue, uid, inode.
_MESSAGE = struct.Struct("=BBBB2s2s16s16sIIIIIIII")


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One socket as the kernel lists it: its local address, owner's uid and inode (0: not
    accepted yet, so no file holds it)."""

    address: str
    port: int
    uid: int
    inode: int


def _packed(host: str, family: int) -> bytes:
    address = ipaddress.ip_address(host)
    if family == socket.AF_INET6 and address.version == 4:
        address = ipaddress.IPv6Address(f"::ffff:{host}")
    return address.packed.ljust(16, b"\0")


def _request(family: int, states: int, flags: int, sockid: tuple[int, int, bytes, bytes]) -> bytes:
    sport, dport, src, dst = sockid
    body = (
        struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, states)
        + struct.pack(">HH", sport, dport)
        + src
        + dst
        + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    )
    return _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, flags, 1, 0) + body


def _ask(request: bytes, *, dump: bool) -> list[TcpSocket]:
    """Send one request; every socket of the answer (raises ``OSError`` if netlink fails).

    A dump ends with ``NLMSG_DONE``; the answer to one socket is one datagram.
    """
    found: list[TcpSocket] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        link.settimeout(5.0)  # the kernel answers at once; never hang a connect on it
        link.sendto(request, (0, 0))
        while True:
            data = link.recv(65536)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    return found
                if kind == _NLMSG_DONE:
                    return found
                if kind == _NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", data, offset + _HEADER.size)
                    if error in (0, -2):  # ENOENT: no such socket
                        return found
                    raise OSError(-error, os.strerror(-error))
                if kind == _SOCK_DIAG_BY_FAMILY:
                    found.append(_socket(data, offset + _HEADER.size))
                offset += (length + 3) & ~3
            if not data or not dump:
                return found


def _socket(data: bytes, at: int) -> TcpSocket:
    fields = _MESSAGE.unpack_from(data, at)
    family, sport, src = fields[0], fields[4], fields[6]
    uid, inode = fields[14], fields[15]
    size = 4 if family == socket.AF_INET else 16
    address = str(ipaddress.ip_address(src[:size]))
    return TcpSocket(address, struct.unpack(">H", sport)[0], uid, inode)


def unmapped(host: str) -> str:
    """An IPv4 address written in IPv6's mapped form (``::ffff:a.b.c.d``) as IPv4."""
    address = ipaddress.ip_address(host)
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return str(mapped or address)


def serving(at: tuple[str, int], to: tuple[str, int]) -> TcpSocket | None:
    """The socket at ``at`` connected to ``to`` in this namespace (either end may say an IPv4
    address in IPv6's mapped form); None where there is none (that end is elsewhere).
    Raises ``OSError`` where the kernel cannot be asked."""
    here, there = unmapped(at[0]), unmapped(to[0])
    family = socket.AF_INET6 if ":" in here or ":" in there else socket.AF_INET
    sockid = (at[1], to[1], _packed(here, family), _packed(there, family))
    answer = _ask(_request(family, _ALL_STATES, _NLM_F_REQUEST, sockid), dump=False)
    return answer[0] if answer else None


def listening(port: int) -> list[TcpSocket]:
    """Every listening TCP socket on ``port`` in this namespace, IPv4 and IPv6. Raises
    ``OSError`` where the kernel cannot be asked."""
    found = []
    for family in (socket.AF_INET, socket.AF_INET6):
        zero = bytes(16)
        dump = _request(family, 1 << _TCP_LISTEN, _NLM_F_REQUEST | _NLM_F_DUMP, (0, 0, zero, zero))
        found += [s for s in _ask(dump, dump=True) if s.port == port]
    return found
