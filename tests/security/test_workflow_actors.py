"""A hostile workflow script against the actor API (S-ACT-1..5, S-SEC-8): what it may ask for.

The root model writes the script, so every argument of ``agent()`` and
``ask()`` is the attacker's: a JSON schema, a model, a turn limit, a prompt's
size, a name. Each test runs the script as the root's CreateWorkflow runs it
and asserts what the attack achieved, never how it was stopped.
"""

from __future__ import annotations

import json
import re
import textwrap
import time
from pathlib import Path
from typing import Any

import trio

from supervisor import RootSession
from supervisor.workflow import workflow_tools
from tests.support.delegation import home_for, subvisor, write_scenario

# Exponential backtracking in Python's `re` (and in jsonschema, which uses it).
CATASTROPHIC = r"^(a+)+$"


def create(script: str, description: str, **inputs: Any) -> dict[str, Any]:
    """The root's CreateWorkflow call."""
    return {
        "name": "CreateWorkflow",
        "input": {"script": script, "description": description, "inputs": inputs},
    }


async def run_script(
    tmp_path: Path, script: str, actors: dict[str, Any], **inputs: Any
) -> tuple[Any, Any]:
    """Run ``script`` from a root's CreateWorkflow; its workflow task record, and the host."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(script, "attack", **inputs)]},
                {"text": "started"},
                {"text": "done"},
            ],
            **actors,
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        await root.run("go")
        [record] = [r for r in host.registry.list(root.session_id) if r.kind == "workflow"]
    return record, host


def result_value(record: Any) -> Any:
    """The JSON value a completed run returned (its result text starts with it)."""
    assert record.status == "completed", record.error
    return json.JSONDecoder().raw_decode(record.result)[0]


# -- F1: a script's JSON schema is never evaluated in the supervisor ---------------------

TYPED = textwrap.dedent(
    """
    from typing import Annotated
    from pydantic import StringConstraints
    from supervisor.workflow import agent, workflow

    Word = Annotated[str, StringConstraints(pattern=PATTERN)]

    @workflow
    async def typed(ctx):
        try:
            return await agent("r").ask("say a word", schema=Word)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    """
)


async def test_s_sec_8_a_scripts_answer_schema_cannot_stall_the_supervisors_event_loop(
    tmp_path: Path,
) -> None:
    """S-SEC-8, S-ACT-1: a typed ask whose schema backtracks exponentially on the
    actor's answer leaves the supervisor's event loop running: a heartbeat task in the
    same trio loop never pauses for as long as that pattern costs. (Before: the
    supervisor ran the script's schema with jsonschema, 24.6 s for 28 a's.)"""
    answer = "a" * 25 + "!"
    started = time.perf_counter()
    assert re.match(CATASTROPHIC, answer) is None
    cost = time.perf_counter() - started  # what one check of this answer costs here
    gaps: list[float] = []

    async def heartbeat() -> None:
        last = time.perf_counter()
        while True:
            await trio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    script = TYPED.replace("PATTERN", repr(CATASTROPHIC))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        record, _ = await run_script(
            tmp_path, script, {"r": [{"text": json.dumps(answer)}, {"text": json.dumps(answer)}]}
        )
        nursery.cancel_scope.cancel()
    value = result_value(record)
    # The answer does not fit the type: the script hears so, after one correction.
    assert value.startswith("ActorAnswerInvalidError"), value
    assert max(gaps) < cost / 2, (max(gaps), cost)


RAW_SCHEMA = textwrap.dedent(
    """
    from pydantic import TypeAdapter
    from protocol import WORKFLOW_ASK, WorkflowAsk
    from supervisor.workflow import agent, workflow

    @workflow
    async def raw(ctx, schema: dict):
        a = agent("r")
        await a._declared.wait()
        params = {"actor_id": a._ref.actor_id, "prompt": "hi", "schema_name": "S",
                  "json_schema": schema}
        if "check_id" in WorkflowAsk.model_fields:
            params["check_id"] = a._run.open_check(TypeAdapter(str))
        try:
            return (await a._run.call(WORKFLOW_ASK, WorkflowAsk(**params))).text
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    """
)


async def test_s_sec_8_a_self_recursive_schema_is_only_text_to_the_supervisor(
    tmp_path: Path,
) -> None:
    """S-SEC-8: a schema sent past the script API, whose ``$ref`` names itself forever,
    is what the actor is told and nothing more: the ask is answered (the script's own
    type checks the answer). (Before: RecursionError in the supervisor's handler.)"""
    schema = {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
    record, _ = await run_script(tmp_path, RAW_SCHEMA, {"r": [{"text": '"x"'}]}, schema=schema)
    assert result_value(record) == '"x"'


# -- F2: a script names no model the user did not give ----------------------------------

ORACLE = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def probe(ctx, paths: list):
        out = {}
        for i, path in enumerate(paths):
            try:
                out[path] = await agent(f"p{i}", model="scripted:" + path, tools=[]).ask("hi")
            except Exception as exc:
                out[path] = f"{type(exc).__name__}: {exc}"
        return out
    """
)


async def test_s_sec_1_s_act_5_a_script_cannot_read_files_through_an_actors_model(
    tmp_path: Path,
) -> None:
    """S-SEC-1, S-ACT-5: ``agent(model="scripted:PATH")`` in a root-written script reads
    nothing through the supervisor: not a scenario in subvisor's hidden home, not one
    outside it, and no scenario error says whether a file exists or parses. (Before:
    the hidden file's text came back as the actor's answer.)"""
    home = home_for(tmp_path)
    home.mkdir(parents=True, exist_ok=True)
    hidden = home / "note.yaml"
    hidden.write_text("agents:\n  actor:\n    - text: 'HOME-SECRET'\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.yaml"
    outside.write_text("agents:\n  default:\n    - text: 'OUTSIDE-SECRET'\n")
    paths = [str(hidden), str(outside), "/etc/passwd", "/nonexistent/x"]
    record, _ = await run_script(tmp_path, ORACLE, {}, paths=paths)
    answers = result_value(record)
    assert set(answers) == set(paths)
    for path, answer in answers.items():
        assert "SECRET" not in answer
        # What the script hears names the model it wrote, nothing the file held or lacked.
        assert "scenario file" not in answer and "No such file" not in answer, (path, answer)
        assert answer.startswith("WorkflowError: "), answer


OWN_MODEL = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow(model=MODEL)
    async def own(ctx):
        return await agent("w").ask("hi")
    """
)


async def test_s_sec_1_s_act_5_a_scripts_workflow_model_names_no_file_the_user_did_not_give(
    tmp_path: Path,
) -> None:
    """S-SEC-1, S-ACT-5: ``@workflow(model="scripted:PATH")`` in a root-written script
    does not make the supervisor read PATH for its actors; the run says why."""
    hidden = tmp_path.parent / f"{tmp_path.name}-hidden.yaml"
    hidden.write_text("agents:\n  w:\n    - text: 'HIDDEN-SECRET'\n")
    script = OWN_MODEL.replace("MODEL", repr(f"scripted:{hidden}"))
    record, _ = await run_script(tmp_path, script, {"w": [{"text": "root's answer"}]})
    assert "HIDDEN-SECRET" not in (record.result or "") + (record.error or "")
    assert record.status == "failed"
    assert "@workflow(model=...)" in (record.error or "")


# -- F3: a script lowers the turn limit, never raises it ---------------------------------

LOOPER = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def loop(ctx, turns: int):
        try:
            return await agent("looper", tools=["Glob"], max_turns=turns).ask("go")
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    """
)


async def test_s_sec_3_a_script_cannot_raise_an_actors_turn_limit(tmp_path: Path) -> None:
    """S-SEC-3, S-PROF-7: ``agent(max_turns=1000)`` in a root-written script makes no
    more model calls than the max_turns in force (4): the script is told why. (Before:
    one ask made 10 model calls.)"""
    glob = {"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}
    turns = [glob] * 9 + [{"text": "ten turns done"}]
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(LOOPER, "loop", turns=1000)]},
                {"text": "started"},
                {"text": "done"},
            ],
            "looper": turns,
        },
    )
    async with subvisor(home_for(tmp_path), max_turns=4) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        await root.run("go")
        [record] = [r for r in host.registry.list(root.session_id) if r.kind == "workflow"]
        asks = [r for r in host.registry.list(root.session_id) if r.kind == "workflow_actor"]
    value = result_value(record)
    assert value != "ten turns done"
    assert "max_turns = 4" in value, value
    assert all(r.usage.tool_calls <= 4 for r in asks)


async def test_s_sec_3_control_a_script_may_lower_an_actors_turn_limit(tmp_path: Path) -> None:
    """Control: ``max_turns=2`` under 4 in force holds the actor to 2 model calls."""
    glob = {"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}
    record, _ = await run_script(
        tmp_path, LOOPER, {"looper": [glob, glob, {"text": "late"}]}, turns=2
    )
    value = result_value(record)
    assert "limit of 2 model turns" in value, value


# -- F4: what a script has the supervisor keep is charged to its budget ------------------

FILL = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def fill(ctx, n: int, kb: int):
        a = agent("f", tools=[])
        big = "x" * (kb << 10)
        failed = 0
        for i in range(n):
            try:
                await a.ask(big + str(i))
            except Exception:
                failed += 1
        return failed
    """
)


