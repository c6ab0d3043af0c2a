"""Workflows the root model writes: CreateWorkflow, AmendWorkflow, escalations (issue 18).

Real workers throughout: each script runs in its own sandboxed script worker,
each actor in its own worker; the root is scripted. S-ACT-1..4 (actors,
typed asks, replay, the tools actors are never offered), S-NOTE-1..3 (one
notification per workflow run).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol import ChatMessage
from supervisor import RootSession
from supervisor.state._paths import database_path
from supervisor.workflow import (
    ACTOR_DISALLOWED_TOOLS,
    ROOT_WORKFLOW_TOOLS,
    WorkflowJournal,
    workflow_tools,
)
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer

REVIEW = textwrap.dedent(
    """
    from pydantic import BaseModel
    from supervisor.workflow import agent, workflow

    class Verdict(BaseModel):
        approved: bool
        problems: list[str]

    @workflow
    async def review(ctx, bug: str):
        writer = agent("writer", system="You write patches.")
        critic = agent("critic", system="You review patches.")
        patch = await writer.ask(f"Fix this bug: {bug}")
        verdict = await critic.ask(f"Review this patch: {patch}", schema=Verdict)
        return {"patch": patch, "approved": verdict.approved, "problems": verdict.problems}
    """
)


def create(script: str, description: str, **inputs: Any) -> dict[str, Any]:
    """One CreateWorkflow call of a scripted root turn."""
    return {
        "name": "CreateWorkflow",
        "input": {"script": script, "description": description, "inputs": inputs},
    }


def notifications(messages: list[ChatMessage]) -> list[str]:
    """Every ``<task-notification>`` fragment the root was given, in order."""
    found: list[str] = []
    for message in messages:
        if message.role == "user" and "<task-notification>" in message.content:
            found += message.content.split("<task-notification>")[1:]
    return found


def tool_results(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


async def test_a_scripted_root_creates_then_amends_a_two_actor_workflow(tmp_path: Path) -> None:
    """CreateWorkflow: two actors, one typed ask; one notification carries the result
    (S-NOTE-1..3). AmendWorkflow after a change: the unchanged writer replays from the
    journal with 0 model calls, only the critic runs (S-ACT-3)."""
    amended = REVIEW.replace("Review this patch", "Review this patch strictly")
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(REVIEW, "review the port fix", bug="port 8080 ")]},
                {"text": "started: {{tool_result}}"},
                {
                    "tool_calls": [
                        {
                            "name": "AmendWorkflow",
                            "input": {"run_id": "review the port fix", "script": amended},
                        }
                    ]
                },
                {"text": "amending"},
                {"text": "both done"},
            ],
            "writer": [{"text": "--- a/port.py\n+return int(text.strip())"}],
            "critic": [{"text": '{"approved": true, "problems": []}'}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        outcome = await root.run("fix the port parser")
        records = host.registry.list(root.session_id)
        spawned = host.fleet.spawned_total
        children = host.store.list_child_sessions(root.session_id, limit=100)
        conversations = [
            [m for _, m in host.store.messages_after(c.session_id, after_seq=0)]
            for c in children
            if c.agent_type == "workflow actor"
        ]
    assert outcome.status == "completed" and outcome.text == "both done"
    # Each actor's conversation is in its session (``subvisor logs``): asked, answered.
    assert len(conversations) == 4
    assert all([m.role for m in c][-2:] == ["user", "assistant"] for c in conversations)
    runs = [r for r in records if r.kind == "workflow"]
    assert [r.status for r in runs] == ["completed", "completed"]
    first, second = (r.task_id for r in runs)
    # Exactly one notification per run, each with its result.
    sent = notifications(root.loop.messages)
    assert [n.split("<task-id>")[1].split("</task-id>")[0] for n in sent] == [first, second]
    assert all(r.notified for r in runs)
    assert '"approved": true' in sent[0] and "int(text.strip())" in sent[0]
    assert "2 asks (0 replayed from the journal, 2 fresh), 2 model calls" in sent[0]
    assert "2 asks (1 replayed from the journal, 1 fresh), 1 model calls" in sent[1]
    # The actors are tasks beneath their workflow; a subagent session each.
    actors = [r for r in records if r.kind == "workflow_actor"]
    assert sorted((r.parent_task_id, r.description.split()[1]) for r in actors) == sorted(
        [(first, "'writer'"), (first, "'critic'"), (second, "'writer'"), (second, "'critic'")]
    )
    assert all(r.status == "completed" for r in actors)
    assert {c.agent_type for c in children} == {"workflow", "workflow actor"}
    # First run: the script worker and two actors; the amended one: the script and the critic.
    assert spawned == 5
    with WorkflowJournal(database_path(home_for(tmp_path))) as journal:
        run = journal.find_run(second)
        asks = {a.actor_key: a for a in journal.asks(second)}
    assert run is not None and run.amends == first and run.status == "completed"
    assert run.script_path.endswith(f"{second}/script.py")
    assert (asks["writer"].source, asks["writer"].model_calls) == ("cached", 0)
    assert (asks["critic"].source, asks["critic"].model_calls) == ("fresh", 1)


@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("from supervisor.workflow import workflow\n@workflow\nasync def f(ctx:\n", "not valid"),
        (
            "from supervisor.workflow import agent, workflow\n"
            "@workflow\nasync def f(ctx):\n    a = agent('x')\n    b = agent('x')\n",
            "declared twice, on line 4 and on line 5",
        ),
        ("async def f(ctx):\n    return 1\n", "defines exactly one `@workflow async def`"),
        (
            "from supervisor.workflow import workflow\nM = 'x:y'\n"
            "@workflow(model=M)\nasync def f(ctx):\n    return 1\n",
            "@workflow(model=...) must be a string literal",
        ),
    ],
)
async def test_a_script_that_cannot_run_is_a_fixable_tool_error(
    tmp_path: Path, script: str, says: str
) -> None:
    """CreateWorkflow analyses before anything runs (S-ACT-2): the model gets a tool error
    saying what to fix; no worker starts, no task is registered."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {"root": [{"tool_calls": [create(script, "broken")]}, {"text": "{{tool_result}}"}]},
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        outcome = await root.run("go")
        assert host.fleet.spawned_total == 0
        assert host.registry.list(root.session_id) == []
    assert says in outcome.text
    assert "Fix the script and call CreateWorkflow again" in outcome.text


