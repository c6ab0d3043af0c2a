"""Approvals: who answers when a rule says ``ask`` (S-APR-1).

Every ask, from the root or from any subagent, goes to the root session's
one approval handler, with the root session's identity and an ``origin``
naming the innermost real requester: the child agent, its session and the
parent tool call that launched it. A worker can never answer its own ask: it
only ever sends ``permission.check``, and the answer comes from here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from ..files._printable import printable
from ..kernel import EventBudget
from ._approval_text import ApprovalView, approval_view

__all__ = [
    "ApprovalDecision",
    "ApprovalHandler",
    "ApprovalOrigin",
    "ApprovalRequest",
    "QuestionHandler",
    "QuestionRequest",
    "Requester",
    "TerminalApprovalHandler",
    "describe_origin",
    "describe_request",
    "fixed_approval_handler",
    "view_request",
]

ApprovalDecision = Literal["allow_once", "allow_always", "deny"]


@dataclass(frozen=True, slots=True)
class ApprovalOrigin:
    """The real requester behind an ask (kept innermost when asks are relayed)."""

    kind: Literal["root", "subagent"]
    agent_id: str | None = None
    session_id: str | None = None
    parent_tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Requester:
    """Who puts an ask to the root's handlers, and where its events are recorded.

    ``root_session_id`` is the identity the ask is made with (S-APR-1);
    ``event_sessions`` the child's session and, mirrored, its parent's
    (S-APR-2), or just the root's own; ``budget`` the asking worker's, which
    those events are charged to (S-SEC-8; None for the root).
    """

    root_session_id: str
    origin: ApprovalOrigin
    description: str
    event_sessions: tuple[str, ...]
    budget: EventBudget | None = None


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One tool call waiting for a person's (or a rule's) decision."""

    session_id: str
    origin: ApprovalOrigin
    tool: str
    tool_input: Mapping[str, Any]
    reason: str
    description: str = field(default="")


ApprovalHandler = Callable[[ApprovalRequest], Awaitable[ApprovalDecision]]


@dataclass(frozen=True, slots=True)
class QuestionRequest:
    """An agent's question for the user (AskUserQuestion), with who asks."""

    session_id: str
    origin: ApprovalOrigin
    question: str
    options: tuple[str, ...] = ()
    description: str = ""


QuestionHandler = Callable[[QuestionRequest], Awaitable[str]]


def fixed_approval_handler(decision: Literal["allow", "deny"]) -> ApprovalHandler:
    """A handler that answers every ask the same way (``--approve allow|deny``)."""
    answer: ApprovalDecision = "allow_once" if decision == "allow" else "deny"

    async def handler(request: ApprovalRequest) -> ApprovalDecision:
        return answer

    return handler


class TerminalApprovalHandler:
    """Asks the person at the terminal, one question at a time."""

    def __init__(self, prompt: Callable[[str], str] = input) -> None:
        self._prompt = prompt
        self._lock = trio.Lock()

    async def _ask(self, text: str) -> str:
        # One question on the terminal at a time, however many agents ask.
        async with self._lock:
            return await trio.to_thread.run_sync(self._prompt, text)

    async def answer_question(self, request: QuestionRequest) -> str:
        """Show the question (and its options); read the answer."""
        options = "".join(f"\n  {i}. {option}" for i, option in enumerate(request.options, 1))
        options = printable(options, multiline=True)
        answer = await self._ask(
            f"\n{describe_origin(request.origin, request.description)} asks: "
            f"{printable(request.question, multiline=True)}{options}\n> "
        )
        if answer.strip().isdigit() and 1 <= int(answer) <= len(request.options):
            return request.options[int(answer) - 1]
        return answer.strip()

    async def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        """Show who asks for what; read allow once / always (when offered) / deny."""
        view = view_request(request)
        always = " / [a]lways" if view.offers_always else ""
        answer = (await self._ask(f"\n{view.text}\nAllow? [y]es once{always} / [N]o: ")).strip()
        if answer.lower() in ("y", "yes"):
            return "allow_once"
        if answer.lower() in ("a", "always") and view.offers_always:
            return "allow_always"
        return "deny"


def describe_origin(origin: ApprovalOrigin, description: str) -> str:
    """Who asks, for a person: the main agent, or which subagent (escaped for a terminal)."""
    if origin.kind == "subagent":
        return f"subagent {printable(origin.agent_id or '')} ({printable(description)})"
    return "the main agent"


def view_request(request: ApprovalRequest) -> ApprovalView:
    """An approval's question for a person, and whether it may offer "always".

    One rendering for every place that asks (:func:`approval_view`): who asks,
    what runs first and whole or marked as cut, the rest of the input, the
    agent's own description labelled as such, and why it asks; all escaped.
    """
    return approval_view(
        describe_origin(request.origin, request.description),
        request.tool,
        request.tool_input,
        request.reason,
    )


def describe_request(request: ApprovalRequest) -> str:
    """The text of :func:`view_request`."""
    return view_request(request).text
