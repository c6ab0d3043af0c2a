"""A model-created workflow seen from the command line (issue 18): ``run --json``,
``ps --json`` and ``workflow show`` show the workflow with its actors beneath it.

Real ``subvisor`` subprocesses on a scripted root; S-NOTE-1 (one notification).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.delegation import home_for, write_scenario

SCRIPT = textwrap.dedent(
    """
    from supervisor.workflow import agent, workflow

    @workflow
    async def pair(ctx):
        left = agent("left", system="You answer left.")
        right = agent("right", system="You answer right.")
        return [await left.ask("Which way?"), await right.ask("And you?")]
    """
)


def test_run_ps_and_workflow_show_list_a_workflow_with_its_actors(tmp_path: Path) -> None:
    """`run --json`: the workflow task and its two actors (``parent_task_id``); `ps --json`
    agrees; `workflow show RUN_ID` reports the model-created run's actors and asks."""
    home = home_for(tmp_path)
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        {
                            "name": "CreateWorkflow",
                            "input": {"script": SCRIPT, "description": "ask both ways"},
                        }
                    ]
                },
                {"text": "started"},
                {"text": "the workflow said {{tool_result}}done"},
            ],
            "left": [{"text": "west"}],
            "right": [{"text": "east"}],
        },
    )
    done = run_cli(home, "run", "--model", model, "--json", "go both ways", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    [flow] = [t for t in report["tasks"] if t["kind"] == "workflow"]
    actors = [t for t in report["tasks"] if t["kind"] == "workflow_actor"]
    assert flow["status"] == "completed" and flow["description"] == "ask both ways"
    assert sorted(a["description"] for a in actors) == [
        f"actor 'left' of {flow['agentId']}",
        f"actor 'right' of {flow['agentId']}",
    ]
    assert {a["parent_task_id"] for a in actors} == {flow["agentId"]}
    assert any('"west"' in line and '"east"' in line for line in report["narration"])

    listed = run_cli(home, "ps", "--json")
    assert listed.returncode == 0, listed.stderr
    tasks = json.loads(listed.stdout)["tasks"]
    assert {(t["kind"], t["parent_task_id"]) for t in tasks} == {
        ("workflow", None),
        ("workflow_actor", flow["agentId"]),
    }

    shown = run_cli(home, "workflow", "show", flow["agentId"], "--json")
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    assert run["run"]["status"] == "completed" and run["run"]["result"] == ["west", "east"]
    assert [a["actor"] for a in run["actors"]] == ["left", "right"]
    assert run["totals"]["fresh"] == 2 and run["totals"]["model_calls"] == 2
    assert run["run"]["script"].endswith(f"{flow['agentId']}/script.py")