async def test_s_sec_8_a_script_filling_the_journal_with_prompts_is_stopped_at_its_budget(
    tmp_path: Path,
) -> None:
    """S-SEC-8, S-ACT-3: 40 failing asks of 512 KB each (20 MB of prompts, each ask
    journaled) under a 4 MB event budget: the script's worker is stopped with the
    budget's message, and subvisor.db stays within a few budgets. (Before: every ask
    cost one event and no bytes; 40 asks of 6 MB grew the db to 252 MB.)"""
    from supervisor.kernel import EventBudgetLimits
    from supervisor.state._paths import database_path

    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(FILL, "fill", n=40, kb=512)]},
                {"text": "started"},
                {"text": "done"},
            ],
            # No turn for "f": every ask fails, and is journaled with its prompt.
        },
    )
    home = home_for(tmp_path)
    budget = EventBudgetLimits(max_event_mb=4)
    async with subvisor(home, event_budget=budget) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        await root.run("go")
        [record] = [r for r in host.registry.list(root.session_id) if r.kind == "workflow"]
    db = database_path(home)
    size = sum(path.stat().st_size for path in db.parent.glob(db.name + "*"))
    assert record.status == "failed"
    assert "event budget exceeded" in (record.error or ""), record.error
    assert size < 3 * (4 << 20), size


