"""Dynamic workflows end to end: real worker processes, the real journal in SQLite.

S-ACT-1 (actors, ordered asks, typed asks), S-ACT-2 (unique names),
S-ACT-3 (journal and amended re-runs), S-ACT-4 (tools the model is offered),
S-ACT-5 (the journal's model pin). Models are the scripted provider through
the real gateway, or a local HTTP server playing an OpenAI-compatible one
where the calls must be counted at the provider.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from supervisor import Subvisor, SubvisorSettings
from supervisor.state._paths import database_path
from supervisor.workflow import (
    ACTOR_DISALLOWED_TOOLS,
    ActorAnswerInvalidError,
    AskRecord,
    DuplicateActorNameError,
    WorkflowActorPinnedModelError,
    WorkflowFailedError,
    WorkflowJournal,
    WorkflowOutcome,
    run_workflow,
)
from tests.support.delegation import home_for, subvisor, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer
from worker.tools import LOCAL_TOOL_NAMES

HTTP_MODEL = "openai:gpt-test"


def write_script(path: Path, body: str) -> Path:
    """A workflow script: the imports, then ``body``."""
    header = (
        "import trio\n"
        "from pydantic import BaseModel\n"
        "from supervisor.workflow import "
        "ActorAnswerInvalidError, ActorCrashedError, agent, workflow\n\n"
    )
    path.write_text(header + textwrap.dedent(body).lstrip())
    return path


def asks_by_actor(journal: WorkflowJournal, run_id: str) -> dict[str, list[AskRecord]]:
    grouped: dict[str, list[AskRecord]] = {}
    for ask in journal.asks(run_id):
        grouped.setdefault(ask.actor_key, []).append(ask)
    return grouped


@asynccontextmanager
async def workflow_host(
    home: Path, **settings: Any
) -> AsyncIterator[tuple[Subvisor, WorkflowJournal]]:
    async with subvisor(home, **settings) as host:
        with WorkflowJournal(database_path(home)) as journal:
            yield host, journal


def completion(text: str) -> CannedResponse:
    """One OpenAI-style chat completion answer."""
    return CannedResponse.json(
        {
            "choices": [
                {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        }
    )


@asynccontextmanager
async def http_workflow_host(
    home: Path, server: ProviderServer
) -> AsyncIterator[tuple[Subvisor, WorkflowJournal]]:
    settings = SubvisorSettings.model_validate(
        {
            "home": home,
            "gateway": {
                "providers": {
                    "openai": {"api": "openai", "base_url": server.base_url, "streaming": False}
                }
            },
        }
    )
    async with Subvisor(settings) as host:
        with WorkflowJournal(database_path(home)) as journal:
            yield host, journal


THREE_ACTORS = """
    @workflow
    async def review(ctx):
        writer = agent("writer", system="You write patches.")
        critic = agent("critic", system="You review patches.")
        editor = agent("editor", system="You write commit messages.")
        draft = await writer.ask("Draft a fix for the port parser.")
        again = await writer.ask("Make it shorter.")
        verdict = await critic.ask(f"Review this patch: {again}")
        message = await editor.ask(f"Commit message for: {again}")
        return {"draft": draft, "again": again, "verdict": verdict, "message": message}
