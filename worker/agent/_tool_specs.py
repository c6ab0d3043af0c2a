"""The tools an agent is given by its host rather than by ``worker.tools``.

Their implementations cross to whoever hosts the agent (the supervisor, for
a subagent); the specs are what the model is offered, the same everywhere.
"""

from __future__ import annotations

from protocol import ToolSpec

__all__ = ["ASK_USER_QUESTION_SPEC", "ESCALATE_QUESTION_SPEC", "RESPOND_TO_COORDINATOR_SPEC"]

RESPOND_TO_COORDINATOR_SPEC = ToolSpec(
    name="RespondToCoordinator",
    description=(
        "Send a message to the agent that launched you (your coordinator) while you keep "
        "working: progress, a question, or an early finding. Your final answer still goes "
        "in your last message."
    ),
    input_schema={
        "type": "object",
        "properties": {"message": {"type": "string", "description": "What to tell it."}},
        "required": ["message"],
        "additionalProperties": False,
    },
)

ASK_USER_QUESTION_SPEC = ToolSpec(
    name="AskUserQuestion",
    description=(
        "Ask the user a question and wait for the answer: for a choice only they can make. "
        "Offer options when the answer is one of a few."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)

#: A workflow actor's one line to a person: the workflow's creator answers (S-ACT-4).
ESCALATE_QUESTION_SPEC = ToolSpec(
    name="EscalateQuestion",
    description=(
        "Put a question to whoever created this workflow, and wait for the answer: only for "
        "a decision you cannot make yourself (a choice of policy, a missing fact). Your ask "
        "fails if nobody answers in time."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "question": {"type": "string"},
            "options": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
)
