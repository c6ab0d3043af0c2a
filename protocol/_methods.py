"""What a worker may ask of its supervisor: one table, typed both ways.

Each ``MethodSpec`` of ``WORKER_METHODS`` names a method, the model of its
params and the model of its result. A worker sends the method's own
``WorkerRequest`` subclass; the supervisor's decoder picks that subclass by
``method`` and validates ``params`` against it, so a request whose params do
not fit is a protocol violation exactly like an unknown method. The
supervisor answers with an instance of the result model; the worker
validates the ``Response.result`` it receives against the same model
(``MethodSpec.parse_result``). Neither side reads an untyped dict.

Invariants:

- ``WorkerMethod`` is closed: this table is everything a worker can ask for.
  There is no method to spawn a process (S-POL-4). The ``workflow.*``
  methods are a workflow script's calls (``agent()``, ``ask()``) and an
  actor's escalation: the supervisor answers ``workflow.declare_actor`` and
  ``workflow.ask`` only for the one worker that runs a script the root
  created, and ``workflow.escalate`` only for a workflow's actors; any other
  worker is refused them.
- Every method has exactly one request class, one params model and one
  result model, and ``WORKER_METHODS`` lists them all.
- Params and results are frozen and forbid unknown fields. JSON objects the
  model writes are ``JsonObject``, never ``Any``; a tool's input and an MCP
  call's arguments, which the supervisor walks (rules, the MCP server, an
  approval prompt), are ``BoundedJsonObject`` (S-SEC-8: at most
  ``MAX_JSON_CONTAINERS`` maps and arrays, else a protocol violation).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field

from ._chat import ModelRequest, ModelResult
from ._json import BoundedJsonObject, BoundedJsonValue
from ._request_spec import RequestSpec
from ._wildcard import wildcard_match

__all__ = [
    "COORDINATOR_MESSAGE",
    "ECHO",
    "MAX_READ_PATTERN_CHARS",
    "MAX_READ_RULES",
    "MCP_CALL_TOOL",
    "MODEL_CALL",
    "PERMISSION_CHECK",
    "USER_QUESTION",
    "WORKER_METHODS",
    "WORKER_REQUEST_METHODS",
    "WORKFLOW_ASK",
    "WORKFLOW_DECLARE_ACTOR",
    "WORKFLOW_ESCALATE",
    "CoordinatorMessage",
    "CoordinatorMessageRequest",
    "CoordinatorReceipt",
    "EchoParams",
    "EchoRequest",
    "EchoResult",
    "McpToolCall",
    "McpToolCallRequest",
    "McpToolResult",
    "MethodSpec",
    "ModelCallRequest",
    "PermissionCheck",
    "PermissionCheckRequest",
    "PermissionVerdict",
    "QuestionAnswer",
    "ReadRule",
    "UserQuestion",
    "UserQuestionRequest",
    "WorkerMethod",
    "WorkerRequest",
    "WorkflowActorDeclaration",
    "WorkflowActorRef",
    "WorkflowAnswer",
    "WorkflowAsk",
    "WorkflowAskRequest",
    "WorkflowDeclareActorRequest",
    "WorkflowEscalateRequest",
    "WorkflowEscalation",
    "WorkflowEscalationAnswer",
]

#: The only requests a worker can make of its supervisor.
WorkerMethod = Literal[
    "supervisor.echo",
    "model.call",
    "permission.check",
    "coordinator.message",
    "mcp.call_tool",
    "user.question",
    "workflow.declare_actor",
    "workflow.ask",
    "workflow.escalate",
]
WORKER_REQUEST_METHODS: tuple[WorkerMethod, ...] = get_args(WorkerMethod)


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- params and results -----------------------------------------------------------


class EchoParams(_Body):
    """``supervisor.echo``: a value to send back (a liveness check through the handler)."""

    value: BoundedJsonValue = None


class EchoResult(_Body):
    """The value ``supervisor.echo`` was given."""

    value: BoundedJsonValue = None


class PermissionCheck(_Body):
    """``permission.check``: may this agent make this tool call?"""

    tool: str = Field(min_length=1)
    input: BoundedJsonObject = Field(default_factory=dict)


#: The most ``read`` rules one ruleset of a verdict carries (:class:`PermissionVerdict`).
MAX_READ_RULES: Final = 1024
#: The longest pattern of a :class:`ReadRule`.
MAX_READ_PATTERN_CHARS: Final = 4096


class ReadRule(_Body):
    """One ``read`` rule of an agent's policy, as a worker's search needs it (S-POL-2).

    ``pattern`` is the rule's wildcard (:func:`wildcard_match`, the supervisor's own
    matcher), or, for a ``literal`` rule, the one path it names.
    """

    pattern: str = Field(max_length=MAX_READ_PATTERN_CHARS)
    deny: bool
    literal: bool = False

    def matches(self, path: str) -> bool:
        """Whether this rule applies to the absolute ``path``."""
        return self.pattern == path if self.literal else wildcard_match(self.pattern, path)


class PermissionVerdict(_Body):
    """The supervisor's decision on one tool call; ``reason`` says why not.

    ``read_rules``: for an allowed Grep or Glob, each ruleset's ``read`` rules in order
    (the agent's own, then any ceiling), so that the search skips every file a ``read`` deny
    covers (:meth:`hides`), as Claude Code's Read denies cover Grep and Glob.
    """

    allowed: bool
    reason: str = ""
    read_rules: tuple[Annotated[tuple[ReadRule, ...], Field(max_length=MAX_READ_RULES)], ...] = (
        Field(default=(), max_length=2)
    )

    def hides(self, path: str) -> bool:
        """Whether a search must skip ``path``: the last ``read`` rule matching it, in some
        ruleset, is a deny (as the supervisor decides a Read of it)."""
        for rules in self.read_rules:
            for rule in reversed(rules):
                if rule.matches(path):
                    if rule.deny:
                        return True
                    break
        return False


class CoordinatorMessage(_Body):
    """``coordinator.message``: text for the parent, queued as its next input (S-MSG-2)."""

    text: str = Field(min_length=1, pattern=r"\S")


class CoordinatorReceipt(_Body):
    """The message is in the parent's command queue."""

    queued: bool = True


class McpToolCall(_Body):
    """``mcp.call_tool``: call a tool lent from the supervisor's MCP sessions (S-MCP-1)."""

    name: str = Field(min_length=1)
    arguments: BoundedJsonObject = Field(default_factory=dict)


class McpToolResult(_Body):
    """What the MCP tool returned, as text."""

    text: str
    is_error: bool = False


class UserQuestion(_Body):
    """``user.question``: AskUserQuestion, for whoever answers this agent (S-APR-1)."""

    question: str = Field(min_length=1, pattern=r"\S")
    options: tuple[str, ...] = ()


class QuestionAnswer(_Body):
    """The answer, or (``answer`` None) why nobody answered it."""

    answer: str | None = None
    reason: str = ""


class WorkflowActorDeclaration(_Body):
    """``workflow.declare_actor``: a script's ``agent(...)`` call (S-ACT-1, S-ACT-2).

    ``line`` is the script's line that called it (its site); ``tools`` None
    means every tool an actor may have (S-ACT-4).
    """

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"\S")
    system: str = ""
    tools: tuple[str, ...] | None = None
    model: str | None = Field(default=None, min_length=1)
    max_turns: int | None = None
    line: int = Field(default=0, ge=0)


