"""Write: create or overwrite a text file (S-LOCAL-1)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput, resolve_path
from ._threads import INLINE_BYTES, run_blocking

__all__ = ["WRITE_TOOL", "WriteInput", "write_text_file"]


class WriteInput(ToolInput):
    """Parameters of Write."""

    file_path: str = Field(min_length=1, description="Path of the file to write.")
    content: str = Field(description="The complete new content of the file.")


def write_text_file(path: Path, content: str) -> bool:
    """Write ``content`` as UTF-8, creating parent directories; True if the file existed.

    The file is rewritten in place (not replaced by a new file), so its
    permissions, owner and hard links survive.
    """
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    with path.open("wb") as stream:
        stream.write(data)
    return existed


async def _write(params: WriteInput, ctx: ToolContext) -> ToolOutput:
    path = resolve_path(ctx, params.file_path)
    # Not abandoned on cancel: a half-done write must not race a later call.
    small = len(params.content) <= INLINE_BYTES
    existed = await run_blocking(small, write_text_file, path, params.content)
    if existed:
        return ToolOutput(f"The file {path} has been overwritten.")
    return ToolOutput(f"File created successfully at: {path}")


WRITE_TOOL: LocalTool[WriteInput] = LocalTool(
    name="Write",
    description=(
        "Write a text file, replacing it if it exists and creating missing parent "
        "directories. Prefer Edit for changing part of an existing file. Relative paths "
        "start at the working directory."
    ),
    input_model=WriteInput,
    execute=_write,
    truncation_hint="",
)
