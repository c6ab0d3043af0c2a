"""The one exception type the protocol package raises."""

from __future__ import annotations

__all__ = ["ProtocolError"]


class ProtocolError(Exception):
    """The peer broke the protocol (or we tried to).

    ``limit`` names the limit that was exceeded (``max_frame_size``,
    ``max_nesting``, ``max_str_len``, ...) when the error is a limit violation,
    else ``None``. A connection that raised this is dead: it raises the same
    error again on every later call.
    """

    def __init__(self, message: str, *, limit: str | None = None) -> None:
        super().__init__(message)
        self.limit = limit
