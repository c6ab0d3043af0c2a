"""One tool call from raw model input to a readable result (S-LOCAL-2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ._base import LocalTool, ToolContext, ToolOutput
from ._errors import ToolError, describe_os_error, describe_validation_error
from ._truncate import truncate_text

__all__ = ["invoke_tool"]


async def invoke_tool(
    tool: LocalTool[Any], raw_input: Mapping[str, Any], ctx: ToolContext
) -> ToolOutput:
    """Validate ``raw_input``, run ``tool`` and cap the result at ``ctx.max_output_bytes``.

    Every failure becomes an error result the model can read; only
    cancellation (and other ``BaseException``) propagates.
    """
    candidate: object = dict(raw_input) if isinstance(raw_input, Mapping) else raw_input
    try:
        params = tool.input_model.model_validate(candidate)
    except ValidationError as exc:
        return ToolOutput(describe_validation_error(tool.name, exc), is_error=True)
    try:
        output = await tool.execute(params, ctx)
    except ToolError as exc:
        output = ToolOutput(str(exc), is_error=True)
    except OSError as exc:
        output = ToolOutput(describe_os_error(exc), is_error=True)
    except Exception as exc:
        # A bug in a tool, or something no one foresaw: the model should
        # learn the call failed, and the worker must keep running.
        output = ToolOutput(
            f"Error: {tool.name} failed unexpectedly: {type(exc).__name__}: {exc}",
            is_error=True,
        )
    text = truncate_text(output.text, ctx.max_output_bytes, tool.truncation_hint)
    return ToolOutput(text, is_error=output.is_error)
