"""Discovery, precedence, plugins and name resolution (S-PROF-1, S-PROF-3, S-PROF-4, S-TOOL-2).

Every test builds its own homes: nothing reads the machine's real ``~``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supervisor.profiles import _profile_catalog
from supervisor.profiles._builtin_profiles import BUILTIN_PROFILES, EXPLORE
from supervisor.profiles._names import (
    AmbiguousAgentTypeError,
    SubagentTypeError,
    UnknownAgentTypeError,
)
from supervisor.profiles._profile_catalog import (
    ProfileCatalog,
    ProfileDir,
    ProfileEntry,
    ProfileUnavailableError,
    project_profile_dirs,
    user_profile_dirs,
)

# "research" in fullwidth letters (U+FF52 ...), written so that no source line
# holds characters that look like ASCII ones.
FULLWIDTH_NAME = "".join(chr(ord(char) + 0xFEE0) for char in "research") + "-日本語"
FIXTURES = Path(__file__).parent / "fixtures" / "profiles"
PLUGINS = FIXTURES / "plugins"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _profile_text(name: str | None, description: str = "d", extra: str = "") -> str:
    named = f"name: {name}\n" if name is not None else ""
    return f"---\n{named}description: {description}\n{extra}---\nBody of {name}\n"


def _fixture_catalog(*plugins: str) -> ProfileCatalog:
    return ProfileCatalog.discover(
        FIXTURES / "project",
        home=FIXTURES / "no-such-home",
        user_dirs=[
            ProfileDir(FIXTURES / "claude-user", "user", "claude"),
            ProfileDir(FIXTURES / "user", "user", "subvisor"),
        ],
        plugin_dirs=[PLUGINS / name for name in plugins],
    )


def _entries(catalog: ProfileCatalog, name: str) -> list[ProfileEntry]:
    return [entry for entry in catalog.entries if entry.name == name]


def _rel(source: str) -> str:
    return Path(source).relative_to(FIXTURES).as_posix()


# --- where profiles come from (S-PROF-3) ---


def test_with_no_profile_files_the_builtins_are_all_there_is(tmp_path: Path) -> None:
    """S-PROF-1: general-purpose and Explore always exist."""
    catalog = ProfileCatalog.discover(tmp_path / "project", home=tmp_path / "home", user_dirs=[])
    assert dict(catalog.profiles) == BUILTIN_PROFILES
    assert [(e.name, e.source, e.scope) for e in catalog.entries] == [
        ("general-purpose", "built-in", "built-in"),
        ("Explore", "built-in", "built-in"),
    ]


def test_default_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S-PROF-3: Claude Code's and opencode's user dirs, then ours, which wins."""
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    home, user = tmp_path / "subvisor", tmp_path / "u"
    assert user_profile_dirs(home, user_home=user) == (
        ProfileDir(user / ".claude" / "agents", "user", "claude"),
        ProfileDir(user / ".config" / "opencode" / "agent", "user", "opencode"),
        ProfileDir(user / ".config" / "opencode" / "agents", "user", "opencode"),
        ProfileDir(home / "agents", "user", "subvisor"),
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_profile_dirs(home, user_home=user)[1].path == tmp_path / "xdg/opencode/agent"


def test_project_dirs() -> None:
    project = Path("/repo")
    assert [(d.path, d.dialect) for d in project_profile_dirs(project)] == [
        (project / ".claude/agents", "claude"),
        (project / ".opencode/agent", "opencode"),
        (project / ".opencode/agents", "opencode"),
        (project / ".subvisor/agents", "subvisor"),
    ]
    assert {d.scope for d in project_profile_dirs(project)} == {"project"}


def test_default_user_dirs_are_used_when_none_are_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "u"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    _write(tmp_path / "u/.claude/agents/claude-one.md", _profile_text("claude-one"))
    _write(tmp_path / "u/.config/opencode/agent/oc.md", _profile_text(None))
    _write(tmp_path / "home/agents/ours.md", _profile_text("ours"))
    catalog = ProfileCatalog.discover(tmp_path / "project", home=tmp_path / "home")
    assert {"claude-one", "oc", "ours"} <= set(catalog.profiles)
    assert {e.scope for e in catalog.entries if e.name in {"claude-one", "oc", "ours"}} == {"user"}


def test_dirs_are_scanned_recursively_for_md_and_markdown(tmp_path: Path) -> None:
    """S-PROF-3: nested files load; hidden files and other suffixes do not."""
    agents = tmp_path / "home" / "agents"
    _write(agents / "a.md", _profile_text("a"))
    _write(agents / "deep" / "er" / "b.markdown", _profile_text("b"))
    _write(agents / "C.MD", _profile_text("c"))
    _write(agents / "notes.txt", _profile_text("txt"))
    _write(agents / ".hidden.md", _profile_text("hidden"))
    _write(agents / ".git" / "x.md", _profile_text("in-git"))
    catalog = ProfileCatalog.discover(
        tmp_path, home=tmp_path / "home", user_dirs=[ProfileDir(agents, "user", "subvisor")]
    )
    assert set(catalog.profiles) - set(BUILTIN_PROFILES) == {"a", "b", "c"}


def test_task_output_dirs_in_the_home_agents_dir_are_not_scanned() -> None:
    """S-RUN-1 keeps ``sess_*/<agentId>/`` output dirs in ``$SUBVISOR_HOME/agents`` too."""
    catalog = _fixture_catalog()
    assert "task-output" not in {e.name for e in catalog.entries}


def test_a_markdown_file_without_frontmatter_is_ignored_not_an_error() -> None:
    catalog = _fixture_catalog()
    readme = str(FIXTURES / "user" / "README.md")
    assert readme in catalog.ignored
    assert "no YAML frontmatter" in catalog.ignored[readme]
    assert all(entry.source != readme for entry in catalog.entries)


def test_symlinked_dirs_are_followed_without_looping(tmp_path: Path) -> None:
    """Links inside the project are followed (one out of it is not: tests/security)."""
    real = tmp_path / "project" / "real"
    _write(real / "linked.md", _profile_text("linked"))
    (real / "loop").symlink_to(real)
    agents = tmp_path / "project" / ".claude" / "agents"
    agents.parent.mkdir(parents=True)
    agents.symlink_to(real)
    catalog = ProfileCatalog.discover(tmp_path / "project", home=tmp_path / "h", user_dirs=[])
    assert [e.name for e in catalog.entries if e.scope == "project"] == ["linked"]


def test_a_project_at_the_user_home_is_not_scanned_twice(tmp_path: Path) -> None:
    """~/.claude/agents is a user dir even when the project is ~ itself."""
    _write(tmp_path / ".claude" / "agents" / "mine.md", _profile_text("mine"))
    catalog = ProfileCatalog.discover(
        tmp_path,
        home=tmp_path / ".subvisor",
        user_dirs=user_profile_dirs(
            tmp_path / ".subvisor", user_home=tmp_path, config_home=tmp_path / ".config"
        ),
    )
    (entry,) = _entries(catalog, "mine")
    assert entry.scope == "user"


# --- precedence (S-PROF-1, S-PROF-3) ---


def test_later_scopes_win_and_entries_record_what_they_replaced() -> None:
    """S-PROF-3: built-in < user (Claude Code's dir, then ours) < project (.claude, then ours)."""
    catalog = _fixture_catalog()
    reviewer = catalog.resolve("reviewer")
    assert _rel(reviewer.source) == "project/.subvisor/agents/reviewer.md"
    assert reviewer.scope == "project"
    chain = _entries(catalog, "reviewer")
    assert [_rel(e.source) for e in chain] == [
        "claude-user/reviewer.md",
        "user/reviewer.md",
        "project/.claude/agents/reviewer.md",
        "project/.subvisor/agents/reviewer.md",
    ]
    assert [e.launchable for e in chain] == [False, False, False, True]
    assert [_rel(s) for s in chain[-1].overrides] == [
        "claude-user/reviewer.md",
        "user/reviewer.md",
        "project/.claude/agents/reviewer.md",
    ]
    assert chain[0].overridden_by == str(FIXTURES / "user" / "reviewer.md")
    assert chain[0].not_launchable == f"overridden by {FIXTURES / 'user' / 'reviewer.md'}"


def test_a_user_profile_overrides_a_builtin() -> None:
    """S-PROF-1: same-named user or project profiles override the built-ins."""
    catalog = _fixture_catalog()
    assert catalog.resolve("general-purpose").scope == "user"
    builtin, user = _entries(catalog, "general-purpose")
    assert builtin.overridden_by == user.source
    assert user.overrides == ("built-in",)
    assert catalog.resolve("Explore") is EXPLORE


def test_two_files_of_one_kind_with_one_name_warn(tmp_path: Path) -> None:
    agents = tmp_path / "a"
    _write(agents / "one.md", _profile_text("twin"))
    _write(agents / "two" / "two.md", _profile_text("twin", "the later one"))
    catalog = ProfileCatalog.discover(
        tmp_path, home=tmp_path, user_dirs=[ProfileDir(agents, "user", "subvisor")]
    )
    assert catalog.resolve("twin").description == "the later one"
    first, second = _entries(catalog, "twin")
    assert any("also used by" in w and first.source in w for w in second.warnings)


# --- broken profiles ---


def test_a_broken_profile_never_breaks_the_others() -> None:
    catalog = _fixture_catalog("alpha", "beta", "broken", "escape")
    broken = {e.name: e for e in catalog.entries if e.error is not None}
    assert set(broken) == {
        "bad-yaml",
        "wrong-types",
        "escalate",
        "alpha:missing",
        "broken",
        "escape:shared",
    }
    for entry in broken.values():
        assert entry.profile is None
        assert not entry.launchable
        assert entry.not_launchable == f"failed to load: {entry.error}"
    assert {"reviewer", "tester", "subagents/coder", "alpha:only-alpha"} <= set(catalog.profiles)


@pytest.mark.parametrize(
    ("requested", "shown"),
    [
        ("wrong-types", "user/wrong-types.md:5: maxTurns: Input should be a valid integer"),
        ("Bad_Yaml", "user/bad-yaml.md:4: tools: invalid YAML frontmatter"),
        ("escalate", "escalate.md:5: permissionMode: a project-level profile may not set"),
    ],
)
def test_asking_for_a_broken_profile_shows_its_error(requested: str, shown: str) -> None:
    """The Agent tool gets the parse error, not a bare 'unknown subagent_type'."""
    catalog = _fixture_catalog()
    with pytest.raises(ProfileUnavailableError) as caught:
        catalog.resolve(requested)
    assert shown in str(caught.value)
    assert "Available agent types: " in str(caught.value)
    assert isinstance(caught.value, SubagentTypeError)


def test_a_broken_override_leaves_the_lower_profile_in_use_and_says_so(tmp_path: Path) -> None:
    user = _write(tmp_path / "user" / "helper.md", _profile_text("helper", "user helper"))
    project = _write(
        tmp_path / "project" / ".subvisor" / "agents" / "helper.md",
        _profile_text("helper", extra="maxTurns: lots\n"),
    )
    catalog = ProfileCatalog.discover(
        tmp_path / "project",
        home=tmp_path,
        user_dirs=[ProfileDir(tmp_path / "user", "user", "subvisor")],
    )
    assert catalog.resolve("helper").source == str(user)
    working, broken = _entries(catalog, "helper")
    assert broken.source == str(project) and broken.error is not None
    assert working.overridden_by is None
    assert working.warnings == (
        f"{project} would override this profile but failed to load: {broken.error.message}",
    )


def test_project_permission_mode_fails_that_file_only() -> None:
    """S-PROF-4: rejected at parse time, as a ProfileError of that one file."""
    catalog = _fixture_catalog()
    (entry,) = _entries(catalog, "escalate")
    assert entry.error is not None
    assert (entry.error.line, entry.error.field) == (5, "permissionMode")
    assert entry.scope == "project"
    assert catalog.resolve("tester").scope == "project"


# --- opencode ---


def test_opencode_nested_paths_become_names() -> None:
    catalog = _fixture_catalog()
    coder = catalog.resolve("subagents/coder")
    assert coder.scope == "project"
    assert coder.max_turns == 12
    assert catalog.resolve("Subagents/Coder").name == "subagents/coder"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("chat", "opencode 'mode: primary': a primary agent talks to the user"),
        ("retired", "disabled by 'disable: true'"),
    ],
)
def test_primary_and_disabled_agents_are_listed_but_not_launchable(name: str, reason: str) -> None:
    catalog = _fixture_catalog()
    (entry,) = _entries(catalog, name)
    assert entry.profile is not None
    assert name not in catalog.profiles
    assert entry.not_launchable is not None and entry.not_launchable.startswith(reason)
    with pytest.raises(ProfileUnavailableError, match=reason):
        catalog.resolve(name)


