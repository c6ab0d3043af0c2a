"""A workflow actor's tools run in the sandbox a subagent with those tools would get.

An actor is a model-driven agent like any subagent: its Bash must not write
outside the project, and one without Write or Edit must not write at all
(S-SBX-1, S-SEC-1). Before this, actors' workers were spawned with no
sandbox (``full``, network allowed).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from supervisor.state._paths import database_path
from supervisor.workflow import WorkflowJournal, run_workflow
from tests.support.delegation import home_for, subvisor, write_scenario


def _bash(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "Bash", "input": {"command": command}}]}


async def test_an_actors_bash_is_held_to_the_sandbox_its_tools_earn(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            # Write among its tools: workspace-write.
            "writer": [
                _bash(f"touch {project}/inside && echo made-inside"),
                _bash(f"touch {outside}/escaped; echo rc=$?"),
                {"text": "writer done"},
            ],
            # Bash alone: read-only, like an Explore subagent.
            "reader": [_bash(f"touch {project}/by-reader; echo rc=$?"), {"text": "reader done"}],
        },
    )
    script = tmp_path / "flow.py"
    script.write_text(
        textwrap.dedent(
            """
            from supervisor.workflow import agent, workflow

            @workflow
            async def flow(ctx):
                writer = agent("writer", tools=["Bash", "Write"])
                reader = agent("reader", tools=["Bash"])
                return [await writer.ask("write"), await reader.ask("read")]
            """
        )
    )
    home = home_for(tmp_path)
    async with subvisor(home) as host:
        with WorkflowJournal(database_path(home)) as journal:
            outcome = await run_workflow(
                host, script, journal=journal, parent_model=model, cwd=project
            )
    assert outcome.value == ["writer done", "reader done"]
    assert (project / "inside").exists()  # control: the writer may write its project
    assert not (outside / "escaped").exists()
    assert not (project / "by-reader").exists()
