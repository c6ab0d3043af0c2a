"""A three-actor review: a writer drafts a patch, a critic reviews it, an editor names it.

It runs offline on the scripted model of ``review.yaml`` (each actor answers
from the turns under its name), so from a fresh clone::

    subvisor workflow run examples/workflows/review.py
    subvisor workflow show RUN_ID

Then change the editor's prompt below and amend the run: the writer and the
critic are replayed from the journal without a model call, the editor runs::

    subvisor workflow run examples/workflows/review.py --amend RUN_ID

The critic's verdict is typed: its first answer does not validate, so it is
asked once to correct it. With a real model, pass ``--model provider:model``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from supervisor.workflow import WorkflowContext, agent, workflow

SCENARIO = Path(__file__).with_name("review.yaml")

BUG_REPORT = (
    "parse_port('8080 ') raises ValueError: the port from the config file keeps its "
    "trailing whitespace."
)


class Verdict(BaseModel):
    """The critic's review of a patch."""

    approved: bool
    problems: list[str]


@workflow(model=f"scripted:{SCENARIO}")
async def review(ctx: WorkflowContext, bug: str = BUG_REPORT) -> dict[str, object]:
    """Draft, review (and revise once if needed), then write the commit message."""
    writer = agent("writer", system="You write minimal, correct patches as unified diffs.")
    critic = agent(
        "critic",
        system="You review patches for correctness and missing tests. You never edit files.",
        tools=["Read", "Grep", "Glob"],
    )
    editor = agent("editor", system="You write commit messages in the imperative mood.")

    patch = await writer.ask(f"Draft a patch for this bug report:\n{bug}")
    verdict = await critic.ask(f"Review this patch:\n{patch}", schema=Verdict)
    if not verdict.approved:
        problems = "\n".join(f"- {p}" for p in verdict.problems)
        patch = await writer.ask(f"The reviewer found problems:\n{problems}\nRevise the patch.")
        verdict = await critic.ask(f"Review the revised patch:\n{patch}", schema=Verdict)
    message = await editor.ask(f"Write a one-line commit message for this patch:\n{patch}")
    return {"patch": patch, "verdict": verdict, "commit_message": message}