# --- plugins (S-PROF-3) ---


def test_plugin_profiles_are_namespaced_with_unambiguous_bare_aliases() -> None:
    """S-PROF-3: ``<plugin>:<name>``; the bare name only when unique and clashing with nothing."""
    catalog = _fixture_catalog("alpha", "beta")
    plugin = {e.name: e.aliases for e in catalog.entries if e.scope == "plugin" and e.profile}
    assert plugin == {
        "alpha:shared": (),  # beta has 'Shared' too (S-TOOL-2 normalisation)
        "alpha:only-alpha": ("only-alpha",),
        "alpha:reviewer": (),  # the user and project 'reviewer' own that name
        "beta:Shared": (),
        "beta:deep-diver": ("deep-diver",),
        "beta:explore": (),  # the built-in Explore owns that name
    }
    assert dict(catalog.aliases) == {
        "only-alpha": "alpha:only-alpha",
        "deep-diver": "beta:deep-diver",
    }
    assert catalog.resolve("only-alpha").name == "alpha:only-alpha"
    assert catalog.resolve("Deep_Diver").name == "beta:deep-diver"
    assert catalog.resolve("explore") is EXPLORE
    assert catalog.resolve("reviewer").scope == "project"
    assert catalog.resolve("alpha:reviewer").scope == "plugin"


