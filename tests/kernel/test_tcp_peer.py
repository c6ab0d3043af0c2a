"""S-SEC-2: finding the processes at the other end of a loopback TCP connection."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.kernel import LocalServerCheck, socket_holders, tcp_socket
from supervisor.kernel import _tcp_peer as tcp_peer


def _without_netlink(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_netlink(*args: object) -> None:
        raise PermissionError("netlink refused")

    monkeypatch.setattr(tcp_peer, "serving", no_netlink)


@pytest.mark.parametrize("asked", ["over netlink", "from /proc/net/tcp"])
@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_peer_socket_is_found_with_its_uid_and_every_process_holding_it(
    family: socket.AddressFamily, host: str, asked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if asked == "from /proc/net/tcp":
        _without_netlink(monkeypatch)
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.socket(family) as client:
            client.connect(server.getsockname())
            accepted, peer = server.accept()
            with accepted:
                local = accepted.getsockname()
                found = tcp_socket((peer[0], peer[1]), (local[0], local[1]))
                assert found is not None
                uid, inode = found
                assert uid == os.geteuid()
                assert inode == os.fstat(client.fileno()).st_ino
                # A child holding the same socket is found too.
                child = subprocess.Popen(
                    [sys.executable, "-c", "import sys; sys.stdin.read()"],
                    stdin=subprocess.PIPE,
                    pass_fds=(client.fileno(),),
                )
                try:
                    assert set(socket_holders(inode)) == {os.getpid(), child.pid}
                finally:
                    assert child.stdin is not None
                    child.stdin.close()
                    child.wait()
                # The server's own end is not the peer's.
                assert tcp_socket((local[0], local[1]), (peer[0], peer[1])) != found


def test_a_peer_that_is_not_connected_here_is_not_found() -> None:
    assert tcp_socket(("127.0.0.1", 1), ("127.0.0.1", 2)) is None


async def test_s_sec_2_another_uid_is_refused_before_any_walk_of_proc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S-SEC-2: a connection of another uid is refused on the uid the socket table gives,
    without walking every process's fds (which let another user slow the owner's server)."""
    from supervisor.cli import _mcp_http

    def no_walk(inode: int) -> tuple[int, ...]:
        raise AssertionError(f"walked /proc for socket {inode}")

    monkeypatch.setattr(_mcp_http, "tcp_socket", lambda peer, local: (os.geteuid() + 1, 4242))
    monkeypatch.setattr(_mcp_http, "socket_holders", no_walk)

    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("served")

    gate = _mcp_http.LoopbackPeerGate(app)
    why = await gate._refusal(("127.0.0.1", 40000), ("127.0.0.1", 8765))
    assert why == f"uid {os.geteuid() + 1} is not this server's owner (uid {os.geteuid()})"


@pytest.mark.parametrize("asked", ["over netlink", "from /proc/net/tcp"])
@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_s_sec_1_a_local_server_outside_every_worker_tree_is_used(
    family: socket.AddressFamily, host: str, asked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-1: the server of a connection we made is judged by its listening socket, found
    over netlink or (where netlink fails) in the socket tables: one this process holds is
    outside every worker tree, so its connection may be used, before and after ``accept``."""
    if asked == "from /proc/net/tcp":
        _without_netlink(monkeypatch)
    check = LocalServerCheck()
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.socket(family) as client:
            client.connect(server.getsockname())
            ends = client.getpeername()[:2], client.getsockname()[:2]
            assert check.refusal(*ends) is None  # not accepted yet: no inode of its own
            accepted, _ = server.accept()
            with accepted:
                assert check.refusal(*ends) is None
    # A listener closed once it accepted (as a squatter could, to hide): its connection is
    # served by nobody that can be shown.
    with socket.socket(family) as server, socket.socket(family) as client:
        server.bind((host, 0))
        server.listen()
        client.connect(server.getsockname())
        ends = client.getpeername()[:2], client.getsockname()[:2]
        accepted, _ = server.accept()
        with accepted:
            server.close()
            where = f"{ends[0][0]}:{ends[0][1]}"
            assert LocalServerCheck().refusal(*ends) == f"no process can be shown to serve {where}"


def test_s_sec_1_a_server_on_another_host_is_not_judged() -> None:
    """S-SEC-1: a connection no socket of this namespace serves is to another machine."""
    assert LocalServerCheck().refusal(("192.0.2.7", 443), ("127.0.0.1", 40000)) is None


_DEFERRED_LISTENER = """
import ctypes, socket, sys, time
listener = socket.socket()
listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 30)
listener.bind(("127.0.0.1", 0))
listener.listen()
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: its fds out of others' sight
print(listener.getsockname()[1], flush=True)
time.sleep(60)
"""

_CHECK = """
import socket, sys
from supervisor.kernel import LocalServerCheck
client = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(LocalServerCheck().refusal(client.getpeername(), client.getsockname()))
"""


@pytest.mark.machine_may_lack("root, to run both ends as another uid", when=os.geteuid() != 0)
def test_s_sec_1_a_deferred_accept_does_not_pass_a_server_as_another_users() -> None:
    """S-SEC-1: a server of our uid whose listener holds connections back until data comes
    (TCP_DEFER_ACCEPT: the reached socket is listed as uid 0) and whose fds we cannot see is
    refused, as uid 65534 as well as root; it passed as another user's server (red team S)."""

    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    repo = Path(__file__).resolve().parents[2]
    listener = subprocess.Popen(
        [*as_nobody, sys.executable, "-c", _DEFERRED_LISTENER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert listener.stdout is not None
        port = listener.stdout.readline().strip()
        check = subprocess.run(
            [*as_nobody, sys.executable, "-c", _CHECK, port],
            capture_output=True,
            text=True,
            cwd=repo,
            env={**os.environ, "PYTHONPATH": str(repo)},
            check=False,
        )
    finally:
        listener.kill()
        listener.wait()
    assert check.returncode == 0, check.stderr
    assert "cannot be checked" in check.stdout, check.stdout


@pytest.mark.parametrize("asked", ["over netlink", "from /proc/net/tcp"])
def test_an_ipv4_peer_of_a_dual_stack_server_is_found_however_its_address_is_written(
    asked: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dual-stack server sees an IPv4 client as ``::ffff:127.0.0.1``: its socket is found
    with the address in either form, on either end."""
    if asked == "from /proc/net/tcp":
        _without_netlink(monkeypatch)
    with socket.socket(socket.AF_INET6) as server:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        server.bind(("::", 0))
        server.listen()
        with socket.socket(socket.AF_INET) as client:
            client.connect(("127.0.0.1", server.getsockname()[1]))
            accepted, peer = server.accept()
            with accepted:
                local = accepted.getsockname()
                assert peer[0] == local[0] == "::ffff:127.0.0.1"
                inode = os.fstat(client.fileno()).st_ino
                for peer_host in (peer[0], "127.0.0.1"):
                    for local_host in (local[0], "127.0.0.1"):
                        found = tcp_socket((peer_host, peer[1]), (local_host, local[1]))
                        assert found == (os.geteuid(), inode), (peer_host, local_host)
