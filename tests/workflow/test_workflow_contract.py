"""The rules of a workflow, without processes: actor sites, the model table, tools, typed answers.

S-ACT-2 (sites and duplicate names), S-ACT-4 (actor tools, identity),
S-ACT-5 (actor model resolution, ``WorkflowActorPinnedModelError``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from supervisor.workflow import (
    ACTOR_DISALLOWED_TOOLS,
    ACTOR_IDENTITY,
    DuplicateActorNameError,
    WorkflowActorPinnedModelError,
    WorkflowError,
    WorkflowScriptError,
    actor_system_prompt,
    actor_tool_names,
    analyse_script,
    resolve_actor_model,
)
from supervisor.workflow._typed import AnswerSchema
from worker.tools import LOCAL_TOOL_NAMES

# -- S-ACT-2: actor sites -------------------------------------------------------------


def test_sites_are_found_through_every_import_form() -> None:
    """``agent`` by name, by alias, and through the module under any name; others ignored."""
    source = """\
from supervisor.workflow import agent, agent as actor
import supervisor.workflow as wf
from supervisor import workflow as flows
import supervisor.workflow

def agent_like(name): ...

async def run(ctx, names):
    a = agent("writer", system="...")
    b = actor(name="critic")
    c = wf.agent("editor")
    d = flows.agent(system="anonymous")
    e = supervisor.workflow.agent(names[0])
    f = agent(None)
    g = agent_like("writer")
    h = ctx.agent("writer")
"""
    sites = analyse_script(source)
    assert [(s.line, s.kind, s.name) for s in sites] == [
        (9, "named", "writer"),
        (10, "named", "critic"),
        (11, "named", "editor"),
        (12, "anonymous", None),
        (13, "dynamic", None),
        (14, "anonymous", None),
    ]
    assert [s.describe() for s in sites[2:5]] == [
        "editor (line 11)",
        "<anonymous> (line 12)",
        "<dynamic> (line 13)",
    ]


def test_duplicate_literal_names_name_both_lines() -> None:
    """S-ACT-2: the first repeated name is refused with its two lines."""
    source = 'from supervisor.workflow import agent\nagent("a")\nagent()\nagent()\nagent("a")\n'
    with pytest.raises(DuplicateActorNameError) as caught:
        analyse_script(source, "flow.py")
    assert caught.value.lines == (2, 5)
    assert str(caught.value).startswith(
        "flow.py: actor name 'a' is declared twice, on line 2 and on line 5"
    )


def test_a_script_that_is_not_python_is_refused_with_its_line() -> None:
    with pytest.raises(WorkflowScriptError, match=r"flow.py:2: the workflow script is not valid"):
        analyse_script("x = 1\ndef (:\n", "flow.py")


@given(st.lists(st.sampled_from(["a", "b", "c", None]), max_size=8))
def test_duplicates_are_refused_exactly_when_a_name_repeats(names: list[str | None]) -> None:
    """S-ACT-2 as a property: anonymous sites never clash; any repeated name does."""
    calls = "".join(f"agent({name!r})\n" if name else "agent()\n" for name in names)
    source = "from supervisor.workflow import agent\n" + calls
    named = [n for n in names if n is not None]
    if len(named) == len(set(named)):
        assert len(analyse_script(source)) == len(names)
    else:
        with pytest.raises(DuplicateActorNameError):
            analyse_script(source)


# -- S-ACT-5: which model an actor runs on ---------------------------------------------

PARENT = "openai:gpt-parent"


@pytest.mark.parametrize(
    ("run_model", "declared", "pin", "expected"),
    [
        (
            "anthropic:claude-x$high",
            "openai:declared",
            "openai:pinned",
            ("anthropic:claude-x$high", "run"),
        ),
        (None, "openai:declared", "openai:pinned", ("openai:declared", "declared")),
        (None, None, None, (PARENT, "parent")),
        (None, None, PARENT, (PARENT, "parent")),
        (None, None, "OpenAI/gpt-parent", (PARENT, "parent")),
        (None, None, "openai:pinned", ("openai:pinned", "pin")),
        ("inherit", "sonnet", "openai:pinned", ("openai:pinned", "pin")),
    ],
)
def test_the_model_table(
    run_model: str | None, declared: str | None, pin: str | None, expected: tuple[str, str]
) -> None:
    """S-ACT-5: run model, else declared, else the pin unless it is the parent's, else parent."""
    chosen = resolve_actor_model(
        "writer", run_model=run_model, declared=declared, pin=pin, parent_model=PARENT
    )
    assert (chosen.model, chosen.source) == expected