LONG = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def long(ctx):
        out = []
        for make in (lambda: agent("s", system="s" * (1 << 20)).ask("hi"),
                     lambda: agent("p").ask("p" * (2 << 20))):
            try:
                out.append(await make())
            except Exception as exc:
                out.append(f"{type(exc).__name__}: {exc}")
        return out
    """
)


async def test_s_sec_8_a_scripts_prompt_and_instructions_are_bounded_in_one_line(
    tmp_path: Path,
) -> None:
    """S-SEC-8: 1 MiB of instructions or a 2 MiB prompt is refused in one line saying
    the limit, before the supervisor keeps or journals any of it."""
    record, _ = await run_script(tmp_path, LONG, {"s": [{"text": "kept"}], "p": [{"text": "kept"}]})
    value = result_value(record)
    assert len(value) == 2
    for refusal in value:
        assert refusal.startswith("WorkflowError: ") and "\n" not in refusal, refusal
        assert "a workflow script may send" in refusal


# -- F5: a name cannot take an anonymous actor's journal key -----------------------------

COLLIDE = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def collide(ctx):
        out = {}
        for key, make in (("named", lambda: agent("~" + "1")), ("anon", lambda: agent())):
            try:
                out[key] = await make().ask("hi")
            except Exception as exc:
                out[key] = f"{type(exc).__name__}: {exc}"
        return out
    """
)


async def test_s_act_2_a_name_cannot_take_an_anonymous_actors_journal_key(
    tmp_path: Path,
) -> None:
    """S-ACT-2, S-ACT-3: an actor named ``~1`` is refused in one line, and the
    anonymous actor whose journal key that is still runs and is journaled. (Before:
    the anonymous actor's declaration failed with an IntegrityError.)"""
    record, _ = await run_script(tmp_path, COLLIDE, {"~1": [{"text": "anonymous answer"}]})
    value = result_value(record)
    assert value["anon"] == "anonymous answer", value
    assert value["named"].startswith("WorkflowError: ") and "'~'" in value["named"], value
