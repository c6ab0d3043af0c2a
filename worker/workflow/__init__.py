"""The workflow script API inside a script worker: what ``supervisor.workflow`` is there.

A workflow script the root model writes is untrusted code: it runs in a
sandboxed worker of its own, never in the supervisor, and a worker never
imports ``supervisor``. So the script worker makes ``supervisor.workflow``
name this module before it runs the script (``worker._workflow_commands``),
and a script written for ``subvisor workflow run`` (the example in the
supervisor's ``supervisor.workflow``) runs here unchanged: its import of
``agent`` and ``workflow`` from ``supervisor.workflow`` gets them from this module.

``agent()`` and ``ask()`` cross the pipe as ``workflow.declare_actor`` and
``workflow.ask`` requests; the supervisor runs the actors as it always does
and answers. Errors arrive as codes and become the classes below, named as
the supervisor's are, so ``except ActorCrashedError`` means the same thing
in both places.
"""

from ._api import (
    ERROR_CODES,
    Actor,
    ActorAnswerInvalid,
    ActorAnswerInvalidError,
    ActorAskFailed,
    ActorAskFailedError,
    ActorCrashed,
    ActorCrashedError,
    CallRefusedError,
    DuplicateActorName,
    DuplicateActorNameError,
    EscalationUnansweredError,
    ScriptRun,
    SupervisorCalls,
    WorkflowActorPinnedModelError,
    WorkflowError,
    WorkflowFailed,
    WorkflowFailedError,
    WorkflowScriptError,
    agent,
    enter_run,
    leave_run,
)
from ._script import (
    ScriptError,
    Workflow,
    WorkflowContext,
    bind_inputs,
    describe_errors,
    dump_value,
    find_workflow,
    strip_fence,
    workflow,
)

__all__ = [
    "ERROR_CODES",
    "Actor",
    "ActorAnswerInvalid",
    "ActorAnswerInvalidError",
    "ActorAskFailed",
    "ActorAskFailedError",
    "ActorCrashed",
    "ActorCrashedError",
    "CallRefusedError",
    "DuplicateActorName",
    "DuplicateActorNameError",
    "EscalationUnansweredError",
    "ScriptError",
    "ScriptRun",
    "SupervisorCalls",
    "Workflow",
    "WorkflowActorPinnedModelError",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowFailedError",
    "WorkflowScriptError",
    "agent",
    "bind_inputs",
    "describe_errors",
    "dump_value",
    "enter_run",
    "find_workflow",
    "leave_run",
    "strip_fence",
    "workflow",
]
