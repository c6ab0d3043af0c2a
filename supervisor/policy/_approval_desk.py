"""``ApprovalDesk``: decides tool calls by an agent's rules, and puts asks to a person.

One desk per ``Subvisor``: every agent's tool call (the root's in-process,
a subagent's or an actor's through its worker's ``permission.check``) is
decided here, and every ``ask`` goes to the root session's one approval
handler, every AskUserQuestion to its one question handler (S-APR-1). What
was asked and answered is recorded in the requester's event sessions: the
child's and, mirrored, its parent's (S-APR-2).

"Allow always" grows the asking agent's own rules (``PolicyHolder.policy``)
and nobody else's.

A long check (:data:`INLINE_COMMAND`) runs on the desk's one thread slot, and
each requester (an agent, by its origin) has at most one long check waiting
for it (S-SEC-8): the slot's queue is FIFO, so whoever asks waits behind at
most one check of each other requester, however many a worker keeps in
flight (one worker's 31 checks of a 130 KB line kept a sibling's 6 KB
heredoc waiting 7.5 s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import trio

from protocol import QuestionAnswer, UserQuestion

from ..state._store import SessionStore
from ._approvals import (
    ApprovalHandler,
    ApprovalRequest,
    QuestionHandler,
    QuestionRequest,
    Requester,
)
from ._policy import PolicyDecision, PolicyHolder, ToolPolicy

__all__ = ["ApprovalDesk"]

#: Why a question got no answer where nobody is there to give one.
NOBODY_ANSWERS = (
    "nobody can answer questions in this session; decide for yourself "
    "and say in your answer what you assumed"
)


#: A Bash command longer than this is checked on a thread, so that the event loop (every
#: other agent, heartbeats, watchdogs) runs meanwhile: such a check may take a while,
#: bounded by the lexer's limits (S-SEC-9); shorter ones take well under a millisecond.
INLINE_COMMAND: Final = 4096


def _decide(
    policy: ToolPolicy, tool: str, tool_input: Mapping[str, Any], headless: bool
) -> PolicyDecision:
    decision = policy.check(tool, tool_input)
    if decision.action == "ask" and headless:
        decision = policy.authorize_headless(tool, tool_input)
    return decision


@dataclass(slots=True)
class _Turns:
    """One requester's place at the long-check slot: one check at a time, and who waits."""

    limiter: trio.CapacityLimiter = field(default_factory=lambda: trio.CapacityLimiter(1))
    users: int = 0


class ApprovalDesk:
    """The rules first, then the session's approval and question handlers."""

    def __init__(
        self,
        store: SessionStore,
        *,
        approval_handler: ApprovalHandler | None = None,
        question_handler: QuestionHandler | None = None,
    ) -> None:
        self._store = store
        #: Answers every ``ask`` (S-APR-1); None: nobody can approve, so an
        #: ask is refused with the rule that would allow it.
        self.approval_handler = approval_handler
        #: Answers AskUserQuestion from any agent; None: nobody can answer.
        self.question_handler = question_handler
        #: Long checks run one at a time: a worker sending many cannot take every thread.
        self._long_checks = trio.CapacityLimiter(1)
        #: Each requester's turn at ``_long_checks``, while it has a long check.
        self._turns: dict[tuple[str, str | None], _Turns] = {}

    async def authorize(
        self,
        agent: PolicyHolder,
        tool: str,
        tool_input: Mapping[str, Any],
        requester: Requester,
    ) -> PolicyDecision:
        """Decide one tool call by ``agent``'s rules, asking the approval handler on ``ask``.

        A long Bash command is checked on a thread (:data:`INLINE_COMMAND`), one at a time,
        and one per requester at a time.
        """
        headless = self.approval_handler is None
        command = tool_input.get("command")
        if isinstance(command, str) and len(command) > INLINE_COMMAND:
            decision = await self._long_check(requester, agent.policy, tool, tool_input, headless)
        else:
            decision = _decide(agent.policy, tool, tool_input, headless)
        event: dict[str, Any] = {
            "tool": tool,
            "agentId": requester.origin.agent_id,
            "origin": requester.origin.kind,
        }
        if decision.action == "ask":
            assert self.approval_handler is not None
            self._record(requester, "PermissionRequested", {**event, "reason": decision.reason})
            answer = await self.approval_handler(
                ApprovalRequest(
                    session_id=requester.root_session_id,
                    origin=requester.origin,
                    tool=tool,
                    tool_input=tool_input,
                    reason=decision.reason,
                    description=requester.description,
                )
            )
            if answer == "deny":
                decision = PolicyDecision("deny", f"{tool} was not approved ({decision.reason})")
            else:
                if answer == "allow_always":
                    agent.policy = agent.policy.remembering(tool, tool_input)
                self._record(requester, "PermissionResolved", {**event, "decision": answer})
                return PolicyDecision("allow")
        if decision.action == "deny":
            self._record(requester, "PermissionDenied", {**event, "reason": decision.reason})
        return decision

    async def _long_check(
        self,
        requester: Requester,
        policy: ToolPolicy,
        tool: str,
        tool_input: Mapping[str, Any],
        headless: bool,
    ) -> PolicyDecision:
        """``_decide`` on the thread slot, after the requester's earlier long checks."""
        key = (requester.origin.kind, requester.origin.agent_id)
        turns = self._turns.get(key)
        if turns is None:
            turns = self._turns[key] = _Turns()
        turns.users += 1
        try:
            async with turns.limiter:
                return await trio.to_thread.run_sync(
                    _decide, policy, tool, tool_input, headless, limiter=self._long_checks
                )
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[key]

    async def ask(self, question: UserQuestion, requester: Requester) -> QuestionAnswer:
        """Put an agent's AskUserQuestion to the question handler (S-APR-1)."""
        if self.question_handler is None:
            return QuestionAnswer(reason=NOBODY_ANSWERS)
        event = {
            "agentId": requester.origin.agent_id,
            "origin": requester.origin.kind,
            "question": question.question,
        }
        self._record(requester, "QuestionAsked", event)
        answer = await self.question_handler(
            QuestionRequest(
                session_id=requester.root_session_id,
                origin=requester.origin,
                question=question.question,
                options=question.options,
                description=requester.description,
            )
        )
        self._record(requester, "QuestionAnswered", {**event, "answer": answer})
        return QuestionAnswer(answer=answer)

    def _record(self, requester: Requester, name: str, data: dict[str, Any]) -> None:
        for session in requester.event_sessions:
            self._store.append_event(session, name, data, budget=requester.budget)
