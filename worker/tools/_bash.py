"""Bash: run a shell command in its own process group (S-LOCAL-1, S-LOCAL-2)."""

from __future__ import annotations

import shutil
import signal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ._base import LocalTool, ToolContext, ToolInput, ToolOutput
from ._process import command_signals_scoped, run_in_process_group, with_parent_death_signal
from ._truncate import HeadTailBuffer

__all__ = [
    "BASH_TOOL",
    "DEFAULT_BASH_TIMEOUT_MS",
    "MAX_BASH_TIMEOUT_MS",
    "BashInput",
    "shell_argv",
]

DEFAULT_BASH_TIMEOUT_MS = 120_000
MAX_BASH_TIMEOUT_MS = 600_000
# Bytes of the model's cap kept free for the omission marker and status line.
_STATUS_RESERVE_BYTES = 512
_OMISSION_HINT = (
    "To see all of it, redirect the output to a file and use Read or Grep on that file."
)


class BashInput(ToolInput):
    """Parameters of Bash."""

    command: str = Field(min_length=1, description="The shell command to run.")
    timeout: int = Field(
        default=DEFAULT_BASH_TIMEOUT_MS,
        ge=1,
        le=MAX_BASH_TIMEOUT_MS,
        description=f"Timeout in milliseconds (at most {MAX_BASH_TIMEOUT_MS}).",
    )
    description: str | SkipJsonSchema[None] = Field(
        default=None,
        description="What the command does, in 5-10 words, for people watching.",
    )


def shell_argv(command: str) -> list[str]:
    """The argv that runs ``command``: bash if installed, else ``/bin/sh``."""
    shell = shutil.which("bash") or "/bin/sh"
    return [shell, "-c", command]


def _describe_end(returncode: int, timed_out: bool, timeout_ms: int) -> str | None:
    if timed_out:
        return (
            f"Error: command timed out after {timeout_ms} ms; it and its child processes "
            "were killed."
        )
    if returncode > 0:
        return f"[exit code {returncode}]"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"[killed by signal {name}]"
    return None


async def _bash(params: BashInput, ctx: ToolContext) -> ToolOutput:
    keep = max(0, ctx.max_output_bytes - _STATUS_RESERVE_BYTES) // 2
    output = HeadTailBuffer(head_limit=keep, tail_limit=keep)
    result = await run_in_process_group(
        # Its own signal scope where the worker's is one: it cannot end the worker early.
        with_parent_death_signal(
            shell_argv(params.command), own_signal_scope=command_signals_scoped()
        ),
        cwd=ctx.cwd,
        timeout_s=params.timeout / 1000,
        output=output,
        on_process_group=ctx.on_process_group,
    )
    text = output.render(_OMISSION_HINT).rstrip("\n") or "(no output)"
    ending = _describe_end(result.returncode, result.timed_out, params.timeout)
    if ending is None:
        return ToolOutput(text)
    return ToolOutput(f"{text}\n{ending}", is_error=True)


BASH_TOOL: LocalTool[BashInput] = LocalTool(
    name="Bash",
    description=(
        "Run a shell command with bash -c in the working directory; stdout and stderr "
        "are returned together, stdin is empty. Each call starts a fresh shell. Timeout "
        f"in milliseconds: default {DEFAULT_BASH_TIMEOUT_MS}, at most "
        f"{MAX_BASH_TIMEOUT_MS}; on timeout the command and its children are killed and "
        "the output so far is returned. Long output keeps its start and end. Prefer "
        "Read, Grep and Glob over cat, grep and find."
    ),
    input_model=BashInput,
    execute=_bash,
    truncation_hint=_OMISSION_HINT,
)