def test_a_bare_name_several_plugins_use_is_ambiguous() -> None:
    """S-TOOL-2: several hits are an error naming them."""
    catalog = _fixture_catalog("alpha", "beta")
    with pytest.raises(AmbiguousAgentTypeError) as caught:
        catalog.resolve("shared")
    assert str(caught.value) == "ambiguous subagent_type shared: matches alpha:shared, beta:Shared"


def test_an_alias_appears_when_the_clash_goes_away() -> None:
    assert _fixture_catalog("alpha").aliases["shared"] == "alpha:shared"


def test_plugin_without_agents_list_uses_its_agents_dir_recursively() -> None:
    catalog = _fixture_catalog("beta")
    sources = {e.name: _rel(e.source) for e in catalog.entries if e.plugin == "beta"}
    assert sources == {
        "beta:Shared": "plugins/beta/agents/shared.md",
        "beta:explore": "plugins/beta/agents/nested/explore.md",
        "beta:deep-diver": "plugins/beta/agents/nested/deep-diver.md",
    }


def test_plugin_profiles_may_not_set_permission_mode() -> None:
    only = _fixture_catalog("alpha").resolve("only-alpha")
    assert only.permission_mode is None
    assert only.scope == "plugin"
    assert "permissionMode ignored" in only.warnings[0]