@pytest.mark.parametrize("pin", ["gpt-4o", "sonnet", ":gpt", "openai:", "openai:x$a$b"])
def test_a_malformed_pin_raises_the_pinned_model_error(pin: str) -> None:
    with pytest.raises(WorkflowActorPinnedModelError) as caught:
        resolve_actor_model("critic", run_model=None, declared=None, pin=pin, parent_model=PARENT)
    assert caught.value.actor == "critic" and caught.value.pin == pin
    assert "pass --model provider:model" in str(caught.value)


providers = st.sampled_from(["openai", "anthropic", "ollama", "scripted"])
model_names = st.text(alphabet="abcdefgh0123456789.-", min_size=1, max_size=12)
model_strings = st.builds(lambda p, m: f"{p}:{m}", providers, model_names)
malformed = st.text(alphabet="abcdefgh0123456789.-", min_size=1, max_size=12)


@given(
    run_model=st.none() | model_strings,
    declared=st.none() | model_strings,
    pin=st.none() | model_strings | malformed,
    parent=model_strings,
)
def test_model_resolution_properties(
    run_model: str | None, declared: str | None, pin: str | None, parent: str
) -> None:
    """S-ACT-5 as properties: explicit replaces, omitted inherits, a bad pin matters when read."""
    consulted_pin = run_model is None and declared is None and pin is not None
    pin_is_bad = pin is not None and ":" not in pin
    if consulted_pin and pin_is_bad:
        with pytest.raises(WorkflowActorPinnedModelError):
            resolve_actor_model(
                "a", run_model=run_model, declared=declared, pin=pin, parent_model=parent
            )
        return
    chosen = resolve_actor_model(
        "a", run_model=run_model, declared=declared, pin=pin, parent_model=parent
    )
    if run_model is not None:
        assert (chosen.model, chosen.source) == (run_model, "run")
    elif declared is not None:
        assert (chosen.model, chosen.source) == (declared, "declared")
    elif pin is None or pin == parent:
        assert (chosen.model, chosen.source) == (parent, "parent")
    else:
        assert (chosen.model, chosen.source) == (pin, "pin")


# -- S-ACT-4: the actor's contract -----------------------------------------------------


def test_actors_get_every_tool_but_the_seven() -> None:
    assert ACTOR_DISALLOWED_TOOLS == (
        "AskUserQuestion",
        "EnterPlanMode",
        "ExitPlanMode",
        "CreateWorkflow",
        "AmendWorkflow",
        "ReadSessionContext",
        "ResolveWorkflowQuestion",
    )
    lent = ["mcp__docs__search", *ACTOR_DISALLOWED_TOOLS]
    assert actor_tool_names(None, lent) == (*LOCAL_TOOL_NAMES, "mcp__docs__search")


@pytest.mark.parametrize("tool", ACTOR_DISALLOWED_TOOLS)
def test_asking_for_a_disallowed_tool_is_refused(tool: str) -> None:
    with pytest.raises(WorkflowError, match=f"an actor cannot have the {tool} tool"):
        actor_tool_names(["Read", tool])


def test_chosen_tools_resolve_aliases_and_refuse_unknown_ones() -> None:
    assert actor_tool_names(["grep", "Read", "Grep"]) == ("Grep", "Read")
    with pytest.raises(WorkflowError, match=r"unknown tool 'Agent' in tools=; actors can have"):
        actor_tool_names(["Agent"])


def test_the_identity_prompt_comes_first() -> None:
    prompt = actor_system_prompt("You review patches.", "/repo")
    assert prompt.startswith(ACTOR_IDENTITY)
    assert ACTOR_IDENTITY.startswith("You are a subagent working inside a dynamic workflow run.")
    assert "not to a person" in ACTOR_IDENTITY
    assert prompt.endswith("You review patches.\n\nWorking directory: /repo")


# -- typed answers ---------------------------------------------------------------------


class Verdict(BaseModel):
    approved: bool
    problems: list[str]


def test_typed_answers_accept_json_with_or_without_a_fence() -> None:
    schema = AnswerSchema(Verdict)
    plain = schema.parse(' {"approved": true, "problems": []} ')
    fenced = schema.parse('```json\n{"approved": false, "problems": ["x"]}\n```')
    assert plain == Verdict(approved=True, problems=[])
    assert fenced == Verdict(approved=False, problems=["x"])
    assert AnswerSchema(list[int]).parse("[1, 2]") == [1, 2]


def test_a_typed_answer_that_does_not_validate_says_where() -> None:
    schema = AnswerSchema(Verdict)
    with pytest.raises(ValueError, match=r"^problems: Field required$"):
        schema.parse('{"approved": true}')
    with pytest.raises(ValueError, match=r"^answer: Invalid JSON"):
        schema.parse("Looks good to me")
    assert '"required": ["approved", "problems"]' in schema.instructions()
