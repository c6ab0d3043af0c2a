"""Local tools that run inside a worker: Read, Write, Edit, Glob, Grep, Bash, LS.

Names and parameters follow Claude Code (S-LOCAL-1); opencode's lower-case
names are aliases. Every failure is a result the model can read, never an
exception out of :func:`run_tool` (S-LOCAL-2).
"""

from ._base import (
    DEFAULT_MAX_OUTPUT_BYTES,
    MIN_OUTPUT_BYTES,
    LocalTool,
    ToolContext,
    ToolInput,
    ToolOutput,
)
from ._bash import BashInput
from ._edit import EditInput
from ._glob import GlobInput
from ._grep import GrepInput
from ._ls import LSInput
from ._process import command_pids
from ._read import ReadInput
from ._registry import (
    LOCAL_TOOL_ALIASES,
    LOCAL_TOOL_NAMES,
    LOCAL_TOOLS,
    LocalToolSet,
    get_local_tool,
    resolve_tool_name,
    run_tool,
)
from ._truncate import truncate_text
from ._write import WriteInput

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "LOCAL_TOOLS",
    "LOCAL_TOOL_ALIASES",
    "LOCAL_TOOL_NAMES",
    "MIN_OUTPUT_BYTES",
    "BashInput",
    "EditInput",
    "GlobInput",
    "GrepInput",
    "LSInput",
    "LocalTool",
    "LocalToolSet",
    "ReadInput",
    "ToolContext",
    "ToolInput",
    "ToolOutput",
    "WriteInput",
    "command_pids",
    "get_local_tool",
    "resolve_tool_name",
    "run_tool",
    "truncate_text",
]