@pytest.mark.parametrize(
    ("plugin", "name", "line", "message"),
    [
        ("alpha", "alpha:missing", 8, "'agents' lists './agents/missing.md', which does not exist"),
        ("broken", "broken", 3, "invalid JSON: Expecting value"),
        ("escape", "escape:shared", 3, "which is outside the plugin"),
    ],
)
def test_plugin_manifest_problems_are_entries_with_file_and_line(
    plugin: str, name: str, line: int, message: str
) -> None:
    catalog = _fixture_catalog(plugin)
    (entry,) = _entries(catalog, name)
    assert entry.error is not None
    assert entry.source == str(PLUGINS / plugin / ".claude-plugin" / "plugin.json")
    assert entry.error.line == line
    assert message in entry.error.message


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ('{"agents": []}', "'name' must be the plugin's name"),
        ('{"name": "a:b"}', "without ':'"),
        ('{"name": "ok", "agents": 3}', "'agents' must be a path or a list of paths"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_bad_manifests(tmp_path: Path, manifest: str, message: str) -> None:
    _write(tmp_path / "p" / ".claude-plugin" / "plugin.json", manifest)
    catalog = ProfileCatalog.discover(
        tmp_path, home=tmp_path, user_dirs=[], plugin_dirs=[tmp_path / "p"]
    )
    (entry,) = [e for e in catalog.entries if e.scope == "plugin"]
    assert entry.error is not None and message in entry.error.message


def test_a_dir_that_is_not_a_plugin_is_an_error_entry(tmp_path: Path) -> None:
    catalog = ProfileCatalog.discover(
        tmp_path, home=tmp_path, user_dirs=[], plugin_dirs=[tmp_path / "x"]
    )
    (entry,) = [e for e in catalog.entries if e.scope == "plugin"]
    assert entry.error is not None and "not a plugin" in entry.error.message


def test_plugin_agents_list_and_agents_dir_add_up(tmp_path: Path) -> None:
    """As in Claude Code, listed paths add to the default agents/ dir; a dir may be listed."""
    plugin = tmp_path / "p"
    _write(
        plugin / ".claude-plugin" / "plugin.json",
        '{"name": "p", "agents": ["./extra", "./agents/a.md"]}',
    )
    _write(plugin / "agents" / "a.md", _profile_text("a"))
    _write(plugin / "extra" / "b.md", _profile_text(None))
    catalog = ProfileCatalog.discover(tmp_path, home=tmp_path, user_dirs=[], plugin_dirs=[plugin])
    assert sorted(e.name for e in catalog.entries if e.scope == "plugin") == ["p:a", "p:b"]


def test_plugins_rank_below_user_profiles(tmp_path: Path) -> None:
    plugin = tmp_path / "p"
    _write(plugin / ".claude-plugin" / "plugin.json", '{"name": "p"}')
    _write(plugin / "agents" / "x.md", _profile_text("x", "from the plugin"))
    _write(tmp_path / "user" / "x.md", _profile_text("p:x", "from the user"))
    catalog = ProfileCatalog.discover(
        tmp_path / "project",
        home=tmp_path,
        user_dirs=[ProfileDir(tmp_path / "user", "user", "subvisor")],
        plugin_dirs=[plugin],
    )
    assert catalog.resolve("p:x").description == "from the user"


# --- resolution (S-TOOL-2) ---


def test_resolution_normalises_unicode_case_and_separators() -> None:
    catalog = _fixture_catalog()
    assert catalog.resolve("research-日本語").name == FULLWIDTH_NAME
    assert catalog.resolve("GENERAL PURPOSE").name == "general-purpose"
    assert catalog.resolve("team/no_name").name == "team/no-name"


def test_unknown_names_list_the_launchable_profiles() -> None:
    catalog = _fixture_catalog()
    with pytest.raises(UnknownAgentTypeError) as caught:
        catalog.resolve("nobody")
    assert caught.value.available == tuple(sorted(catalog.profiles))
    assert "chat" not in caught.value.available


def test_ambiguous_names_are_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "u" / "a.md", _profile_text("code-reviewer"))
    _write(tmp_path / "u" / "b.md", _profile_text("code_reviewer"))
    catalog = ProfileCatalog.discover(
        tmp_path, home=tmp_path, user_dirs=[ProfileDir(tmp_path / "u", "user", "subvisor")]
    )
    assert catalog.resolve("code_reviewer").name == "code_reviewer"
    with pytest.raises(AmbiguousAgentTypeError, match="code-reviewer, code_reviewer"):
        catalog.resolve("Code Reviewer")


