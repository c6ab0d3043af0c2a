"""What a workflow run raises; each message says what happened and what to do."""

from __future__ import annotations

from ..kernel import SubvisorError

__all__ = [
    "ActorAnswerInvalidError",
    "ActorAskFailedError",
    "ActorCrashedError",
    "DuplicateActorNameError",
    "EscalationUnansweredError",
    "WorkflowActorPinnedModelError",
    "WorkflowError",
    "WorkflowFailedError",
    "WorkflowScriptError",
]


class WorkflowError(SubvisorError):
    """Base class of the errors of a workflow run."""


class WorkflowScriptError(WorkflowError):
    """The script cannot be run: unreadable, not Python, no ``@workflow``, bad inputs."""


class DuplicateActorNameError(WorkflowError):
    """Two actors of one run have the same name (S-ACT-2).

    A name is the key an amended re-run matches its journal against, so it
    must say which actor it is.
    """

    def __init__(self, name: str, first_line: int, second_line: int, *, script: str) -> None:
        super().__init__(
            f"{script}: actor name {name!r} is declared twice, on line {first_line} and on "
            f"line {second_line}; actor names are unique within a run (S-ACT-2): rename one, "
            "or leave the name out for an anonymous actor (never replayed)"
        )
        self.name = name
        self.lines = (first_line, second_line)


class WorkflowActorPinnedModelError(WorkflowError):
    """The journal pins an actor to a model string without a provider part (S-ACT-5)."""

    def __init__(self, actor: str, pin: str, detail: str = "it has no provider part") -> None:
        super().__init__(
            f"actor {actor!r} is pinned by the journal to model {pin!r}, which is malformed "
            f"({detail}); pass --model provider:model to choose its model for this run, or "
            "re-run without --amend"
        )
        self.actor = actor
        self.pin = pin


class ActorAskFailedError(WorkflowError):
    """An ask got no answer: the model failed, or the actor hit its turn limit."""

    def __init__(self, actor: str, reason: str) -> None:
        super().__init__(f"actor {actor} could not answer: {reason}")
        self.actor = actor
        self.reason = reason


class ActorCrashedError(ActorAskFailedError):
    """The actor's worker process ended during an ask (a crash, a kill, a cap).

    The next ask of the same actor starts a new worker on the conversation
    so far (without the failed ask).
    """

    def __init__(self, actor: str, reason: str) -> None:
        super().__init__(actor, f"its worker process ended: {reason}")


class ActorAnswerInvalidError(ActorAskFailedError):
    """A typed ask's answer did not validate, even after one correction."""

    def __init__(self, actor: str, schema: str, error: str, answer: str) -> None:
        super().__init__(
            actor,
            f"its answer does not match {schema} after one correction: {error}",
        )
        self.schema = schema
        self.error = error
        self.answer = answer


class EscalationUnansweredError(ActorAskFailedError):
    """An actor escalated a question to the workflow's creator and no answer came in time.

    The ask fails with it; the script may catch it, and may ask again.
    """

    def __init__(self, actor: str, question_id: str, timeout_s: float) -> None:
        super().__init__(
            actor,
            f"it escalated question {question_id} to the workflow's creator, who did not "
            f"answer within {timeout_s:g} s (workflow_question_timeout_s); answer sooner with "
            "ResolveWorkflowQuestion, or give the actor what it needs in the ask",
        )
        self.question_id = question_id


class WorkflowFailedError(WorkflowError):
    """The workflow function raised; the run is journaled as failed (see ``__cause__``).

    ``described`` replaces ``Type: message`` for an error that happened
    elsewhere (a script in a worker), so the message says what it was.
    """

    def __init__(self, run_id: str, error: BaseException, *, described: str | None = None) -> None:
        super().__init__(
            f"workflow run {run_id} failed: {described or f'{type(error).__name__}: {error}'}"
        )
        self.run_id = run_id
        self.error = error
