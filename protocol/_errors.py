"""The protocol's errors: whose fault it was decides what the caller does, as in h11.

* ``ProtocolError``: never raised itself; catch it for either kind.
  * ``LocalProtocolError``: we tried to send what the protocol forbids (a
    message out of turn, a frame over a limit, a value msgpack cannot encode),
    or fed bytes after the end of the stream. A bug on our side: it must
    surface, never be taken for a dead peer.
  * ``RemoteProtocolError``: the peer sent what the protocol forbids (bytes
    that are no frame, a message out of turn, a version we do not speak), or
    we tried to send after it closed its end. The peer is broken, hostile or
    gone: drop it.

A ``Connection`` or ``FrameDecoder`` that raised either is dead: every later
call raises the same error again.
"""

from __future__ import annotations

__all__ = ["LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class ProtocolError(Exception):
    """The protocol was broken, by us or by the peer; never raised itself.

    ``limit`` names the limit that was exceeded (``max_frame_size``,
    ``max_nesting``, ``max_str_len``, ...) when the error is a limit violation,
    else ``None``.
    """

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError, not ProtocolError")
        super().__init__(message)
        self.limit = limit


class LocalProtocolError(ProtocolError):
    """We tried to send something the protocol forbids: our bug, not the peer's."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids, or closed its end before we sent."""