class WorkflowActorRef(_Body):
    """The declared actor: the id its asks name, and how messages name it."""

    actor_id: str = Field(min_length=1)
    label: str


class WorkflowAsk(_Body):
    """``workflow.ask``: ``await actor.ask(prompt, schema=...)``.

    A typed ask carries its type's name, its JSON schema (what the actor is
    told) and ``check_id``: the supervisor asks the script worker
    (``workflow.check_answer``) whether an answer fits the type, and gives
    the actor one correction round when it does not. The schema is never
    evaluated in the supervisor.
    """

    actor_id: str = Field(min_length=1)
    prompt: str = Field(min_length=1, pattern=r"\S")
    schema_name: str | None = Field(default=None, max_length=200)
    json_schema: BoundedJsonObject | None = None
    check_id: int | None = Field(default=None, ge=0)


class WorkflowAnswer(_Body):
    """The actor's answer: its text (a typed ask's is JSON that fits the schema)."""

    text: str


#: The most options a workflow actor's question may offer (the tool's ``maxItems``).
_MAX_ESCALATION_OPTIONS = 8
#: The most characters of one option.
_MAX_ESCALATION_OPTION_CHARS = 1_000


class WorkflowEscalation(_Body):
    """``workflow.escalate``: an actor's question for the workflow's creator."""

    question: str = Field(min_length=1, max_length=20_000, pattern=r"\S")
    #: At most 8 of 1,000 characters each: the
    #: question goes into the creator's (the root's) context whole.
    options: tuple[Annotated[str, Field(max_length=_MAX_ESCALATION_OPTION_CHARS)], ...] = Field(
        default=(), max_length=_MAX_ESCALATION_OPTIONS
    )


