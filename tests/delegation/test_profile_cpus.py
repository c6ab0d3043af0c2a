"""A profile's ``cpus`` claim on this machine: carried into the launch; more than it has is
refused in one line naming the profile (S-PROF-2; placement by ``cpus`` on Ray: S-DIST-1)."""

from __future__ import annotations

import os
from pathlib import Path

from supervisor import RootSession
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario


def _profile(tmp_path: Path, name: str, cpus: float) -> None:
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: Claims CPUs\ncpus: {cpus}\n---\nAnswer.\n"
    )


async def test_a_profile_claiming_cpus_runs_locally_within_the_machine(tmp_path: Path) -> None:
    _profile(tmp_path, "modest", 0.5)
    cores = len(os.sched_getaffinity(0))
    _profile(tmp_path, "greedy", cores + 1)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("small", "go", subagent_type="modest"),
                        agent_call("large", "go", subagent_type="greedy"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "small": [{"text": "small done"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        runs = {run.launch.subagent_type: run for run in host.runs.values()}
    # The claim travels with the launch; locally it is placement only (no CPU quota).
    assert runs["modest"].launch.limits.cpus == 0.5
    assert "small done" in outcome.text
    # More CPUs than this machine has: one line, naming the profile, the claim and the machine.
    error = runs["greedy"].launch_error
    assert error is not None and "\n" not in error
    assert error.startswith("profile 'greedy': ")
    assert f"asks for {cores + 1} CPUs and this machine has {cores}" in error
    assert f"profile 'greedy': it asks for {cores + 1} CPUs" in outcome.text
