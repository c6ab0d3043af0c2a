"""Dynamic workflows: a script declares named actors and asks them for work (S-ACT-1..5).

A subagent is hired on the spot by a parent model; an actor is a role
written into a workflow script, run by the engine in its own worker process,
journaled, and replayed by name when the script is amended and run again::

    from supervisor.workflow import agent, workflow

    @workflow
    async def review(ctx, diff: str) -> Verdict:
        writer = agent("writer", system="You write minimal, correct patches.")
        critic = agent("critic", system="You review patches.", tools=["Read", "Grep"])
        draft = await writer.ask(f"Draft a fix for: {diff}")
        return await critic.ask(f"Review: {draft}", schema=Verdict)

Run it with ``subvisor workflow run review.py --input diff=...``, amend it
with ``--amend RUN_ID``, look at a run with ``subvisor workflow show RUN_ID``.

A root agent writes workflows too: ``workflow_tools(host)`` gives it
CreateWorkflow, AmendWorkflow, ResolveWorkflowQuestion and ReadSessionContext.
A script it writes runs in a sandboxed worker of its own
(``run_sandboxed_workflow``), where ``supervisor.workflow`` names the
worker's script API (``worker.workflow``) with the same names.
"""

from ._actor import Actor, ActorDefinition, prompt_hash
from ._contract import (
    ACTOR_DISALLOWED_TOOLS,
    ACTOR_IDENTITY,
    actor_system_prompt,
    actor_tool_names,
)
from ._engine import (
    Workflow,
    WorkflowContext,
    WorkflowOutcome,
    agent,
    load_workflow,
    run_workflow,
    workflow,
)
from ._errors import (
    ActorAnswerInvalidError,
    ActorAskFailedError,
    ActorCrashedError,
    DuplicateActorNameError,
    EscalationUnansweredError,
    WorkflowActorPinnedModelError,
    WorkflowError,
    WorkflowFailedError,
    WorkflowScriptError,
)
from ._escalations import EscalationDesk, OpenQuestion
from ._journal import ActorRecord, AskRecord, AskSource, RunRecord, RunStatus, WorkflowJournal
from ._model import ActorModel, ModelSource, resolve_actor_model
from ._root_tools import ROOT_WORKFLOW_TOOLS, WorkflowTools, workflow_tools
from ._script_host import run_sandboxed_workflow
from ._sites import ActorSite, analyse_script
from ._workflow_task import WorkflowTask

# The old names, kept for scripts written before every exception's name ended in ``Error``.
ActorAnswerInvalid = ActorAnswerInvalidError
ActorAskFailed = ActorAskFailedError
ActorCrashed = ActorCrashedError
DuplicateActorName = DuplicateActorNameError
WorkflowFailed = WorkflowFailedError

__all__ = [
    "ACTOR_DISALLOWED_TOOLS",
    "ACTOR_IDENTITY",
    "ROOT_WORKFLOW_TOOLS",
    "Actor",
    "ActorAnswerInvalid",
    "ActorAnswerInvalidError",
    "ActorAskFailed",
    "ActorAskFailedError",
    "ActorCrashed",
    "ActorCrashedError",
    "ActorDefinition",
    "ActorModel",
    "ActorRecord",
    "ActorSite",
    "AskRecord",
    "AskSource",
    "DuplicateActorName",
    "DuplicateActorNameError",
    "EscalationDesk",
    "EscalationUnansweredError",
    "ModelSource",
    "OpenQuestion",
    "RunRecord",
    "RunStatus",
    "Workflow",
    "WorkflowActorPinnedModelError",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowFailedError",
    "WorkflowJournal",
    "WorkflowOutcome",
    "WorkflowScriptError",
    "WorkflowTask",
    "WorkflowTools",
    "actor_system_prompt",
    "actor_tool_names",
    "agent",
    "analyse_script",
    "load_workflow",
    "prompt_hash",
    "resolve_actor_model",
    "run_sandboxed_workflow",
    "run_workflow",
    "workflow",
    "workflow_tools",
]
