"""Real profiles written for Claude Code and opencode load unchanged (S-PROF-3).

The corpora in ``../shared/compat`` beside the repository (see its README) are loaded as plugins,
as a user dir and as a project dir. Every file must load; where a file has a
true defect it still loads if its harness loads it, with a warning saying
precisely what is wrong, and each such file is listed below with the reason.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from supervisor.profiles._builtin_profiles import BUILTIN_PROFILES
from supervisor.profiles._profile_catalog import ProfileCatalog, ProfileDir, ProfileEntry

# shared/ lies beside the checkout (here and in CI's fresh clone alike), maybe
# through a symlink; the catalog reports resolved paths, so resolve it too.
COMPAT = (Path(__file__).resolve().parents[2] / "shared" / "compat").resolve()
CATEGORIES = COMPAT / "claude-code-agents" / "categories"
OPENCODE_AGENTS = COMPAT / "opencode-agents" / ".opencode" / "agent"


@pytest.fixture(scope="module", autouse=True)
def _corpora_present() -> None:
    """The corpora are part of what CI checks: missing, every test here fails saying so."""
    if not CATEGORIES.is_dir() or not OPENCODE_AGENTS.is_dir():
        pytest.fail(
            f"the compatibility corpora are not at {COMPAT}: check out shared/ (with compat/) "
            f"beside this repository"
        )


CLAUDE_AGENT_COUNT = 158
CATEGORY_COUNT = 10

#: Files that are not strict YAML: the description is a plain value holding
#: ": " ("... Triggers on: 'GDPR', ..."). Claude Code quotes such a line and
#: retries, so they load; we do the same and warn on that line.
UNQUOTED_COLON_DESCRIPTIONS = {
    "04-quality-security/gdpr-ccpa-compliance.md",
    "07-specialized-domains/hipaa-compliance.md",
    "08-business-product/assumption-mapping.md",
    "08-business-product/backlog-grooming.md",
    "08-business-product/growth-loops.md",
    "10-research-analysis/ab-test-analysis.md",
    "10-research-analysis/cohort-analysis.md",
    "10-research-analysis/first-principles-thinking.md",
}
#: On disk in its category but missing from that plugin's plugin.json
#: ``agents`` list, so Claude Code does not load it as part of the plugin.
UNLISTED_IN_PLUGIN = {"06-developer-experience/docs-drift-editor.md"}
#: opencode files whose ``model`` has no provider part ("claude-4-sonnet");
#: opencode, like us, fails only when such an agent is launched (S-MODEL-1).
OPENCODE_MODEL_WITHOUT_PROVIDER = {
    "codebase-agent",
    "task-manager",
    "workflow-orchestrator",
    "subagents/build-agent",
    "subagents/coder-agent",
    "subagents/reviewer",
}
#: opencode files that write ``permissions``, which opencode ignores (it
#: reads ``permission``); the rules are applied, with a warning.
OPENCODE_PERMISSIONS_MISSPELLED = {
    "codebase-agent",
    "task-manager",
    "workflow-orchestrator",
    "subagents/build-agent",
    "subagents/codebase-pattern-analyst",
    "subagents/coder-agent",
    "subagents/documentation",
    "subagents/reviewer",
    "subagents/tester",
}
OPENCODE_PRIMARY = {"codebase-agent", "image-specialist", "task-manager", "workflow-orchestrator"}
OPENCODE_SUBAGENTS = {
    "subagents/build-agent",
    "subagents/codebase-pattern-analyst",
    "subagents/coder-agent",
    "subagents/documentation",
    "subagents/reviewer",
    "subagents/tester",
}
PARENT_TOOLS = ("Read", "Write", "Edit", "Glob", "Grep", "Bash", "LS", "WebFetch", "WebSearch")


def _plugin_dirs() -> list[Path]:
    return sorted(path for path in CATEGORIES.iterdir() if path.is_dir())


def _rel(entry: ProfileEntry) -> str:
    # category/file.md, in the corpus or in a project's copy of it.
    return _category_path(entry.source)


def _category_path(path: str) -> str:
    return "/".join(Path(path).parts[-2:])


def _claude_files() -> list[Path]:
    return sorted(p for p in CATEGORIES.glob("*/*.md") if p.name != "README.md")


def _assert_claude_warnings(entries: list[ProfileEntry]) -> None:
    for entry in entries:
        if _rel(entry) in UNQUOTED_COLON_DESCRIPTIONS:
            (warning,) = entry.warnings
            assert warning.startswith("line 3: the value of 'description' is not valid YAML")
            assert entry.profile is not None and "Triggers on: '" in entry.profile.description
        else:
            assert entry.warnings == (), _rel(entry)


@pytest.fixture(scope="module")
def plugins_only(tmp_path_factory: pytest.TempPathFactory) -> ProfileCatalog:
    tmp = tmp_path_factory.mktemp("plugins")
    return ProfileCatalog.discover(
        tmp / "project", home=tmp / "home", user_dirs=[], plugin_dirs=_plugin_dirs()
    )


@pytest.fixture(scope="module")
def as_user_dir(tmp_path_factory: pytest.TempPathFactory) -> ProfileCatalog:
    tmp = tmp_path_factory.mktemp("user")
    return ProfileCatalog.discover(
        tmp / "project", home=tmp / "home", user_dirs=[ProfileDir(CATEGORIES, "user", "claude")]
    )


def _project_with_corpora(project: Path, *, opencode: bool = True) -> Path:
    """``project`` whose .claude/agents (and .opencode/agent) hold copies of the corpora.

    Copies, not links: a project's profile dir may not resolve outside the
    project (S-SEC-3), and these load as a repository would ship them.
    """
    shutil.copytree(CATEGORIES, project / ".claude" / "agents")
    if opencode:
        shutil.copytree(OPENCODE_AGENTS, project / ".opencode" / "agent")
    return project


@pytest.fixture(scope="module")
def as_project(tmp_path_factory: pytest.TempPathFactory) -> ProfileCatalog:
    """A project whose .claude/agents and .opencode/agent are (copies of) the corpora."""
    project = _project_with_corpora(tmp_path_factory.mktemp("project"))
    return ProfileCatalog.discover(project, home=project / "home", user_dirs=[])


def test_the_corpus_is_what_these_tests_expect() -> None:
    assert len(_claude_files()) == CLAUDE_AGENT_COUNT
    assert len(_plugin_dirs()) == CATEGORY_COUNT
    assert len(list(OPENCODE_AGENTS.rglob("*.md"))) == len(OPENCODE_PRIMARY | OPENCODE_SUBAGENTS)


# --- Claude Code agents as plugins ---


def test_every_plugin_listed_agent_loads(plugins_only: ProfileCatalog) -> None:
    entries = [e for e in plugins_only.entries if e.scope == "plugin"]
    assert [e for e in entries if e.error is not None] == []
    listed = {
        (directory / item).resolve()
        for directory in _plugin_dirs()
        for item in json.loads((directory / ".claude-plugin/plugin.json").read_text())["agents"]
    }
    assert {Path(e.source).resolve() for e in entries} == listed
    assert len(entries) == CLAUDE_AGENT_COUNT - len(UNLISTED_IN_PLUGIN)
    assert {_rel(e) for e in entries}.isdisjoint(UNLISTED_IN_PLUGIN)
    _assert_claude_warnings(entries)


def test_plugin_profiles_are_named_plugin_colon_name(plugins_only: ProfileCatalog) -> None:
    """S-PROF-3: ``<plugin>:<name>`` with the name from plugin.json and the frontmatter."""
    for entry in (e for e in plugins_only.entries if e.scope == "plugin"):
        manifest = json.loads(
            (Path(entry.source).parent / ".claude-plugin/plugin.json").read_text()
        )
        assert entry.plugin == manifest["name"]
        assert entry.name == f"{manifest['name']}:{Path(entry.source).stem}"
    assert plugins_only.resolve("voltagent-lang:python-pro").description.startswith("Use this")


def test_every_bare_plugin_name_is_unique_so_each_gets_its_alias(
    plugins_only: ProfileCatalog,
) -> None:
    """S-PROF-3: no two categories share an agent name and none clashes with a built-in."""
    assert len(plugins_only.aliases) == CLAUDE_AGENT_COUNT - len(UNLISTED_IN_PLUGIN)
    for alias, name in plugins_only.aliases.items():
        assert name.endswith(f":{alias}")
        assert plugins_only.resolve(alias).name == name
    assert plugins_only.resolve("Python_Pro").name == "voltagent-lang:python-pro"
    assert set(plugins_only.profiles) == set(BUILTIN_PROFILES) | set(plugins_only.aliases.values())


def test_plugin_aliases_give_way_to_user_and_project_profiles(
    plugins_only: ProfileCatalog, tmp_path: Path
) -> None:
    """S-PROF-3: a bare alias only when it clashes with no user or project profile."""
    project = _project_with_corpora(tmp_path / "project", opencode=False)
    both = ProfileCatalog.discover(
        project, home=tmp_path / "home", user_dirs=[], plugin_dirs=_plugin_dirs()
    )
    assert dict(both.aliases) == {}
    assert both.resolve("python-pro").scope == "project"
    assert both.resolve("voltagent-lang:python-pro").scope == "plugin"


# --- Claude Code agents as a user dir and as a project dir ---


@pytest.mark.parametrize("catalog_name", ["as_user_dir", "as_project"])
def test_all_158_claude_code_agents_load(catalog_name: str, request: pytest.FixtureRequest) -> None:
    catalog: ProfileCatalog = request.getfixturevalue(catalog_name)
    entries = [e for e in catalog.entries if e.dialect == "claude"]
    assert [str(e.error) for e in entries if e.error is not None] == []
    assert len(entries) == CLAUDE_AGENT_COUNT
    assert all(e.launchable for e in entries if e.name != "workflow-orchestrator")
    assert {e.name for e in entries} == {p.stem for p in _claude_files()}
    _assert_claude_warnings(entries)
    readmes = {f"{d.name}/README.md" for d in _plugin_dirs()}
    assert {_category_path(p) for p in catalog.ignored} >= readmes


def test_claude_code_fields_are_honoured(as_user_dir: ProfileCatalog) -> None:
    python_pro = as_user_dir.resolve("python-pro")
    assert python_pro.tools is not None and "Read" in python_pro.tools
    assert python_pro.model in {"sonnet", "opus", "haiku", "inherit"}
    assert python_pro.prompt.startswith("You are")
    assert set(python_pro.resolve_tools(PARENT_TOOLS)) <= set(python_pro.tools)
    for profile in as_user_dir.profiles.values():
        assert profile.permission_mode is None
        assert profile.description


def test_no_corpus_file_sets_permission_mode_so_all_load_as_project(
    as_project: ProfileCatalog,
) -> None:
    """S-PROF-4 would reject a project profile with permissionMode; none of these has one."""
    assert [e for e in as_project.entries if e.error is not None] == []


# --- opencode agents ---


def test_opencode_nested_paths_become_names(as_project: ProfileCatalog) -> None:
    names = {e.name for e in as_project.entries if e.dialect == "opencode"}
    assert names == OPENCODE_PRIMARY | OPENCODE_SUBAGENTS
    assert as_project.resolve("subagents/coder-agent").name == "subagents/coder-agent"


def test_opencode_primary_agents_are_listed_but_not_launchable(as_project: ProfileCatalog) -> None:
    for entry in as_project.entries:
        if entry.dialect != "opencode":
            continue
        assert entry.error is None
        if entry.name in OPENCODE_PRIMARY:
            assert entry.not_launchable is not None
            assert "mode: primary" in entry.not_launchable
        else:
            assert entry.launchable, entry.name
    # The opencode primary 'workflow-orchestrator' replaces the Claude Code
    # one of the same name: both are project profiles, opencode's dir is later.
    (claude, opencode) = [e for e in as_project.entries if e.name == "workflow-orchestrator"]
    assert claude.overridden_by == opencode.source


def test_opencode_warnings_are_exactly_the_known_defects(as_project: ProfileCatalog) -> None:
    for entry in (e for e in as_project.entries if e.dialect == "opencode"):
        warnings = list(entry.warnings)
        if entry.name in OPENCODE_PERMISSIONS_MISSPELLED:
            assert "'permissions' is not an opencode field" in warnings.pop(0)
        if entry.name in OPENCODE_MODEL_WITHOUT_PROVIDER:
            assert "model string 'claude-4-sonnet' has no provider part" in warnings.pop(0)
        assert warnings == [], entry.name


def test_opencode_tools_maps_and_permissions_are_honoured(as_project: ProfileCatalog) -> None:
    reviewer = as_project.resolve("subagents/reviewer")
    assert reviewer.tool_switches == {
        "read": True,
        "grep": True,
        "glob": True,
        "bash": False,
        "edit": False,
        "write": False,
    }
    resolved = reviewer.resolve_tools(PARENT_TOOLS)
    assert {"Bash", "Edit", "Write"}.isdisjoint(resolved)
    assert {"Read", "Grep", "Glob"} <= set(resolved)
    assert reviewer.permission == {"bash": {"*": "deny"}, "edit": {"**/*": "deny"}}
    build = as_project.resolve("subagents/build-agent")
    assert isinstance(build.permission, dict)
    assert list(build.permission["bash"]) == [
        "tsc",
        "npm run build",
        "yarn build",
        "pnpm build",
        "*",
    ]
    image = next(e for e in as_project.entries if e.name == "image-specialist").profile
    assert image is not None
    assert image.permission == {"edit": "deny", "bash": "deny", "webfetch": "allow"}
    coder = as_project.resolve("subagents/coder-agent")
    assert (coder.model_temperature, coder.mode) == (0, "subagent")
    assert as_project.resolve("subagents/tester").model is None