async def test_a_scripts_own_model_is_what_its_actors_run_on(tmp_path: Path) -> None:
    """S-ACT-5: ``@workflow(model=...)`` in a model-written script, naming a model the
    user gave (here the configured one), is the model its actors inherit, as in
    ``subvisor workflow run``, not the creator's."""
    own = write_scenario(tmp_path / "own.yaml", {"writer": [{"text": "from the script's model"}]})
    script = textwrap.dedent(
        f"""
        from supervisor.workflow import agent, workflow

        @workflow(model={own!r})
        async def draft(ctx):
            return await agent("writer").ask("write")
        """
    )
    root_model = write_scenario(
        tmp_path / "root.yaml",
        {
            "root": [
                {"tool_calls": [create(script, "draft it")]},
                {"text": "started"},
                {"text": "done"},
            ],
            "writer": [{"text": "from the root's model"}],
        },
    )
    async with subvisor(home_for(tmp_path), model=own) as host:
        root = RootSession(host, model=root_model, cwd=tmp_path, extra_tools=workflow_tools(host))
        await root.run("go")
    [sent] = notifications(root.loop.messages)
    assert "from the script's model" in sent and "from the root's model" not in sent


DECIDE = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def release(ctx):
        planner = agent("planner", system="You plan releases.")
        return await planner.ask("Which branch do we release from?")
    """
)

PLANNER = [
    {
        "tool_calls": [
            {
                "name": "EscalateQuestion",
                "input": {"question": "main or release-2.0?", "options": ["main", "release-2.0"]},
            }
        ]
    },
    {"text": "Releasing from: {{tool_result}}"},
]


async def test_an_actor_escalates_and_the_root_resolves(tmp_path: Path) -> None:
    """Escalation: the actor's question reaches the root as a <workflow-question> with its
    id; ResolveWorkflowQuestion answers it and the actor goes on with the answer."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(DECIDE, "pick the release branch")]},
                {"text": "started"},
                {
                    "tool_calls": [
                        {
                            "name": "ResolveWorkflowQuestion",
                            "input": {"question_id": "q1", "answer": "release-2.0"},
                        }
                    ]
                },
                {"text": "answered: {{tool_result}}"},
                {"text": "done"},
            ],
            "planner": PLANNER,
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        outcome = await root.run("release")
    asked = [
        m.content
        for m in root.loop.messages
        if m.role == "user" and "<workflow-question" in m.content
    ]
    assert len(asked) == 1
    assert '<workflow-question id="q1"' in asked[0] and "main or release-2.0?" in asked[0]
    assert "<option>release-2.0</option>" in asked[0]
    assert "Answered q1; actor 'planner'" in tool_results(root.loop.messages)[1]
    [done] = notifications(root.loop.messages)
    assert "<status>completed</status>" in done
    assert "Releasing from: The workflow's creator answered: release-2.0" in done
    assert outcome.text == "done"


