"""A listening socket that records what each connection sent: the far end of an attack."""

from __future__ import annotations

import socket
import threading


def record_connections(server: socket.socket) -> list[bytes]:
    """Accept on ``server`` (bound, listening) in a thread until it is closed.

    Each connection's first 100 bytes are appended to the list returned, and
    ``pong`` is sent back, so an attack's output shows it got through.
    """
    got: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                got.append(conn.recv(100))
                conn.sendall(b"pong")

    threading.Thread(target=serve, daemon=True).start()
    return got
