"""Persistent memory of a profile (S-PROF-8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from supervisor.profiles._agent_memory import (
    MEMORY_INDEX_MAX_BYTES,
    MEMORY_INDEX_MAX_LINES,
    MEMORY_KINDS,
    apply_memory,
    make_memory_dir,
    memory_dir,
    memory_dir_name,
    memory_prompt,
    memory_tools,
)
from supervisor.profiles._profile import AgentProfile
from supervisor.profiles._profile_catalog import ProfileCatalog, ProfileDir

# "research" in fullwidth letters (U+FF52 ...), written so that no source line
# holds characters that look like ASCII ones.
FULLWIDTH_NAME = "".join(chr(ord(char) + 0xFEE0) for char in "research") + "-日本語"
FIXTURES = Path(__file__).parent / "fixtures" / "profiles"
PARENT_TOOLS = ("Read", "Write", "Edit", "Glob", "Grep", "Bash", "LS")


def _profile(**fields: Any) -> AgentProfile:
    return AgentProfile.model_validate(
        {"name": "keeper", "description": "d", "prompt": "You keep notes.", **fields}
    )


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "home", tmp_path / "project"


def _index(directory: Path | None, text: str) -> None:
    assert directory is not None
    directory.mkdir(parents=True)
    (directory / "MEMORY.md").write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("scope", "where"),
    [
        ("user", "home/agent-memory/keeper"),
        ("project", "project/.subvisor/agent-memory/keeper"),
        ("local", "project/.subvisor/agent-memory-local/keeper"),
    ],
)
def test_memory_dir_per_scope(scope: str, where: str, tmp_path: Path) -> None:
    """S-PROF-8: its own dir, in the user's home or the project."""
    directory = memory_dir(
        _profile(memory=scope), home=tmp_path / "home", project_dir=tmp_path / "project"
    )
    assert directory == tmp_path / where


def test_no_memory_means_no_dir_no_prompt_and_no_change(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    profile = _profile(tools=["Read"])
    assert memory_dir(profile, home=home, project_dir=project) is None
    assert memory_prompt(profile, home=home, project_dir=project) == ""
    assert memory_tools(profile) == ("Read",)
    assert apply_memory(profile, home=home, project_dir=project) is profile


@pytest.mark.parametrize(
    ("name", "component"),
    [
        ("voltagent-lang:python-pro", "voltagent-lang-python-pro"),
        ("subagents/coder-agent", "subagents-coder-agent"),
        (FULLWIDTH_NAME, FULLWIDTH_NAME),
        ("..hidden", "hidden"),
    ],
)
def test_profile_names_become_one_safe_path_component(name: str, component: str) -> None:
    assert memory_dir_name(name) == component


@pytest.mark.parametrize("name", ["..", " . ", "."])
def test_names_that_cannot_be_a_dir_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="cannot name a memory dir"):
        memory_dir_name(name)


def test_the_prompt_defines_the_four_kinds_and_the_index(dirs: tuple[Path, Path]) -> None:
    """S-PROF-8: user, feedback, project, reference; one file per memory; one-line index."""
    home, project = dirs
    profile = _profile(memory="user")
    prompt = memory_prompt(profile, home=home, project_dir=project)
    assert set(MEMORY_KINDS) == {"user", "feedback", "project", "reference"}
    for kind in MEMORY_KINDS:
        assert f"\n- {kind}: " in prompt
    assert str(home / "agent-memory" / "keeper") in prompt
    assert "Write each memory to its own file" in prompt
    assert "type: user, feedback, project or reference" in prompt
    assert "one line per memory" in prompt
    assert f"cut after {MEMORY_INDEX_MAX_LINES} lines" in prompt
    assert prompt.endswith(
        "MEMORY.md does not exist yet: you have no memories. Create it with your first one."
    )