@pytest.mark.parametrize(
    "options", [[f"o{i}" for i in range(9)], ["x" * 1001]], ids=["nine", "long"]
)
async def test_s_sec_8_an_actors_question_offers_at_most_8_short_options(
    tmp_path: Path, options: list[str]
) -> None:
    """S-SEC-8, S-ACT-4: a question goes into the root's context whole, so its options are
    bounded (8 of 1,000 characters, as the tool's schema says) and charged to the actor's
    budget; past that the actor's tool gets an error naming the field, the root is asked
    nothing, and the actor goes on (before, ~8 MB of options reached the root)."""
    flooding = [
        {
            "tool_calls": [
                {
                    "name": "EscalateQuestion",
                    "input": {"question": "main or release-2.0?", "options": options},
                }
            ]
        },
        {"text": "Decided alone: {{tool_result}}"},
    ]
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(DECIDE, "pick the release branch")]},
                {"text": "started"},
                {"text": "done"},
            ],
            "planner": flooding,
        },
    )
    async with subvisor(home_for(tmp_path), workflow_question_timeout_s=0.5) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        await root.run("release")
    assert not [m for m in root.loop.messages if '<workflow-question id="' in m.content]
    [done] = notifications(root.loop.messages)
    assert "Decided alone: Error: EscalateQuestion" in done and "options" in done, done


