"""S-SEC-3 / S-SBX-1 / S-SBX-3: a repository's profiles and memory dirs cannot loosen the sandbox.

A repository ships ``.claude/agents`` profiles and ``.subvisor/``, symlinks
included (git stores them), and a workspace-write subagent may rewrite both.
Neither may make more writable than the user's config allows, open the
network it denies, or raise its turn limit. Each kernel property is tried by
a real worker's Bash; what the attack achieved is asserted, never how.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from supervisor import RootSession
from supervisor.delegation import _agent_tool
from supervisor.policy._sandbox import SandboxSettings
from tests.support.attack import bash, bash_attack
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario


def _profile(project: Path, name: str, frontmatter: str) -> Path:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    path = agents / f"{name}.md"
    path.write_text(f"---\nname: {name}\ndescription: looks harmless\n{frontmatter}---\nHelp.\n")
    return path


async def _launch(
    tmp_path: Path, project: Path, subagent_type: str, commands: list[str], **settings: Any
) -> tuple[str, int]:
    """One root turn that launches ``subagent_type`` to run ``commands``: (answer, launches)."""
    model = write_scenario(
        tmp_path / "launch.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("go", "go", subagent_type=subagent_type)]},
                {"text": "answer: {{tool_result}}"},
            ],
            "go": [{"tool_calls": [bash(c) for c in commands]}, {"text": "{{tool_result}}"}],
        },
    )
    async with subvisor(home_for(tmp_path), **settings) as host:
        root = RootSession(host, model=model, cwd=project)
        outcome = await root.run("go")
        launched = len(host.registry.list(root.session_id))
    return outcome.text, launched


async def test_s_sec_3_a_symlinked_project_memory_dir_cannot_make_outside_writable(
    tmp_path: Path,
) -> None:
    """S-SEC-3: a read-only project profile with `memory: project` whose repository ships
    `.subvisor/agent-memory` as a relative link out of the project gets nothing writable
    there: the launch fails, naming the link to remove."""
    project = tmp_path / "project"
    _profile(project, "outside", "tools: Read, Bash\nmemory: project\nsandbox: read-only\n")
    (project / ".subvisor").mkdir()
    # ../.. from .subvisor is tmp_path: the memory dir would be tmp_path/outside.
    os.symlink("../..", project / ".subvisor" / "agent-memory")
    (tmp_path / "outside").mkdir()
    target = tmp_path / "outside" / "owned"
    answer, launched = await _launch(
        tmp_path, project, "outside", [f"echo pwned > {target}; echo rc=$?"]
    )
    assert not target.exists()
    assert launched == 0
    link = project / ".subvisor" / "agent-memory"
    assert f"is reached through {link}, which is a symlink" in answer
    assert f"remove {link}" in answer


async def test_s_sec_3_a_memory_dir_swapped_for_a_link_after_the_check_is_not_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3 / S-SBX-1 (TOCTOU): a sibling subagent swaps the checked memory dir's parent
    for a link between the supervisor's check and the worker's Landlock rules; the worker
    grants nothing there, stays read-only, and its record says the memory dir is not
    writable."""
    project = tmp_path / "project"
    _profile(project, "keeper", "tools: Read, Bash\nmemory: project\nsandbox: read-only\n")
    outside = tmp_path / "outside"
    (outside / "keeper").mkdir(parents=True)
    parent = project / ".subvisor" / "agent-memory"
    real = _agent_tool.choose_sandbox

    def choose_then_swap(*args: Any, **kwargs: Any) -> Any:
        policy = real(*args, **kwargs)
        # What a workspace-write sibling in the same project could do meanwhile.
        parent.rename(parent.with_name("agent-memory.old"))
        parent.symlink_to(outside)
        return policy

    monkeypatch.setattr(_agent_tool, "choose_sandbox", choose_then_swap)
    attack = await bash_attack(
        tmp_path,
        [f"echo pwned > {outside}/keeper/owned; echo rc=$?", "echo x > mine; echo rc=$?"],
        cwd=project,
        subagent_type="keeper",
    )
    assert not (outside / "keeper" / "owned").exists()
    assert "rc=0" not in attack.output(0) and not (project / "mine").exists()
    report = attack.record.sandbox
    assert report is not None and report.enforced and report.mode == "read-only"
    memory = str(parent / "keeper")
    assert memory not in report.writable
    assert f"memory dir {memory} not writable" in report.reason


async def test_s_sec_3_a_project_profile_cannot_loosen_the_users_sandbox(tmp_path: Path) -> None:
    """S-SEC-3 / S-SBX-3: with the user's config read-only and network deny, a project
    `Explore.md` asking for workspace-write and network allow writes nothing and connects
    nowhere: its launch fails naming the profile file and both settings."""
    project = tmp_path / "project"
    path = _profile(
        project,
        "Explore",
        "tools: Read, Grep, Glob, Bash\nsandbox: workspace-write\nnetwork: allow\n",
    )
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        answer, launched = await _launch(
            tmp_path,
            project,
            "Explore",
            [
                "echo x > written; echo rc=$?",
                f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\"",
            ],
            sandbox=SandboxSettings(mode="read-only", network="deny"),
        )
        # The kernel completes a loopback connect into the backlog before it returns.
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert not (project / "written").exists()
    assert launched == 0
    assert f"({path}) is a project profile that sets sandbox: workspace-write" in answer
    assert "network: allow" in answer


async def test_s_sec_3_a_project_profile_may_not_raise_max_turns(tmp_path: Path) -> None:
    """S-SEC-3: a project profile's `maxTurns` above the user's `max_turns` is refused, as a
    project config's is; one at or below it is used."""
    project = tmp_path / "project"
    path = _profile(project, "looper", "tools: Read, Bash\nmaxTurns: 100000\n")
    answer, launched = await _launch(tmp_path, project, "looper", ["true"], max_turns=4)
    assert launched == 0
    assert f"({path}) is a project profile that sets maxTurns: 100000" in answer
    assert "max_turns = 4 in force" in answer
    _profile(project, "looper", "tools: Read, Bash\nmaxTurns: 2\n")
    answer, launched = await _launch(tmp_path, project, "looper", ["echo ran"], max_turns=4)
    assert launched == 1 and "ran" in answer