"""


async def test_three_actors_each_keep_one_worker_and_one_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-ACT-1: an actor's asks share one worker and one conversation; every ask is journaled."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = write_script(tmp_path / "review.py", THREE_ACTORS)
    with ProviderServer() as server:
        server.enqueue(*(completion(t) for t in ("patch v1", "patch v2", "LGTM", "Fix the port")))
        async with http_workflow_host(home_for(tmp_path), server) as (host, journal):
            outcome = await run_workflow(host, script, journal=journal, parent_model=HTTP_MODEL)
            spawned = host.fleet.spawned_total
            asks = asks_by_actor(journal, outcome.run_id)
        sent = [request.json() for request in server.requests]
    assert outcome.value == {
        "draft": "patch v1",
        "again": "patch v2",
        "verdict": "LGTM",
        "message": "Fix the port",
    }
    # One worker per actor, not per ask.
    assert spawned == 3
    # The writer's second ask reached the model after its first exchange.
    second = [m["content"] for m in sent[1]["messages"] if m["role"] != "system"]
    assert second == ["Draft a fix for the port parser.", "patch v1", "Make it shorter."]
    assert {key: [a.ask_index for a in rows] for key, rows in asks.items()} == {
        "writer": [0, 1],
        "critic": [0],
        "editor": [0],
    }
    for rows in asks.values():
        for ask in rows:
            assert ask.source == "fresh" and ask.status == "answered"
            assert ask.model == HTTP_MODEL and ask.model_calls == 1
            assert ask.usage.input_tokens == 7 and ask.usage.output_tokens == 3
    # S-ACT-4: the model is offered the local tools, none of the seven, no coordinator line.
    offered = {tool["function"]["name"] for tool in sent[0]["tools"]}
    assert offered == set(LOCAL_TOOL_NAMES)
    assert not offered & {*ACTOR_DISALLOWED_TOOLS, "RespondToCoordinator"}
    system = sent[0]["messages"][0]["content"]
    assert system.startswith("You are a subagent working inside a dynamic workflow run.")
    assert "You write patches." in system


async def test_amend_replays_unchanged_actors_with_no_model_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance (S-ACT-3): change one actor's prompt, amend: the two others are replayed.

    Calls are counted at the provider: the amended run makes exactly the
    changed actor's call, and starts exactly one worker.
    """
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = write_script(tmp_path / "review.py", THREE_ACTORS)
    with ProviderServer() as server:
        server.enqueue(*(completion(t) for t in ("patch v1", "patch v2", "LGTM", "Fix the port")))
        async with http_workflow_host(home_for(tmp_path), server) as (host, journal):
            first = await run_workflow(host, script, journal=journal, parent_model=HTTP_MODEL)
        calls_before = len(server.requests)
        script.write_text(script.read_text().replace("Review this patch", "Review strictly"))
        server.enqueue(completion("Needs a test"))
        async with http_workflow_host(home_for(tmp_path), server) as (host, journal):
            amended = await run_workflow(
                host, script, journal=journal, parent_model=HTTP_MODEL, amend=first.run_id
            )
            spawned = host.fleet.spawned_total
            asks = asks_by_actor(journal, amended.run_id)
            run = journal.find_run(amended.run_id)
        new_calls = server.requests[calls_before:]
    assert calls_before == 4
    assert len(new_calls) == 1 and "Review strictly" in new_calls[0].body.decode()
    assert spawned == 1
    assert run is not None and run.amends == first.run_id
    assert amended.value["verdict"] == "Needs a test"
    assert amended.value["again"] == "patch v2"
    for replayed in ("writer", "editor"):
        assert [a.source for a in asks[replayed]] == ["cached"] * len(asks[replayed])
        assert sum(a.model_calls for a in asks[replayed]) == 0
        assert all(a.replayed_from == first.run_id for a in asks[replayed])
    [critic] = asks["critic"]
    assert (critic.source, critic.model_calls, critic.answer) == ("fresh", 1, "Needs a test")


