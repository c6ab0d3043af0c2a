"""``ElicitedAsks``: approvals and questions of MCP-served agents, put to their client (S-SRV-3).

The ``Subvisor`` has one approval handler and one question handler; this is
both. An ask carries the root session it is made in (S-APR-1), and each root
session here is one client's seat, so the ask goes to that client, and only
to it, as a form elicitation naming who asks, which tool and which input.

Invariants:

- Nothing waits forever: an ask nobody answers within ``timeout_s`` is denied,
  and the client is told why in a warning notification.
- A client that cannot elicit (it did not declare the capability, or the
  request fails) gets the configured answer, ``--approve`` (default deny),
  never a hang; a question then gets "nobody can answer".
- ``decline`` and ``cancel`` are a deny.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, cast

import trio

from ..files._printable import printable
from ..policy._approvals import (
    ApprovalDecision,
    ApprovalOrigin,
    ApprovalRequest,
    QuestionRequest,
    describe_origin,
    view_request,
)

__all__ = [
    "APPROVAL_SCHEMA",
    "ClientAsker",
    "ElicitedAsks",
    "approval_message",
    "approval_schema",
]

#: The form of an approval: one choice of three (S-SRV-3: allow once / always / deny).
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": ["allow_once", "allow_always", "deny"],
            "enumNames": ["Allow once", "Allow always (this session)", "Deny"],
        }
    },
    "required": ["decision"],
}

#: The form of an approval whose subject was cut: "always" is not offered.
_ONCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": ["allow_once", "deny"],
            "enumNames": ["Allow once", "Deny"],
        }
    },
    "required": ["decision"],
}

_DECIDE = "decide for yourself and say in your answer what you assumed"


class ClientAsker(Protocol):
    """One client as seen by its asks: can it elicit, and how to ask or warn it."""

    @property
    def can_elicit(self) -> bool:
        """Whether the client declared form elicitation."""
        ...

    async def elicit(
        self, origin: ApprovalOrigin, message: str, schema: dict[str, Any]
    ) -> tuple[str, dict[str, Any] | None]:
        """Ask; return the action (accept, decline, cancel) and the form's content.

        Raises anything the transport raises when the request cannot be made.
        """
        ...

    async def warn(self, text: str) -> None:
        """Tell the client something went wrong (a warning notification)."""
        ...


def approval_message(request: ApprovalRequest) -> str:
    """What the client shows: the one approval rendering (``view_request``), then "Allow it?".

    The client shows it on a terminal or in a window: every control and format
    character an agent put in it (an ESC, a bidi override) is written escaped.
    """
    return f"{view_request(request).text}\nAllow it?"


def approval_schema(request: ApprovalRequest) -> dict[str, Any]:
    """The form for ``request``: without "always" when its subject was not shown whole."""
    if view_request(request).offers_always:
        return APPROVAL_SCHEMA
    return _ONCE_SCHEMA


class ElicitedAsks:
    """Routes each ask to its seat's client; the configured answer where none can reply."""

    def __init__(self, *, fallback: Literal["allow", "deny"], timeout_s: float) -> None:
        self._fallback: ApprovalDecision = "allow_once" if fallback == "allow" else "deny"
        self._timeout_s = timeout_s
        self._askers: dict[str, ClientAsker] = {}

    def attach(self, session_id: str, asker: ClientAsker) -> None:
        """Route the asks made in ``session_id`` to ``asker``."""
        self._askers[session_id] = asker

    def detach(self, session_id: str) -> None:
        """Forget a closed seat; its late asks get the configured answer."""
        self._askers.pop(session_id, None)

    async def _elicit(
        self, asker: ClientAsker, origin: ApprovalOrigin, message: str, schema: dict[str, Any]
    ) -> tuple[str, Mapping[str, Any] | None] | None:
        """The client's answer; None when it cannot be asked or did not answer in time."""
        with trio.move_on_after(self._timeout_s) as waited:
            try:
                return await asker.elicit(origin, message, schema)
            except Exception as exc:  # the transport's: a closed stream, an error reply
                await asker.warn(f"subvisor could not ask the client ({exc}); using the rules")
                return None
        if waited.cancelled_caught:
            await asker.warn(
                f"subvisor: nobody answered within {self._timeout_s:g} s: {message.splitlines()[0]}"
                " -- denied"
            )
            return ("timeout", None)
        return None  # pragma: no cover - the block returns or times out

    async def approve(self, request: ApprovalRequest) -> ApprovalDecision:
        """The approval handler: the client's choice, the fallback, or deny on timeout."""
        asker = self._askers.get(request.session_id)
        if asker is None or not asker.can_elicit:
            return self._fallback
        schema = approval_schema(request)
        answer = await self._elicit(asker, request.origin, approval_message(request), schema)
        if answer is None:
            return self._fallback
        action, content = answer
        if action != "accept" or content is None:
            return "deny"
        # A choice the form did not offer ("always" on a cut subject) is a deny.
        for decision in schema["properties"]["decision"]["enum"]:
            if content.get("decision") == decision:
                return cast(ApprovalDecision, decision)
        return "deny"

    async def answer(self, request: QuestionRequest) -> str:
        """The question handler: the client's answer, or why there is none."""
        asker = self._askers.get(request.session_id)
        nobody = f"nobody can answer questions in this session; {_DECIDE}"
        if asker is None or not asker.can_elicit:
            return nobody
        field: dict[str, Any] = {"type": "string", "title": "Answer"}
        if request.options:
            field["enum"] = [printable(option) for option in request.options]
        schema = {"type": "object", "properties": {"answer": field}, "required": ["answer"]}
        message = printable(
            f"{describe_origin(request.origin, request.description)} asks: {request.question}",
            multiline=True,
        )
        answer = await self._elicit(asker, request.origin, message, schema)
        if answer is None:
            return nobody
        action, content = answer
        if action == "timeout":
            return f"the user did not answer within {self._timeout_s:g} s; {_DECIDE}"
        if action != "accept" or content is None or not isinstance(content.get("answer"), str):
            return f"the user declined to answer; {_DECIDE}"
        return str(content["answer"])
