"""S-SEC-2: finding the processes at the other end of a loopback TCP connection."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from supervisor.kernel import socket_holders, tcp_socket


@pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_peer_socket_is_found_with_its_uid_and_every_process_holding_it(
    family: socket.AddressFamily, host: str
) -> None:
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