async def test_a_changed_ask_runs_on_the_replayed_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-ACT-3: asks before the first change replay; from it on the actor runs in that context."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    script = write_script(
        tmp_path / "chain.py",
        """
        @workflow
        async def chain(ctx):
            writer = agent("writer")
            one = await writer.ask("Step one.")
            two = await writer.ask("Step two.")
            three = await writer.ask("Step three.")
            return [one, two, three]
        """,
    )
    with ProviderServer() as server:
        server.enqueue(*(completion(t) for t in ("did one", "did two", "did three")))
        async with http_workflow_host(home_for(tmp_path), server) as (host, journal):
            first = await run_workflow(host, script, journal=journal, parent_model=HTTP_MODEL)
        script.write_text(script.read_text().replace("Step two.", "Step two, carefully."))
        server.enqueue(completion("did two carefully"), completion("did three again"))
        async with http_workflow_host(home_for(tmp_path), server) as (host, journal):
            amended = await run_workflow(
                host, script, journal=journal, parent_model=HTTP_MODEL, amend=first.run_id
            )
            asks = asks_by_actor(journal, amended.run_id)["writer"]
        fresh = [request.json() for request in server.requests[3:]]
    assert amended.value == ["did one", "did two carefully", "did three again"]
    assert [a.source for a in asks] == ["cached", "fresh", "fresh"]
    # The same prompt after the change runs for real: its context changed.
    assert [a.model_calls for a in asks] == [0, 1, 1]
    contents = [m["content"] for m in fresh[0]["messages"] if m["role"] != "system"]
    assert contents == ["Step one.", "did one", "Step two, carefully."]


async def test_anonymous_actors_always_run(tmp_path: Path) -> None:
    """S-ACT-2: an anonymous actor is allowed and never replayed."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {"named": [{"text": "n"}], "anonymous": [{"text": "a"}, {"text": "a again"}]},
    )
    script = write_script(
        tmp_path / "anon.py",
        """
        @workflow
        async def anon(ctx):
            named = agent("named")
            helper = agent(system="no name")
            return [await named.ask("hi"), await helper.ask("hi")]
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        first = await run_workflow(host, script, journal=journal, parent_model=model)
        amended = await run_workflow(
            host, script, journal=journal, parent_model=model, amend=first.run_id
        )
        asks = asks_by_actor(journal, amended.run_id)
        actors = journal.actors(amended.run_id)
    assert first.value == ["n", "a"] and amended.value == ["n", "a"]
    assert [a.source for a in asks["named"]] == ["cached"]
    assert [a.source for a in asks["~1"]] == ["fresh"]
    assert [(a.name, a.actor_key) for a in actors] == [("named", "named"), (None, "~1")]