# --- subvisor agents --json ---


def test_to_json_says_where_each_profile_comes_from() -> None:
    catalog = _fixture_catalog("alpha")
    data = json.loads(json.dumps(catalog.to_json()))
    rows = {(row["name"], row["source"]): row for row in data["profiles"]}
    winner = rows[("reviewer", str(FIXTURES / "project/.subvisor/agents/reviewer.md"))]
    assert winner["scope"] == "project"
    assert winner["launchable"] is True
    assert winner["tools"] == ["Read", "Grep"]
    assert winner["model"] == "anthropic/claude-sonnet-4-5$high"
    assert len(winner["overrides"]) == 3
    broken = rows[("wrong-types", str(FIXTURES / "user/wrong-types.md"))]
    assert broken["error"]["line"] == 5 and broken["error"]["field"] == "maxTurns"
    assert broken["launchable"] is False and "tools" not in broken
    coder = rows[("subagents/coder", str(FIXTURES / "project/.opencode/agent/subagents/coder.md"))]
    assert coder["permission"] == {"bash": {"git status": "allow", "*": "deny"}, "edit": "ask"}
    assert coder["disallowed_tools"] == ["bash"]
    assert rows[("alpha:only-alpha", str(PLUGINS / "alpha/agents/only-alpha.md"))]["aliases"] == [
        "only-alpha"
    ]
    assert data["ignored"] == [
        {
            "path": str(FIXTURES / "user/README.md"),
            "reason": catalog.ignored[str(FIXTURES / "user/README.md")],
        }
    ]


def test_s_sec_3_a_profile_dir_linked_to_a_large_tree_is_walked_only_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository's `.claude/agents/all -> ..` (the project, a large tree) must not make
    every catalog load walk it all: the walk stops after `WALK_ENTRIES` entries and says
    so; what it read loads. (A link to `/` is not followed at all: tests/security.)"""
    monkeypatch.setattr(_profile_catalog, "WALK_ENTRIES", 50)
    big = tmp_path / "project" / "big"
    _write(big / "a-first.md", _profile_text("first"))
    for i in range(30):
        _write(big / f"d{i:02d}" / "x.md", _profile_text(f"deep{i}"))
    agents = tmp_path / "project" / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "all").symlink_to(big)
    catalog = ProfileCatalog.discover(tmp_path / "project", home=tmp_path / "h", user_dirs=[])
    names = [e.name for e in catalog.entries if e.scope == "project"]
    assert "first" in names and len(names) < 31
    assert "not scanned past 50 entries" in catalog.ignored[str(agents)]
