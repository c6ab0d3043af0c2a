"""What the supervisor asks a script worker to run: one workflow script, and what comes back.

``WorkflowScriptSpec`` is the params of the ``workflow.run`` request;
``WorkflowScriptOutcome`` its result. The source travels in the request: the
script worker reads no file to run it, and what ran is exactly what the
supervisor analysed and journaled.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = ["WORKFLOW_SCRIPT_ERROR", "WorkflowScriptOutcome", "WorkflowScriptSpec"]

#: The error code of a script that cannot run as written (no ``@workflow``, bad inputs).
WORKFLOW_SCRIPT_ERROR = "script_error"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WorkflowScriptSpec(_Frozen):
    """One script run: its source, the name it is known by, its inputs and its context."""

    source: str
    #: The script's name in tracebacks and ``agent()`` sites (its path, or ``<CreateWorkflow>``).
    filename: str = Field(min_length=1)
    run_id: str = Field(min_length=1)
    cwd: str
    #: The model its actors inherit.
    model: str
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    amends: str | None = None


class WorkflowScriptOutcome(_Frozen):
    """What the workflow function returned, in its JSON form."""

    value: JsonValue = None