async def test_duplicate_actor_names_fail_before_any_model_call(tmp_path: Path) -> None:
    """S-ACT-2: two sites with one name are refused from the source, naming both lines."""
    model = write_scenario(tmp_path / "s.yaml", {"default": [{"text": "x"}]})
    script = write_script(
        tmp_path / "dup.py",
        """
        @workflow
        async def dup(ctx):
            first = agent("critic", system="one")
            await first.ask("hi")
            second = agent("critic", system="two")
            return await second.ask("hi")
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        with pytest.raises(DuplicateActorNameError) as caught:
            await run_workflow(host, script, journal=journal, parent_model=model)
        assert host.fleet.spawned_total == 0
        assert journal.latest_runs() == []
    assert caught.value.lines == (7, 9)
    assert "actor name 'critic' is declared twice, on line 7 and on line 9" in str(caught.value)


async def test_a_name_declared_twice_at_run_time_fails_the_run(tmp_path: Path) -> None:
    """S-ACT-2: names the source cannot show are checked when the actor is declared."""
    model = write_scenario(tmp_path / "s.yaml", {"default": [{"text": "x"}]})
    script = write_script(
        tmp_path / "dyn.py",
        """
        @workflow
        async def dyn(ctx, a: str, b: str):
            first = agent(a)
            second = agent(b)
            return "unreachable"
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        with pytest.raises(WorkflowFailedError) as caught:
            await run_workflow(
                host, script, journal=journal, parent_model=model, inputs={"a": "w", "b": "w"}
            )
        run = journal.find_run(caught.value.run_id)
    assert isinstance(caught.value.error, DuplicateActorNameError)
    assert caught.value.error.lines == (7, 8)
    assert run is not None and run.status == "failed"
    assert run.error is not None and "DuplicateActorNameError" in run.error


TYPED = """
    class Verdict(BaseModel):
        approved: bool
        problems: list[str]

    @workflow
    async def typed(ctx):
        critic = agent("critic")
        try:
            verdict = await critic.ask("Review it.", schema=Verdict)
        except ActorAnswerInvalidError as exc:
            return {"failed": exc.error}
        return {"verdict": verdict.model_dump()}
"""


async def test_typed_ask_is_corrected_once(tmp_path: Path) -> None:
    """S-ACT-1: an answer that does not validate is put back once, with the error."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "critic": [
                {"text": "Looks fine to me."},
                {"text": '```json\n{"approved": true, "problems": []}\n```'},
            ]
        },
    )
    script = write_script(tmp_path / "typed.py", TYPED)
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        outcome = await run_workflow(host, script, journal=journal, parent_model=model)
        [ask] = journal.asks(outcome.run_id)
    assert outcome.value == {"verdict": {"approved": True, "problems": []}}
    assert (ask.status, ask.model_calls, ask.schema_name) == ("answered", 2, "Verdict")
    user_turns = [m.content for m in ask.messages if m.role == "user"]
    assert "matches this JSON schema" in user_turns[0] and '"approved"' in user_turns[0]
    assert user_turns[1].startswith(
        "Your answer does not match the JSON schema: answer: Invalid JSON"
    )


async def test_typed_ask_invalid_twice_fails_with_the_validation_error(tmp_path: Path) -> None:
    """S-ACT-1: after one correction the ask fails, carrying the validation error."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "critic": [
                {"text": '{"approved": "perhaps"}'},
                {"text": '{"approved": "perhaps", "problems": "none"}'},
                {"text": "fine"},
            ]
        },
    )
    script = write_script(tmp_path / "typed.py", TYPED)
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        outcome = await run_workflow(host, script, journal=journal, parent_model=model)
        [ask] = journal.asks(outcome.run_id)
    error = outcome.value["failed"]
    assert "approved: Input should be a valid boolean" in error
    assert "problems: Input should be a valid array" in error
    assert (ask.status, ask.model_calls) == ("failed", 2)
    assert ask.error is not None and "does not match Verdict after one correction" in ask.error
    # A failed ask leaves no trace in the conversation, so it is never replayed.
    assert ask.answer == '{"approved": "perhaps", "problems": "none"}'


