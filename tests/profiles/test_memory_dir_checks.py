"""S-SEC-3 / S-SEC-1: a profile's memory dir and its MEMORY.md are never reached through a link.

A repository ships ``.subvisor/agent-memory`` (symlinks included) and a
subagent may rewrite it: a link there would make another directory writable
in every sandbox, or show any file the supervisor can read in a child's prompt.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.profiles._agent_memory import MemoryDirError, make_memory_dir, memory_prompt
from supervisor.profiles._profile import AgentProfile


def _keeper(scope: str) -> AgentProfile:
    return AgentProfile(name="keeper", description="d", prompt="", memory=scope, source="keeper.md")  # type: ignore[arg-type]


def test_s_sec_3_make_memory_dir_makes_it_where_missing_and_returns_its_real_path(
    tmp_path: Path,
) -> None:
    """S-SEC-3 / S-PROF-8: each scope's dir is made where missing, at its real path."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    made = make_memory_dir(_keeper("project"), home=home, project_dir=project)
    assert made == (project / ".subvisor" / "agent-memory" / "keeper").resolve()
    assert made.is_dir()
    local = make_memory_dir(_keeper("local"), home=home, project_dir=project)
    assert local == project.resolve() / ".subvisor" / "agent-memory-local" / "keeper"
    user = make_memory_dir(_keeper("user"), home=home, project_dir=project)
    assert user == home.resolve() / "agent-memory" / "keeper" and user.is_dir()


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_s_sec_3_make_memory_dir_refuses_a_link_at_any_component(
    tmp_path: Path, depth: int
) -> None:
    """S-SEC-3: a relative symlink at `.subvisor`, `agent-memory` or the profile's own dir
    (each leading to a real dir of the right shape) is refused, naming the link."""
    home, project, outside = tmp_path / "home", tmp_path / "project", tmp_path / "outside"
    parts = (".subvisor", "agent-memory", "keeper")
    (outside / "agent-memory" / "keeper").mkdir(parents=True)
    (outside / "keeper").mkdir()
    link = project.joinpath(*parts[:depth])
    link.parent.mkdir(parents=True)
    target = outside / "keeper" if depth == 3 else outside
    link.symlink_to(os.path.relpath(target, link.parent))
    with pytest.raises(MemoryDirError, match=rf"reached through {link}, which is a symlink"):
        make_memory_dir(_keeper("project"), home=home, project_dir=project)
    assert sorted(p.name for p in outside.rglob("*")) == ["agent-memory", "keeper", "keeper"]


def test_s_sec_3_make_memory_dir_refuses_a_file_on_the_way(tmp_path: Path) -> None:
    """S-SEC-3: a file where a dir of the path should be is refused, naming it."""
    project = tmp_path / "project"
    (project / ".subvisor").mkdir(parents=True)
    (project / ".subvisor" / "agent-memory").write_text("not a dir\n")
    with pytest.raises(MemoryDirError, match=r"agent-memory, which is a symlink or not a dir"):
        make_memory_dir(_keeper("project"), home=tmp_path / "home", project_dir=project)


def test_s_sec_1_a_memory_index_that_is_a_link_is_not_read_into_the_prompt(
    tmp_path: Path,
) -> None:
    """S-SEC-1 / S-SEC-3: `MEMORY.md` shipped as a link to a secret (subvisor's config, a
    key file) is not followed: the prompt says so and holds none of the secret."""
    home, project = tmp_path / "home", tmp_path / "project"
    secret = tmp_path / "config.toml"
    secret.write_text('api_key = "sk-secret-1234"\n')
    directory = project / ".subvisor" / "agent-memory" / "keeper"
    directory.mkdir(parents=True)
    (directory / "MEMORY.md").symlink_to(secret)
    prompt = memory_prompt(_keeper("project"), home=home, project_dir=project)
    assert "sk-secret-1234" not in prompt
    assert "MEMORY.md is a symlink, which is not followed" in prompt
