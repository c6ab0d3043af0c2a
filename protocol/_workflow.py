"""What the supervisor asks a script worker to run: one workflow script, and what comes back.

``WorkflowScriptSpec`` is the params of the ``workflow.run`` request;
``WorkflowScriptOutcome`` its result. The source travels in the request: the
script worker reads no file to run it, and what ran is exactly what the
supervisor analysed and journaled.

``WorkflowAnswerCheck`` is the params of ``workflow.check_answer``: the
supervisor hands a typed ask's answer back to the script worker, which
validates it against the script's own type (``WorkflowCheckResult``). A
schema the script wrote is never evaluated in the supervisor: its cost
(a ``pattern`` that backtracks, a ``$ref`` cycle) falls on the script's
own worker, and a script that lies about its answers fools only itself.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "MAX_CHECK_PROBLEM_CHARS",
    "WORKFLOW_SCRIPT_ERROR",
    "WorkflowAnswerCheck",
    "WorkflowCheckResult",
    "WorkflowScriptOutcome",
    "WorkflowScriptSpec",
]

#: The most a script worker may say about an answer that does not fit its type.
MAX_CHECK_PROBLEM_CHARS = 4000

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


class WorkflowAnswerCheck(_Frozen):
    """``workflow.check_answer``: does ``text`` fit the type of typed ask ``check_id``?"""

    check_id: int = Field(ge=0)
    text: str


class WorkflowCheckResult(_Frozen):
    """What is wrong with the answer (put to the actor in its correction round), or None."""

    problem: str | None = Field(default=None, min_length=1, max_length=MAX_CHECK_PROBLEM_CHARS)