async def test_an_unhandled_invalid_answer_fails_the_run(tmp_path: Path) -> None:
    """The script decides: uncaught, ActorAnswerInvalidError fails the run and is journaled."""
    model = write_scenario(tmp_path / "s.yaml", {"critic": [{"text": "no"}, {"text": "still no"}]})
    script = write_script(
        tmp_path / "strict.py",
        """
        class Verdict(BaseModel):
            approved: bool

        @workflow
        async def strict(ctx):
            return await agent("critic").ask("Review it.", schema=Verdict)
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        with pytest.raises(WorkflowFailedError) as caught:
            await run_workflow(host, script, journal=journal, parent_model=model)
        run = journal.find_run(caught.value.run_id)
    assert isinstance(caught.value.error, ActorAnswerInvalidError)
    assert run is not None and run.status == "failed"
    assert run.error is not None and run.error.startswith("ActorAnswerInvalidError: actor 'critic'")


async def test_an_actor_crash_fails_its_ask_and_others_go_on(tmp_path: Path) -> None:
    """A segfault fails the pending ask with the reason; the script catches it; others finish."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "victim": [{"fault": "segfault", "latency_ms": 100}, {"text": "back"}],
            "bystander": [{"text": "steady", "latency_ms": 400}],
        },
    )
    script = write_script(
        tmp_path / "crash.py",
        """
        @workflow
        async def crash(ctx):
            victim = agent("victim")
            bystander = agent("bystander")
            results = {}

            async def risky():
                try:
                    results["victim"] = await victim.ask("Run the native extension.")
                except ActorCrashedError as exc:
                    results["victim"] = f"crashed: {exc}"
                results["retry"] = await victim.ask("Try again.")

            async def steady():
                results["bystander"] = await bystander.ask("Keep going.")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(risky)
                nursery.start_soon(steady)
            return results
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        outcome = await run_workflow(host, script, journal=journal, parent_model=model)
        asks = asks_by_actor(journal, outcome.run_id)
        spawned = host.fleet.spawned_total
    assert outcome.value["victim"].startswith("crashed: actor 'victim' could not answer")
    assert "SIGSEGV" in outcome.value["victim"]
    assert outcome.value["bystander"] == "steady"
    # The next ask of a crashed actor starts a new worker.
    assert outcome.value["retry"] == "back" and spawned == 3
    assert [(a.status, a.ask_index) for a in asks["victim"]] == [("failed", 0), ("answered", 1)]
    assert asks["victim"][0].error is not None and "SIGSEGV" in asks["victim"][0].error


async def test_asks_to_one_actor_are_serialized_and_actors_run_concurrently(
    tmp_path: Path,
) -> None:
    """S-ACT-1: concurrent asks to one actor run one after another; other actors alongside."""
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "slow": [{"text": f"slow {i}", "latency_ms": 150} for i in range(3)],
            "other": [{"text": "other", "latency_ms": 300}],
        },
    )
    script = write_script(
        tmp_path / "concurrent.py",
        """
        @workflow
        async def concurrent(ctx):
            slow = agent("slow")
            other = agent("other")
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(slow.ask, f"part {i}")
                nursery.start_soon(other.ask, "alone")
            return "done"
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        outcome = await run_workflow(host, script, journal=journal, parent_model=model)
        asks = asks_by_actor(journal, outcome.run_id)
    slow, [other] = asks["slow"], asks["other"]
    # One at a time, each on the conversation of the ones before.
    for before, after in itertools.pairwise(slow):
        assert after.started_at >= before.ended_at
    assert [a.answer for a in slow] == ["slow 0", "slow 1", "slow 2"]
    # The other actor's ask overlapped the first of them.
    assert other.started_at < slow[0].ended_at and slow[0].started_at < other.ended_at


async def test_the_journal_pin_keeps_an_actor_on_its_model(tmp_path: Path) -> None:
    """S-ACT-5: amended without --model, an actor stays on the model it last ran on."""
    first_model = write_scenario(tmp_path / "a.yaml", {"default": [{"text": "from a"}] * 2})
    parent_model = write_scenario(tmp_path / "b.yaml", {"default": [{"text": "from b"}] * 2})
    script = write_script(
        tmp_path / "pin.py",
        """
        @workflow
        async def pin(ctx, prompt: str = "hi"):
            return await agent("solo").ask(prompt)
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        first = await run_workflow(
            host, script, journal=journal, parent_model=parent_model, model=first_model
        )
        again = await run_workflow(
            host,
            script,
            journal=journal,
            parent_model=parent_model,
            amend=first.run_id,
            inputs={"prompt": "changed"},
        )
        [actor] = journal.actors(again.run_id)
    assert first.value == "from a" and again.value == "from a"
    assert (actor.model, actor.model_source) == (first_model, "pin")


async def test_a_malformed_pin_is_a_pinned_model_error(tmp_path: Path) -> None:
    """S-ACT-5: a journal pin without a provider part raises WorkflowActorPinnedModelError."""
    model = write_scenario(tmp_path / "s.yaml", {"default": [{"text": "x"}]})
    script = write_script(
        tmp_path / "pin.py",
        """
        @workflow
        async def pin(ctx):
            return await agent("solo").ask("hi")
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        first = await run_workflow(host, script, journal=journal, parent_model=model)
    with sqlite3.connect(database_path(home_for(tmp_path))) as db:
        db.execute("UPDATE workflow_actors SET model = 'gpt-4o' WHERE run_id = ?", (first.run_id,))
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        with pytest.raises(WorkflowFailedError) as caught:
            await run_workflow(
                host, script, journal=journal, parent_model=model, amend=first.run_id
            )
        assert host.fleet.spawned_total == 0
    assert isinstance(caught.value.error, WorkflowActorPinnedModelError)
    assert "'gpt-4o'" in str(caught.value.error) and "no provider part" in str(caught.value.error)


async def test_inputs_are_validated_against_the_signature(tmp_path: Path) -> None:
    """A missing or unknown input is refused before the run, saying what the inputs are."""
    from supervisor.workflow import WorkflowScriptError

    model = write_scenario(tmp_path / "s.yaml", {"default": [{"text": "x"}]})
    script = write_script(
        tmp_path / "inputs.py",
        """
        @workflow
        async def needs(ctx, count: int, label: str = "x"):
            return [count, label]
        """,
    )
    async with workflow_host(home_for(tmp_path)) as (host, journal):
        with pytest.raises(WorkflowScriptError, match="needs the input 'count'"):
            await run_workflow(host, script, journal=journal, parent_model=model)
        with pytest.raises(WorkflowScriptError, match="takes no input 'colour'"):
            await run_workflow(
                host,
                script,
                journal=journal,
                parent_model=model,
                inputs={"count": "1", "colour": "red"},
            )
        outcome: WorkflowOutcome = await run_workflow(
            host, script, journal=journal, parent_model=model, inputs={"count": "3"}
        )
    assert outcome.value == [3, "x"]


def test_cli_runs_the_example_then_amends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Acceptance via the CLI: the shipped example, one prompt changed, ``--amend``, ``show``."""
    from supervisor.cli import main

    example = Path(__file__).resolve().parents[2] / "examples" / "workflows"
    for name in ("review.py", "review.yaml"):
        (tmp_path / name).write_text((example / name).read_text())
    monkeypatch.setenv("SUBVISOR_HOME", str(home_for(tmp_path)))
    monkeypatch.delenv("SUBVISOR_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)
    script = str(tmp_path / "review.py")

    assert main(["workflow", "run", script, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["totals"] == {
        "asks": 5,
        "cached": 0,
        "fresh": 5,
        "failed": 0,
        "model_calls": 6,  # the critic's first verdict is corrected once
        "input_tokens": first["totals"]["input_tokens"],
        "output_tokens": first["totals"]["output_tokens"],
    }
    assert first["run"]["result"]["verdict"] == {"approved": True, "problems": []}

    edited = (tmp_path / "review.py").read_text().replace("one-line commit message", "short title")
    (tmp_path / "review.py").write_text(edited)
    assert main(["workflow", "run", script, "--amend", first["run"]["run_id"], "--json"]) == 0
    amended = json.loads(capsys.readouterr().out)
    by_actor = {a["actor"]: a for a in amended["actors"]}
    assert {n: (a["cached"], a["fresh"], a["model_calls"]) for n, a in by_actor.items()} == {
        "writer": (2, 0, 0),
        "critic": (2, 0, 0),
        "editor": (0, 1, 1),
    }

    assert main(["workflow", "show", amended["run"]["run_id"][:10]]) == 0
    shown = capsys.readouterr().out
    assert "4 cached, 1 fresh), 1 model calls" in shown
    assert f"amends {first['run']['run_id']}" in shown


def test_cli_refuses_duplicate_names_with_both_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """S-ACT-2 at the command line: exit 2, the message names both lines, no run is journaled."""
    from supervisor.cli import main

    monkeypatch.setenv("SUBVISOR_HOME", str(home_for(tmp_path)))
    script = write_script(
        tmp_path / "dup.py",
        """
        @workflow(model="scripted:/nonexistent.yaml")
        async def dup(ctx):
            agent("writer")
            agent("writer")
        """,
    )
    assert main(["workflow", "run", str(script)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "actor name 'writer' is declared twice, on line 7 and on line 8" in err
    assert main(["workflow", "show", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