async def test_an_unanswered_escalation_fails_the_ask_with_a_clear_error(tmp_path: Path) -> None:
    """Escalation timeout: the script's ask fails with EscalationUnansweredError naming
    the question and the setting; the run's one notification says so; a late answer is
    refused, saying why."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(DECIDE, "pick the release branch")]},
                {"text": "started"},
                {"text": "I will not answer"},
                {
                    "tool_calls": [
                        {
                            "name": "ResolveWorkflowQuestion",
                            "input": {"question_id": "q1", "answer": "too late"},
                        }
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "planner": PLANNER,
        },
    )
    async with subvisor(home_for(tmp_path), workflow_question_timeout_s=0.5) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        outcome = await root.run("release")
        [run] = [r for r in host.registry.list(root.session_id) if r.kind == "workflow"]
    assert run.status == "failed" and run.error is not None
    assert "EscalationUnansweredError" in run.error
    assert "escalated question q1 to the workflow's creator, who did not answer within 0.5 s" in (
        run.error
    )
    [failed] = notifications(root.loop.messages)
    assert "<status>failed</status>" in failed
    assert "question q1 is closed: nobody answered it within 0.5 s" in outcome.text


async def test_the_four_root_tools_are_the_roots_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-ACT-4: the root is offered CreateWorkflow, AmendWorkflow, ResolveWorkflowQuestion
    and ReadSessionContext; a subagent (even one whose profile names them) and an actor
    are offered none of them: the actor's model request is read at the provider."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / ".claude" / "agents").mkdir(parents=True)
    (tmp_path / ".claude" / "agents" / "greedy.md").write_text(
        "---\nname: greedy\ndescription: wants everything\n"
        "tools: Read, CreateWorkflow, AmendWorkflow, ResolveWorkflowQuestion, "
        "ReadSessionContext\n---\nYou want it all.\n"
    )
    script = DECIDE.replace('agent("planner", ', 'agent("planner", model="openai:gpt-test", ')
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("child", "hi"),
                        agent_call("greedy child", "hi", subagent_type="greedy"),
                        create(script, "offer check"),
                    ]
                },
                {"tool_calls": [{"name": "ReadSessionContext", "input": {}}]},
                {"text": "{{tool_result}}"},
                {"text": "done"},
            ],
            "child": [{"text": "ok"}],
            "greedy child": [{"text": "ok"}],
        },
    )
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "main"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    with ProviderServer() as server:
        server.enqueue(CannedResponse.json(answer))
        settings: dict[str, Any] = {
            # The configured model: one a root-written script may name (S-ACT-5).
            "model": "openai:gpt-test",
            "gateway": {
                "providers": {
                    "openai": {"api": "openai", "base_url": server.base_url, "streaming": False}
                }
            },
        }
        async with subvisor(home_for(tmp_path), **settings) as host:
            root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
            outcome = await root.run("check the offers")
            subagents = {run.launch.subagent_type: run for run in host.runs.values()}
        [sent] = [request.json() for request in server.requests]
    assert set(ROOT_WORKFLOW_TOOLS) <= set(root.toolbox.names)
    for run in subagents.values():
        offered = {spec.name for spec in run.tool_specs}
        assert not offered & set(ROOT_WORKFLOW_TOOLS), run.launch.subagent_type
    assert {spec.name for spec in subagents["greedy"].tool_specs} >= {"Read"}
    actor_offered = {tool["function"]["name"] for tool in sent["tools"]}
    assert "EscalateQuestion" in actor_offered
    assert not actor_offered & {*ACTOR_DISALLOWED_TOOLS, *ROOT_WORKFLOW_TOOLS}
    # ReadSessionContext: the user's request and the session's tasks, as JSON.
    context = json.loads(tool_results(root.loop.messages)[-1])
    assert context["user_requests"] == ["check the offers"]
    assert {t["kind"] for t in context["tasks"]} >= {"local_agent", "workflow"}
    assert outcome.text == "done"


SLOW = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def slow(ctx):
        return await agent("sleeper", system="You take your time.").ask("Think hard.")
    """
)


async def test_stopping_a_workflow_stops_its_actors_and_notifies_once(tmp_path: Path) -> None:
    """`subvisor stop WF` (the registry's stop, as the control channel calls it): the run and
    its actor end ``killed`` with the reason, their workers are gone, one notification."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [create(SLOW, "slow one")]},
                {"text": "started"},
                {"text": "it was stopped"},
            ],
            "sleeper": [{"text": "never", "latency_ms": 600_000}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.run, "go slowly")
            actor = None
            while actor is None or actor.status != "running":
                await trio.sleep(0.02)
                actors = [r for r in host.registry.list() if r.kind == "workflow_actor"]
                actor = actors[0] if actors else None
            [flow] = [r for r in host.registry.list() if r.kind == "workflow"]
            stopped = await host.registry.stop(flow.task_id, "stopped by the test")
        actor = host.registry.get(actor.task_id)
        alive = [h for h in host.fleet.workers.values() if h.alive]
    assert stopped.status == "killed" and stopped.error == "stopped by the test"
    assert actor is not None and actor.status == "killed"
    assert actor.error == "its workflow run was stopped"
    assert alive == []
    [notice] = notifications(root.loop.messages)
    assert "<status>killed</status>" in notice and 'Workflow "slow one" was stopped' in notice
