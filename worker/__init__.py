"""The child side of subvisor: zygote, worker runtime, and what runs inside a worker.

Nothing here imports ``supervisor``: a worker is an untrusted peer that only
speaks the protocol over its own pipes.
"""

from ._agent_ports import BorrowedMcpTool, McpLifecycleError
from ._commands import (
    KERNEL_COMMANDS,
    Command,
    CommandContext,
    CommandError,
    CommandHandler,
    command_table,
)
from ._outcome import Outcome
from ._pipe import PipeStream
from ._runtime import run_worker, serve
from ._sandbox import apply_sandbox, landlock_abi

__all__ = [
    "KERNEL_COMMANDS",
    "BorrowedMcpTool",
    "Command",
    "CommandContext",
    "CommandError",
    "CommandHandler",
    "McpLifecycleError",
    "Outcome",
    "PipeStream",
    "apply_sandbox",
    "command_table",
    "landlock_abi",
    "run_worker",
    "serve",
]
