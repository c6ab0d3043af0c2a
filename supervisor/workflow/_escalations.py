"""Escalations: a workflow actor's question for the workflow's creator, and its answer.

An actor calls EscalateQuestion; its ask waits here while the question goes
to the creator, the root session that called CreateWorkflow, as a
``<workflow-question>`` in its command queue naming the question's id. The
creator's ResolveWorkflowQuestion answers it by that id and the actor goes
on with the answer as its tool result.

Invariants:

- Question ids are ``q1``, ``q2``... in the order the creator's actors ask:
  unique within the desk, which is all the creator can name.
- Only the creator answers. A desk belongs to one root session's workflow
  tools, and nothing else can reach it: no worker method answers a
  question, and actors never have ResolveWorkflowQuestion (S-ACT-4).
- A question is answered at most once; an answer to a question that is
  closed (answered, timed out, its run ended) is refused, saying which.
- A question unanswered after ``timeout_s`` fails the actor's ask with
  ``EscalationUnansweredError``. Race: an answer and the timeout may land in
  the same tick; whichever closes the question first wins, the other is told.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import trio

from protocol import WorkflowEscalation

from ._errors import EscalationUnansweredError, WorkflowError

__all__ = ["EscalationDesk", "OpenQuestion", "question_fragment"]

QuestionState = Literal["open", "answered", "timed_out", "closed"]


@dataclass(slots=True)
class OpenQuestion:
    """One escalated question and, once given, its answer."""

    question_id: str
    run_id: str
    actor: str
    question: str
    options: tuple[str, ...] = ()
    asked_at: float = field(default_factory=time.time)
    state: QuestionState = "open"
    answer: str | None = None
    settled: trio.Event = field(default_factory=trio.Event)


def question_fragment(question: OpenQuestion) -> str:
    """The ``<workflow-question>`` the creator reads, with how to answer it."""
    options = "".join(f"\n<option>{html.escape(option)}</option>" for option in question.options)
    return (
        f'<workflow-question id="{html.escape(question.question_id)}" '
        f'run="{html.escape(question.run_id)}" actor="{html.escape(question.actor)}">\n'
        f"{html.escape(question.question)}{options}\n</workflow-question>\n"
        "An actor of a workflow you created asks this and waits. Answer it with "
        f'ResolveWorkflowQuestion {{"question_id": "{question.question_id}", "answer": ...}}.'
    )


class EscalationDesk:
    """The open questions of one creator's workflows; ``deliver`` puts each to the creator."""

    def __init__(self, *, timeout_s: float, deliver: Callable[[OpenQuestion], None]) -> None:
        self.timeout_s = timeout_s
        self._deliver = deliver
        self._questions: dict[str, OpenQuestion] = {}

    async def escalate(self, run_id: str, actor: str, escalation: WorkflowEscalation) -> str:
        """Put the question to the creator and return the answer.

        Raises ``EscalationUnansweredError`` after ``timeout_s`` without one.
        """
        question = OpenQuestion(
            question_id=f"q{len(self._questions) + 1}",
            run_id=run_id,
            actor=actor,
            question=escalation.question,
            options=escalation.options,
        )
        self._questions[question.question_id] = question
        try:
            self._deliver(question)
            with trio.move_on_after(self.timeout_s):
                await question.settled.wait()
        finally:
            if question.state == "open":
                question.state = "timed_out"
                question.settled.set()
        if question.state != "answered" or question.answer is None:
            raise EscalationUnansweredError(actor, question.question_id, self.timeout_s)
        return question.answer

    def resolve(self, question_id: str, answer: str) -> OpenQuestion:
        """Answer an open question; ``WorkflowError`` says why one cannot be answered."""
        question = self._questions.get(question_id.strip())
        if question is None:
            known = ", ".join(q.question_id for q in self.open_questions()) or "none is open"
            raise WorkflowError(
                f"no question {question_id!r} from your workflows; open questions: {known}"
            )
        if question.state != "open":
            said = {
                "answered": "it was already answered",
                "timed_out": f"nobody answered it within {self.timeout_s:g} s, so its ask failed",
                "closed": "its workflow run ended",
            }[question.state]
            raise WorkflowError(f"question {question.question_id} is closed: {said}")
        question.state, question.answer = "answered", answer
        question.settled.set()
        return question

    def close_run(self, run_id: str) -> None:
        """Close the open questions of an ended run (their asks are gone)."""
        for question in self._questions.values():
            if question.run_id == run_id and question.state == "open":
                question.state = "closed"
                question.settled.set()

    def open_questions(self) -> list[OpenQuestion]:
        """The questions still waiting for an answer, oldest first."""
        return [q for q in self._questions.values() if q.state == "open"]