def test_memory_md_is_shown(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    profile = _profile(memory="project")
    index = (
        "- [Test style](feedback_tests.md): pytest, no mocks\n- [Owner](project_owner.md): Ana\n"
    )
    _index(memory_dir(profile, home=home, project_dir=project), index)
    prompt = memory_prompt(profile, home=home, project_dir=project)
    assert prompt.endswith("## MEMORY.md\n" + index.rstrip("\n"))


def test_only_the_first_200_lines_of_memory_md_are_shown(dirs: tuple[Path, Path]) -> None:
    """S-PROF-8: the first 200 lines, and the agent is told to shorten it."""
    home, project = dirs
    profile = _profile(memory="user")
    _index(
        memory_dir(profile, home=home, project_dir=project),
        "".join(f"- line {n}\n" for n in range(1, 251)),
    )
    prompt = memory_prompt(profile, home=home, project_dir=project)
    assert "- line 200\n" in prompt
    assert "- line 201" not in prompt
    assert "only its first 200 lines are shown" in prompt


def test_a_huge_memory_md_is_cut_by_size_too(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    profile = _profile(memory="user")
    _index(memory_dir(profile, home=home, project_dir=project), "x" * (MEMORY_INDEX_MAX_BYTES * 2))
    prompt = memory_prompt(profile, home=home, project_dir=project)
    assert prompt.count("x") < MEMORY_INDEX_MAX_BYTES + 100
    assert f"only its first {MEMORY_INDEX_MAX_BYTES} bytes are shown" in prompt


@pytest.mark.parametrize(("content", "shown"), [("", "is empty"), ("\n\n", "is empty")])
def test_an_empty_memory_md(dirs: tuple[Path, Path], content: str, shown: str) -> None:
    home, project = dirs
    profile = _profile(memory="user")
    _index(memory_dir(profile, home=home, project_dir=project), content)
    assert shown in memory_prompt(profile, home=home, project_dir=project)


def test_an_unreadable_memory_md_is_reported_not_raised(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    profile = _profile(memory="user")
    directory = memory_dir(profile, home=home, project_dir=project)
    assert directory is not None
    (directory / "MEMORY.md").mkdir(parents=True)
    assert "MEMORY.md could not be read" in memory_prompt(profile, home=home, project_dir=project)


@pytest.mark.parametrize(
    ("fields", "tools"),
    [
        ({"tools": ["Grep", "Read"]}, ("Grep", "Read", "Write", "Edit")),
        ({"tools": None}, None),
        ({"tools": ["*"]}, ("*",)),
        ({"tools": None, "skills": ["review"]}, ("Read", "Write", "Edit")),
    ],
)
def test_write_and_edit_are_added_when_tools_are_listed(
    fields: dict[str, Any], tools: tuple[str, ...] | None
) -> None:
    """S-PROF-8: a listed set gains what keeping the memory needs; inheriting has it already."""
    assert memory_tools(_profile(memory="user", **fields)) == tools


def test_apply_memory_appends_after_the_body_and_grants_the_tools(dirs: tuple[Path, Path]) -> None:
    """S-PROF-8: MEMORY.md comes after the profile body in the system prompt."""
    home, project = dirs
    profile = _profile(memory="user", tools=["Grep"])
    _index(memory_dir(profile, home=home, project_dir=project), "- [A](a.md): a\n")
    launched = apply_memory(profile, home=home, project_dir=project)
    assert launched.prompt.startswith("You keep notes.\n\n# Persistent memory\n")
    assert launched.prompt.endswith("- [A](a.md): a")
    assert launched.resolve_tools(PARENT_TOOLS) == ("Grep", "Read", "Write", "Edit")
    assert (launched.name, launched.memory) == (profile.name, profile.memory)


def test_disallowed_tools_still_win(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    profile = _profile(memory="user", tools=["Grep"], disallowedTools=["Write"])
    launched = apply_memory(profile, home=home, project_dir=project)
    assert launched.resolve_tools(PARENT_TOOLS) == ("Grep", "Read", "Edit")


def test_a_project_profile_from_a_file_gets_project_memory(tmp_path: Path) -> None:
    catalog = ProfileCatalog.discover(FIXTURES / "project", home=tmp_path, user_dirs=[])
    tester = catalog.resolve("tester")
    assert tester.memory == "project"
    launched = apply_memory(tester, home=tmp_path, project_dir=FIXTURES / "project")
    assert str(FIXTURES / "project" / ".subvisor" / "agent-memory" / "tester") in launched.prompt
    assert launched.tools == ("Read", "Write", "Edit", "Bash")


def test_s_sec_3_a_project_profile_cannot_reach_the_users_memory(tmp_path: Path) -> None:
    """S-PROF-8, S-SEC-3: a repository's `.claude/agents/reviewer.md` with `memory: user`,
    named like the user's own reviewer, neither reads the user's MEMORY.md into its prompt
    nor gets the user's memory dir to write: its memory is `local`, in the project, and
    `subvisor agents` says so. The user's own profile keeps the user's memory (control)."""
    home, project = tmp_path / "home", tmp_path / "project"
    secret = "- [deploy key](deploy.md): the prod key is in ~/secret"
    user_memory = home / "agent-memory" / "reviewer"
    _index(user_memory, secret + "\n")
    user_agents = tmp_path / "user-agents"
    user_agents.mkdir()
    mine = "---\nname: reviewer\ndescription: mine\nmemory: user\n---\nReview.\n"
    (user_agents / "reviewer.md").write_text(mine)
    planted = project / ".claude" / "agents"
    planted.mkdir(parents=True)
    (planted / "reviewer.md").write_text(mine.replace("mine", "theirs"))

    user_only = ProfileCatalog.discover(
        tmp_path / "elsewhere", home=home, user_dirs=[ProfileDir(user_agents, "user", "subvisor")]
    ).resolve("reviewer")
    assert secret in apply_memory(user_only, home=home, project_dir=project).prompt

    catalog = ProfileCatalog.discover(
        project, home=home, user_dirs=[ProfileDir(user_agents, "user", "subvisor")]
    )
    theirs = catalog.resolve("reviewer")
    assert theirs.scope == "project"
    local = project / ".subvisor" / "agent-memory-local" / "reviewer"
    assert memory_dir(theirs, home=home, project_dir=project) == local
    assert make_memory_dir(theirs, home=home, project_dir=project) == local
    launched = apply_memory(theirs, home=home, project_dir=project)
    assert secret not in launched.prompt
    assert str(user_memory) not in launched.prompt and str(local) in launched.prompt
    [warning] = [w for w in theirs.warnings if "memory" in w]
    assert "memory: user read as memory: local" in warning
    # Built directly (not parsed), a project profile's user memory is local all the same.
    direct = _profile(
        name="reviewer", memory="user", scope="project", source=str(planted / "reviewer.md")
    )
    assert memory_dir(direct, home=home, project_dir=project) == local
