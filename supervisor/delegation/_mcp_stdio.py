"""A stdio MCP transport that reads the server's stdout in bounded, linear time (S-MCP-1).

The SDK's ``stdio_client`` frames lines by joining each chunk onto the
unfinished line and splitting the whole again: quadratic in a line's length,
with no limit on it. A borrowed tool's answer is sized by the subagent that
calls it (a filesystem server reading a file the subagent wrote), so one call
could keep the supervisor busy for minutes and hold several copies of the
answer. Here the server's stdout is framed in a ``bytearray`` searched once per
byte, and a message over ``MAX_MCP_MESSAGE_BYTES`` ends that server's
connection instead of being read on. The rest is the SDK's own pieces: its
process spawn, line parser and shutdown sequence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TextIO

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from mcp import StdioServerParameters
    from mcp.client._transport import TransportStreams

__all__ = ["MAX_MCP_MESSAGE_BYTES", "bounded_stdio_client"]

#: The largest JSON-RPC message (one stdout line) read from an MCP server.
#: An agent gets at most 256 KiB of a tool's answer (``MAX_MCP_RESULT_BYTES``),
#: but an answer is cut only once read: this bounds what one call can make the
#: supervisor hold (a few times this) while letting a large answer through
#: to be cut. It leaves room for the SDK's own servers, which send a text
#: result twice (``content`` and ``structuredContent``), and for JSON escapes:
#: a 9 MiB text answer is a message of over 18 MiB.
MAX_MCP_MESSAGE_BYTES = 32 * 1024 * 1024

#: How much is read from the pipe at a time.
_CHUNK_BYTES = 1 << 16
#: How reading a server's stdout ends: its end, our shutdown closing it, or an error.
_PIPE_ENDED = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)
#: Time for the writer to flush accepted messages before stdin closes (as the SDK).
_WRITER_FLUSH_TIMEOUT_S = 0.5


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters,
    errlog: TextIO,
    on_oversize: Callable[[], None],
    max_message_bytes: int = MAX_MCP_MESSAGE_BYTES,
) -> AsyncIterator[TransportStreams]:
    """Like the SDK's ``stdio_client``, but a stdout line over ``max_message_bytes``
    calls ``on_oversize`` and closes the session's read stream (pending requests
    fail at once); the rest of that line, and of the server's output, is
    discarded until the server is stopped.
    """
    from mcp.client.stdio import (
        _create_platform_compatible_process,
        _parse_line,
        _stop_server_process,
        get_default_environment,
    )
    from mcp.shared.message import SessionMessage

    process = await _create_platform_compatible_process(
        command=server.command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    # No awaits until the task group is entered (a cancellation would leak the process).
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    stdout, stdin = process.stdout, process.stdin
    assert stdout is not None and stdin is not None

    async def discard_stdout() -> None:
        # A server blocked on a full pipe could not see its stdin close and exit.
        with anyio.CancelScope(shield=True):
            try:
                while True:
                    await stdout.receive(_CHUNK_BYTES)
            except _PIPE_ENDED:
                pass

    async def stdout_reader() -> None:
        buffer = bytearray()
        scanned = 0  # bytes of ``buffer`` known to hold no newline
        try:
            async with read_writer:
                while True:
                    try:
                        buffer += await stdout.receive(_CHUNK_BYTES)
                    except _PIPE_ENDED:
                        return
                    while (end := buffer.find(b"\n", scanned)) >= 0:
                        with memoryview(buffer) as view:  # decoded in place, not copied first
                            line = str(view[:end], server.encoding, "replace")
                        del buffer[: end + 1]
                        scanned = 0
                        await read_writer.send(_parse_line(line))
                    scanned = len(buffer)
                    if scanned > max_message_bytes:
                        del buffer[:]
                        on_oversize()
                        return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone
        finally:
            await discard_stdout()

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((json + "\n").encode(server.encoding))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the connection end
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(stdout_reader)
        tasks.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT_S):
                    await writer_done.wait()
                await _stop_server_process(process)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
                await anyio.lowlevel.checkpoint()
            tasks.cancel_scope.cancel()
