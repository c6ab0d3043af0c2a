"""The root's workflow tools: CreateWorkflow, AmendWorkflow, ResolveWorkflowQuestion,
ReadSessionContext.

Offered to the root agent alone (``workflow_tools`` is a ``RootToolFactory``):
a subagent's tools come from its parent's local tools, which these are not,
and an actor's are a subtraction that removes them by name (S-ACT-4).

- ``CreateWorkflow {script, inputs?, description}`` analyses the script
  before anything runs (a syntax error, no ``@workflow``, a duplicate actor
  name come back as a tool error to fix), then runs it in the background as
  a ``workflow`` task in a sandboxed worker; its end is one notification
  (S-NOTE), carrying the result or the error.
- ``AmendWorkflow {run_id, script, inputs?}`` runs a changed script as an
  amended re-run of one of this session's runs: unchanged named actors
  replay from the journal with no model call (S-ACT-3).
- ``ResolveWorkflowQuestion {question_id, answer}`` answers an actor's
  escalation, which reached the root as a ``<workflow-question>``.
- ``ReadSessionContext {}`` returns, as JSON, what this session has
  established for a script author to build on: its id, model and working
  directory, the user's requests so far (in order), its tasks (subagents,
  background commands, workflows) with their status and a short result,
  and the open workflow questions.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from protocol import ToolCall, ToolSpec
from worker.agent import HostTool
from worker.tools import ToolOutput

from ..delegation._notifications import NOTIFICATION_PREFIX, Command
from ..delegation._root import RootSession, RootToolFactory
from ..delegation._subvisor import Subvisor
from ._errors import WorkflowError
from ._escalations import EscalationDesk, OpenQuestion, question_fragment
from ._script_host import analyse_source
from ._workflow_task import WorkflowTask

__all__ = ["ROOT_WORKFLOW_TOOLS", "WorkflowTools", "workflow_tools"]

#: The four tools only the root has (S-ACT-4 withholds them from actors).
ROOT_WORKFLOW_TOOLS = (
    "CreateWorkflow",
    "AmendWorkflow",
    "ResolveWorkflowQuestion",
    "ReadSessionContext",
)

#: How long a task's result is in ReadSessionContext.
_RESULT_CHARS = 500

_SCRIPT_HELP = (
    "A Python workflow script: `from supervisor.workflow import agent, workflow`, exactly one "
    "`@workflow async def name(ctx, **inputs)`; inside it `a = agent('name', system='...')` "
    "declares an actor (unique names) and `await a.ask('prompt')` returns its answer "
    "(`schema=PydanticModel` for a validated one); the function's return value is the result. "
    "It runs sandboxed: no network, no file writes; the actors do the work."
)


class _Input(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _CreateInput(_Input):
    script: str = Field(min_length=1)
    description: str = Field(min_length=1, max_length=200)
    inputs: dict[str, JsonValue] = Field(default_factory=dict)


class _AmendInput(_Input):
    run_id: str = Field(min_length=1)
    script: str = Field(min_length=1)
    inputs: dict[str, JsonValue] | None = None


class _ResolveInput(_Input):
    question_id: str = Field(min_length=1)
    answer: str = Field(min_length=1)


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        input_schema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    )


_SCRIPT = {"type": "string", "description": _SCRIPT_HELP}
_INPUTS = {"type": "object", "description": "Keyword inputs of the @workflow function."}

CREATE_WORKFLOW_SPEC = _spec(
    "CreateWorkflow",
    "Write and start a workflow: a script that declares named actors (subagents) and asks "
    "them for work in code, in order or concurrently. It runs in the background; you are "
    "notified with its result. Actors may escalate questions to you: answer them with "
    "ResolveWorkflowQuestion.",
    {"script": _SCRIPT, "inputs": _INPUTS, "description": {"type": "string"}},
    ["script", "description"],
)
AMEND_WORKFLOW_SPEC = _spec(
    "AmendWorkflow",
    "Run a changed version of one of your workflows: actors whose instructions and asks did "
    "not change replay their answers from the earlier run without calling a model.",
    {
        "run_id": {
            "type": "string",
            "description": "The run to amend: its id, or the description it was created with.",
        },
        "script": _SCRIPT,
        "inputs": {"type": "object", "description": "Default: the earlier run's inputs."},
    },
    ["run_id", "script"],
)
RESOLVE_WORKFLOW_QUESTION_SPEC = _spec(
    "ResolveWorkflowQuestion",
    "Answer a question an actor of your workflow escalated to you (a <workflow-question>); "
    "the actor waits for it and goes on with your answer.",
    {"question_id": {"type": "string"}, "answer": {"type": "string"}},
    ["question_id", "answer"],
)
READ_SESSION_CONTEXT_SPEC = _spec(
    "ReadSessionContext",
    "What this session has established so far, as JSON: the user's requests, your tasks and "
    "workflows with their results, open workflow questions, the working directory and "
    "model. Read it before writing a workflow that builds on earlier work.",
    {},
    [],
)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "input"
    return f"{where}: {error['msg']}"


class WorkflowTools:
    """One root session's workflows: their tasks, their questions, and the four tools."""

    def __init__(self, host: Subvisor, root: RootSession) -> None:
        #: What each ``WorkflowTask`` runs on (its engine takes the ``Subvisor``).
        self._host = host
        #: The session's tasks, for ReadSessionContext.
        self._registry = host.registry
        #: Runs each workflow in the ``Subvisor``'s nursery (it outlives the turn).
        self._spawn = host.spawn_background
        self.root = root
        self.escalations = EscalationDesk(
            timeout_s=host.settings.workflow_question_timeout_s, deliver=self._deliver
        )
        self.tasks: dict[str, WorkflowTask] = {}

    def tools(self) -> list[HostTool]:
        """The four tools, bound to this session."""
        return [
            _Tool(CREATE_WORKFLOW_SPEC, self.create),
            _Tool(AMEND_WORKFLOW_SPEC, self.amend),
            _Tool(RESOLVE_WORKFLOW_QUESTION_SPEC, self.resolve),
            _Tool(READ_SESSION_CONTEXT_SPEC, self.read_context),
        ]

    def _deliver(self, question: OpenQuestion) -> None:
        queue = self.root.queue
        queue.enqueue(
            Command(
                kind="workflow-question",
                priority="next",
                text=question_fragment(question),
                task_id=question.run_id,
            )
        )

    # -- the tools --------------------------------------------------------------------

    async def create(self, call: ToolCall) -> ToolOutput:
        """CreateWorkflow."""
        try:
            asked = _CreateInput.model_validate(call.input)
        except ValidationError as exc:
            return ToolOutput(f"Error: CreateWorkflow input: {_first_error(exc)}.", True)
        return self._start(asked.script, asked.description, asked.inputs, None, call.id)

    async def amend(self, call: ToolCall) -> ToolOutput:
        """AmendWorkflow."""
        try:
            asked = _AmendInput.model_validate(call.input)
        except ValidationError as exc:
            return ToolOutput(f"Error: AmendWorkflow input: {_first_error(exc)}.", True)
        wanted = asked.run_id.strip()
        # By id, else by the description it was created with (the latest such run).
        found = [t for t in self.tasks.values() if wanted in (t.run_id, t.description)]
        if not found:
            mine = ", ".join(f"{t.run_id} ({t.description})" for t in self.tasks.values())
            return ToolOutput(
                f"Error: {asked.run_id!r} is not a workflow run of this session "
                f"(yours: {mine or 'none yet'}).",
                True,
            )
        earlier = found[-1]
        inputs = asked.inputs if asked.inputs is not None else dict(earlier.inputs)
        return self._start(asked.script, earlier.description, inputs, earlier.run_id, call.id)

    def _start(
        self,
        script: str,
        description: str,
        inputs: dict[str, JsonValue],
        amend: str | None,
        tool_use_id: str,
    ) -> ToolOutput:
        root = self.root
        try:
            name, sites = analyse_source(script, "<script>")
        except WorkflowError as exc:
            return ToolOutput(
                f"Error: the workflow script was not started: {exc}. Fix the script and call "
                f"{'AmendWorkflow' if amend else 'CreateWorkflow'} again.",
                True,
            )
        task = WorkflowTask(
            self._host,
            parent_session_id=root.session_id,
            queue=root.queue,
            escalations=self.escalations,
            source=script,
            description=description,
            parent_model=root.model,
            cwd=root.cwd,
            inputs=inputs,
            amend=amend,
            tool_use_id=tool_use_id,
        )
        task.register()
        self.tasks[task.run_id] = task
        self._spawn(task.run)
        listed = ", ".join(
            f"{site['name'] or '<' + site['kind'] + '>'} (line {site['line']})" for site in sites
        )
        return ToolOutput(
            f"Workflow {name} started in the background as run {task.run_id}"
            + (f", amending {amend}" if amend else "")
            + f". Actor sites: {listed or 'none found'}. You will be notified when it ends; "
            "an actor's question arrives as a <workflow-question> for ResolveWorkflowQuestion."
        )

    async def resolve(self, call: ToolCall) -> ToolOutput:
        """ResolveWorkflowQuestion."""
        try:
            asked = _ResolveInput.model_validate(call.input)
            question = self.escalations.resolve(asked.question_id, asked.answer)
        except ValidationError as exc:
            return ToolOutput(f"Error: ResolveWorkflowQuestion input: {_first_error(exc)}.", True)
        except WorkflowError as exc:
            return ToolOutput(f"Error: {exc}", True)
        return ToolOutput(
            f"Answered {question.question_id}; actor {question.actor} of {question.run_id} goes on."
        )

    async def read_context(self, call: ToolCall) -> ToolOutput:
        """ReadSessionContext."""
        root = self.root
        requests = [
            message.content
            for message in root.loop.messages
            if message.role == "user" and not message.content.startswith(NOTIFICATION_PREFIX)
        ]
        tasks = [
            {
                "task_id": record.task_id,
                "kind": record.kind,
                "description": record.description,
                "status": record.status,
                "parent_task_id": record.parent_task_id,
                "result": (record.result or record.error or "")[:_RESULT_CHARS] or None,
            }
            for record in self._registry.list(root.session_id)
        ]
        context = {
            "session_id": root.session_id,
            "model": root.model,
            "cwd": str(root.cwd),
            "user_requests": requests,
            "tasks": tasks,
            "open_questions": [
                {
                    "question_id": q.question_id,
                    "run_id": q.run_id,
                    "actor": q.actor,
                    "question": q.question,
                }
                for q in self.escalations.open_questions()
            ],
        }
        return ToolOutput(json.dumps(context, indent=2, ensure_ascii=False))


class _Tool:
    """One of the four, as the root's toolbox takes it."""

    aliases: tuple[str, ...] = ()
    concurrency_safe = False

    def __init__(self, spec: ToolSpec, run: Any) -> None:
        self.spec = spec
        self._run = run

    async def __call__(self, call: ToolCall) -> ToolOutput:
        """Run the tool."""
        output: ToolOutput = await self._run(call)
        return output


def workflow_tools(host: Subvisor) -> RootToolFactory:
    """The root's workflow tools on ``host``, for ``RootSession(host, extra_tools=...)``."""

    def tools(root: RootSession) -> list[HostTool]:
        return WorkflowTools(host, root).tools()

    return tools