class WorkflowEscalationAnswer(_Body):
    """The creator's answer (ResolveWorkflowQuestion)."""

    answer: str


# -- requests -----------------------------------------------------------------------


class WorkerRequest(BaseModel):
    """A request from a worker to its supervisor; each method has its own subclass."""

    # Strict: a wire value of the wrong type is a protocol violation, never
    # coerced ("7" is not an id). The params models keep their own config.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    type: Literal["request"] = "request"
    id: int = Field(ge=0)
    method: WorkerMethod
    params: BaseModel


class EchoRequest(WorkerRequest):
    """A ``supervisor.echo`` request."""

    method: Literal["supervisor.echo"] = "supervisor.echo"
    params: EchoParams


class ModelCallRequest(WorkerRequest):
    """A ``model.call`` request: the agent's next model call."""

    method: Literal["model.call"] = "model.call"
    params: ModelRequest


class PermissionCheckRequest(WorkerRequest):
    """A ``permission.check`` request."""

    method: Literal["permission.check"] = "permission.check"
    params: PermissionCheck


class CoordinatorMessageRequest(WorkerRequest):
    """A ``coordinator.message`` request."""

    method: Literal["coordinator.message"] = "coordinator.message"
    params: CoordinatorMessage


class McpToolCallRequest(WorkerRequest):
    """An ``mcp.call_tool`` request."""

    method: Literal["mcp.call_tool"] = "mcp.call_tool"
    params: McpToolCall


class UserQuestionRequest(WorkerRequest):
    """A ``user.question`` request."""

    method: Literal["user.question"] = "user.question"
    params: UserQuestion


class WorkflowDeclareActorRequest(WorkerRequest):
    """A ``workflow.declare_actor`` request."""

    method: Literal["workflow.declare_actor"] = "workflow.declare_actor"
    params: WorkflowActorDeclaration


class WorkflowAskRequest(WorkerRequest):
    """A ``workflow.ask`` request."""

    method: Literal["workflow.ask"] = "workflow.ask"
    params: WorkflowAsk


class WorkflowEscalateRequest(WorkerRequest):
    """A ``workflow.escalate`` request."""

    method: Literal["workflow.escalate"] = "workflow.escalate"
    params: WorkflowEscalation


# -- the table ----------------------------------------------------------------------

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class MethodSpec(RequestSpec[WorkerRequest, P, R]):
    """One method of the table; ``parse_result`` validates what the supervisor answered."""

    __slots__ = ()


ECHO = MethodSpec("supervisor.echo", EchoRequest, EchoParams, EchoResult)
MODEL_CALL = MethodSpec("model.call", ModelCallRequest, ModelRequest, ModelResult)
PERMISSION_CHECK = MethodSpec(
    "permission.check", PermissionCheckRequest, PermissionCheck, PermissionVerdict
)
COORDINATOR_MESSAGE = MethodSpec(
    "coordinator.message", CoordinatorMessageRequest, CoordinatorMessage, CoordinatorReceipt
)
MCP_CALL_TOOL = MethodSpec("mcp.call_tool", McpToolCallRequest, McpToolCall, McpToolResult)
USER_QUESTION = MethodSpec("user.question", UserQuestionRequest, UserQuestion, QuestionAnswer)
WORKFLOW_DECLARE_ACTOR = MethodSpec(
    "workflow.declare_actor",
    WorkflowDeclareActorRequest,
    WorkflowActorDeclaration,
    WorkflowActorRef,
)
WORKFLOW_ASK = MethodSpec("workflow.ask", WorkflowAskRequest, WorkflowAsk, WorkflowAnswer)
WORKFLOW_ESCALATE = MethodSpec(
    "workflow.escalate", WorkflowEscalateRequest, WorkflowEscalation, WorkflowEscalationAnswer
)

#: Every method a worker may ask, by name.
WORKER_METHODS: dict[str, MethodSpec[BaseModel, BaseModel]] = {
    spec.name: spec  # type: ignore[misc]
    for spec in (
        ECHO,
        MODEL_CALL,
        PERMISSION_CHECK,
        COORDINATOR_MESSAGE,
        MCP_CALL_TOOL,
        USER_QUESTION,
        WORKFLOW_DECLARE_ACTOR,
        WORKFLOW_ASK,
        WORKFLOW_ESCALATE,
    )
}
