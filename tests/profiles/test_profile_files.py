"""Parsing one profile file (S-PROF-2, S-PROF-4, S-PROF-6, S-MODEL-1).

Claude Code and opencode files load as they are; every failure is a
``ProfileError`` naming the file, the line of the offending key and the field.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.profiles._profile import AgentProfile
from supervisor.profiles._profile_files import (
    MAX_PROFILE_BYTES,
    NotAProfileError,
    ProfileDialect,
    ProfileError,
    parse_profile_file,
    parse_profile_text,
)

# "research" in fullwidth letters (U+FF52 ...), written so that no source line
# holds characters that look like ASCII ones.
FULLWIDTH_NAME = "".join(chr(ord(char) + 0xFEE0) for char in "research") + "-日本語"
FIXTURES = Path(__file__).parent / "fixtures" / "profiles"
PARENT_TOOLS = ("Read", "Write", "Edit", "Glob", "Grep", "Bash", "LS", "WebFetch")


def _parse(
    text: str,
    *,
    scope: Any = "user",
    dialect: ProfileDialect = "subvisor",
    default_name: str = "from-path",
    plugin: str | None = None,
) -> AgentProfile:
    return parse_profile_text(
        text,
        source="/agents/x.md",
        scope=scope,
        default_name=default_name,
        dialect=dialect,
        plugin=plugin,
    )


def _error(text: str, **kwargs: Any) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        _parse(text, **kwargs)
    return caught.value


# --- Claude Code files (S-PROF-2) ---

CLAUDE_FILE = """\
---
name: python-pro
description: "Use when writing Python 3.11+ code."
tools: Read, Write, Edit, Bash, Glob, Grep
model: sonnet
color: blue
---

You are a senior Python developer.

Write idiomatic code.
"""


def test_claude_code_file_loads_with_its_fields() -> None:
    profile = _parse(CLAUDE_FILE, dialect="claude")
    assert profile.name == "python-pro"
    assert profile.description == "Use when writing Python 3.11+ code."
    assert profile.tools == ("Read", "Write", "Edit", "Bash", "Glob", "Grep")
    assert profile.color == "blue"
    assert (profile.source, profile.scope) == ("/agents/x.md", "user")
    assert profile.warnings == ()


def test_the_body_is_the_system_prompt() -> None:
    """S-PROF-2: everything after the closing ``---``, surrounding blank lines removed."""
    profile = _parse(CLAUDE_FILE)
    assert profile.prompt == "You are a senior Python developer.\n\nWrite idiomatic code."


@pytest.mark.parametrize("model", ["sonnet", "opus", "haiku", "inherit", "main"])
def test_claude_model_aliases_are_kept_and_mean_inherit(model: str) -> None:
    """S-PROF-6: the host reads these as inherit; the loader keeps them and does not warn."""
    profile = _parse(f"---\nname: a\ndescription: d\nmodel: {model}\n---\nBody\n")
    assert profile.model == model
    assert profile.warnings == ()


def test_a_model_without_provider_loads_with_a_warning() -> None:
    """S-MODEL-1: an unresolvable model is an error at launch, so say so now."""
    profile = _parse("---\nname: a\ndescription: d\n\nmodel: claude-4-sonnet\n---\nBody\n")
    assert profile.model == "claude-4-sonnet"
    (warning,) = profile.warnings
    assert warning.startswith("line 5: model:")
    assert "anthropic:claude-4-sonnet" in warning


def test_tools_as_a_yaml_list() -> None:
    profile = _parse("---\nname: a\ndescription: d\ntools:\n  - Read\n  - grep\n---\nB\n")
    assert profile.tools == ("Read", "grep")
    assert profile.resolve_tools(PARENT_TOOLS) == ("Read", "Grep")


def test_every_s_prof_2_field_is_read() -> None:
    text = """\
---
name: full
description: Every field
tools: Read, Grep
disallowedTools: [Bash]
model: openai:gpt-4o$high
skills: review, deploy
color: purple
permissionMode: acceptEdits
maxTurns: 7
background: yes
memory: user
mcpServers: [github]
---
Body
"""
    profile = _parse(text)
    assert profile.model_dump(include={"disallowed_tools", "skills", "mcp_servers"}) == {
        "disallowed_tools": ("Bash",),
        "skills": ("review", "deploy"),
        "mcp_servers": ("github",),
    }
    assert (profile.model, profile.color, profile.permission_mode) == (
        "openai:gpt-4o$high",
        "purple",
        "acceptEdits",
    )
    assert (profile.max_turns, profile.background, profile.memory) == (7, True, "user")
    assert profile.warnings == ()


# --- names (S-PROF-3) ---


def test_subvisor_file_without_name_is_named_after_its_path() -> None:
    profile = _parse("---\ndescription: d\n---\nB\n", default_name="team/reviewer")
    assert profile.name == "team/reviewer"
    assert profile.warnings == ()


def test_claude_code_file_without_name_warns_that_claude_would_skip_it() -> None:
    profile = _parse("---\ndescription: d\n---\nB\n", dialect="claude", default_name="helper")
    assert profile.name == "helper"
    assert "Claude Code requires name" in profile.warnings[0]


def test_opencode_file_is_named_after_its_path_without_warning() -> None:
    profile = _parse("---\ndescription: d\n---\nB\n", dialect="opencode", default_name="sub/a")
    assert (profile.name, profile.warnings) == ("sub/a", ())


def test_plugin_profiles_are_namespaced() -> None:
    """S-PROF-3: ``<plugin>:<name>``."""
    profile = _parse("---\nname: shared\ndescription: d\n---\nB\n", plugin="alpha", scope="plugin")
    assert profile.name == "alpha:shared"
    nameless = _parse("---\ndescription: d\n---\nB\n", plugin="alpha", default_name="stem")
    assert nameless.name == "alpha:stem"


def test_unicode_names_and_text_survive() -> None:
    profile = parse_profile_file(
        FIXTURES / "user" / "unicode.md", scope="user", default_name="unicode"
    )
    assert profile.name == FULLWIDTH_NAME
    assert profile.description == "Recherche à la française — naïve Ünïcödé 🔍"
    assert "日本語で答えてください" in profile.prompt


# --- warnings: accepted but noted ---


def test_unknown_fields_are_warnings_with_line_and_hint() -> None:
    """An unknown field is kept as a warning, never an error."""
    profile = parse_profile_file(
        FIXTURES / "user" / "unknown-fields.md", scope="user", default_name="x"
    )
    assert profile.name == "unknown-fields"
    assert profile.max_turns is None
    assert profile.warnings == (
        "line 4: unknown field 'effort' ignored",
        "line 5: unknown field 'max_turns' ignored (did you mean 'maxTurns'?)",
        "line 6: unknown field 'hooks' ignored",
    )


@pytest.mark.parametrize("key", ["scope", "source", "prompt", "warnings"])
def test_a_file_cannot_set_its_own_scope_source_or_prompt(key: str) -> None:
    """S-PROF-4: a project file claiming ``scope: user`` stays a project profile."""
    profile = _parse(f"---\nname: a\ndescription: d\n{key}: user\n---\nBody\n", scope="project")
    assert (profile.scope, profile.source, profile.prompt) == ("project", "/agents/x.md", "Body")
    assert profile.warnings[0] == f"line 4: unknown field '{key}' ignored"


def test_duplicate_keys_warn_and_the_last_wins() -> None:
    profile = _parse("---\nname: a\ndescription: d\nmaxTurns: 3\nmaxTurns: 5\n---\nB\n")
    assert profile.max_turns == 5
    assert profile.warnings == (
        "line 5: 'maxTurns' is set twice (first on line 4); the last one is used",
    )


def test_an_empty_body_warns() -> None:
    profile = _parse("---\nname: a\ndescription: d\n---\n\n")
    assert (profile.prompt, profile.warnings) == (
        "",
        ("the body is empty: the subagent gets no system prompt of its own",),
    )


def test_claude_code_unquoted_colon_values_load_as_claude_code_reads_them() -> None:
    """Plain values holding ': ' are invalid YAML; Claude Code quotes the line and retries."""
    text = (
        "---\nname: gdpr\ndescription: Use for GDPR. Triggers on: 'GDPR', \"CCPA\" #1\n"
        "tools: Read\n---\nB\n"
    )
    profile = _parse(text, dialect="claude")
    assert profile.description == "Use for GDPR. Triggers on: 'GDPR', \"CCPA\" #1"
    assert profile.tools == ("Read",)
    (warning,) = profile.warnings
    assert warning.startswith("line 3: the value of 'description' is not valid YAML")


# --- errors: file, line, field ---


@pytest.mark.parametrize(
    ("frontmatter", "line", "field", "fragment"),
    [
        ("maxTurns: many", 4, "maxTurns", "valid integer"),
        ("maxTurns: 0", 4, "maxTurns", "greater than or equal to 1"),
        ("tools: 42", 4, "tools", "valid tuple"),
        ("tools:\n  - Read\n  - {Bash: true}", 6, "tools", "valid string"),
        ("background: maybe", 4, "background", "valid boolean"),
        ("memory: forever", 4, "memory", "'user', 'project' or 'local'"),
        ("mode: sideways", 4, "mode", "'subagent', 'primary' or 'all'"),
        ("temperature: hot", 4, "temperature", "valid number"),
        ("steps: -2", 4, "steps", "greater than or equal to 1"),
        ("color: [red]", 4, "color", "valid string"),
        ("permission:\n  edit: ask\n  bash:\n    'git *': sometimes", 7, "permission", "allow"),
        ("tools:\n  read: true\n  write: no thanks", 6, "tools", "true or false"),
        ("permissions: deny-ish", 4, "permissions", "allow"),
    ],
)
def test_wrong_types_name_file_line_and_field(
    frontmatter: str, line: int, field: str, fragment: str
) -> None:
    error = _error(f"---\nname: a\ndescription: d\n{frontmatter}\n---\nBody\n")
    assert (error.path, error.line, error.field) == ("/agents/x.md", line, field)
    assert fragment in error.message
    assert str(error).startswith(f"/agents/x.md:{line}: {field}: ")
    assert error.profile_name == "a"


def test_name_must_be_text() -> None:
    error = _error("---\ndescription: d\nname: 42\n---\nB\n")
    assert (error.line, error.field) == (3, "name")
    assert error.profile_name == "from-path"


def test_missing_description_is_an_error() -> None:
    error = _error("---\nname: a\n---\nB\n")
    assert (error.line, error.field) == (1, "description")
    assert "required field 'description' is missing" in error.message


def test_several_problems_are_all_reported() -> None:
    error = _error("---\nname: a\ndescription: d\nmaxTurns: x\nbackground: maybe\n---\nB\n")
    assert (error.line, error.field) == (4, "maxTurns")
    assert "line 5: background:" in error.message


def test_invalid_yaml_points_at_the_construct_and_its_key() -> None:
    error = parse_error(FIXTURES / "user" / "bad-yaml.md")
    assert (error.line, error.field) == (4, "tools")
    assert "while parsing a flow sequence (line 4" in error.message
    assert "(line 5, column 6)" in error.message


def parse_error(path: Path, scope: Any = "user") -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        parse_profile_file(path, scope=scope, default_name=path.stem)
    return caught.value


def test_yaml_that_quoting_cannot_fix_is_still_an_error() -> None:
    error = _error("---\nname: a\ndescription: [unclosed: x\n---\nB\n")
    assert error.line == 3
    assert error.field == "description"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("---\nname: a\ndescription: d\nBody without a closing line\n", 1, "never closed"),
        ("---\n- name\n- description\n---\nB\n", 2, "must be a mapping"),
        ("---\nname: a\ndescription: d\non: true\n---\nB\n", 4, "must be text"),
        ("---\nname: a\ndescription: d\nwhen: 2024-13-01\n---\nB\n", None, "month"),
        ("---\nname: !!python/object:os.system x\n---\nB\n", 2, "constructor"),
    ],
)
def test_malformed_frontmatter_is_a_profile_error(
    text: str, line: int | None, fragment: str
) -> None:
    error = _error(text)
    assert error.line == line
    assert fragment in error.message


def test_a_file_without_frontmatter_is_not_a_profile() -> None:
    with pytest.raises(NotAProfileError, match="no YAML frontmatter"):
        _parse("# A README\n\nNot a profile.\n")


def test_crlf_line_endings_and_a_bom_are_fine() -> None:
    text = "\ufeff---\r\nname: a\r\ndescription: d\r\nmaxTurns: x\r\n---\r\nBody\r\n"
    assert _error(text).line == 4
    profile = _parse(text.replace("maxTurns: x", "maxTurns: 2"))
    assert (profile.prompt, profile.max_turns) == ("Body", 2)


def test_files_that_are_not_utf8_or_too_large(tmp_path: Path) -> None:
    latin = tmp_path / "latin.md"
    latin.write_bytes(b"---\nname: a\ndescription: caf\xe9\n---\nB\n")
    error = parse_error(latin)
    assert error.line == 3
    assert "not UTF-8 text: byte 0xe9" in error.message
    huge = tmp_path / "huge.md"
    huge.write_bytes(b"---\nname: a\ndescription: d\n---\n" + b"x" * MAX_PROFILE_BYTES)
    assert "larger than" in parse_error(huge).message
    assert "cannot read" in parse_error(tmp_path / "missing.md").message


# --- S-PROF-4: project profiles and permissionMode ---


def test_project_profile_with_permission_mode_is_rejected_at_parse_time() -> None:
    """S-PROF-4: the error names the file, the line and the field."""
    error = parse_error(FIXTURES / "project" / ".subvisor" / "agents" / "escalate.md", "project")
    assert (error.line, error.field) == (5, "permissionMode")
    assert "project-level profile may not set permissionMode" in error.message
    assert error.profile_name == "escalate"


def test_user_profile_may_set_permission_mode() -> None:
    profile = parse_profile_file(FIXTURES / "user" / "reviewer.md", scope="user", default_name="r")
    assert profile.permission_mode == "acceptEdits"


def test_plugin_permission_mode_is_ignored_with_a_warning() -> None:
    """As in Claude Code, plugin profiles cannot set permissionMode."""
    profile = _parse(
        "---\nname: a\ndescription: d\npermissionMode: bypassPermissions\n---\nB\n",
        scope="plugin",
        plugin="p",
    )
    assert profile.permission_mode is None
    assert "permissionMode ignored" in profile.warnings[0]


# --- opencode files ---

OPENCODE_FILE = """\
---
description: "Executes coding subtasks"
mode: subagent
model: anthropic/claude-sonnet-4-20250514
temperature: 0.2
steps: 12
tools:
  read: true
  write: false
  bash: false
  task: true
permission:
  bash:
    "git status": allow
    "*": deny
  edit: ask
---
You code.
"""


def test_opencode_fields_mean_what_opencode_means() -> None:
    profile = _parse(OPENCODE_FILE, dialect="opencode", default_name="subagents/coder")
    assert profile.name == "subagents/coder"
    assert (profile.mode, profile.model_temperature, profile.max_turns) == ("subagent", 0.2, 12)
    assert profile.model == "anthropic/claude-sonnet-4-20250514"
    assert profile.is_subagent
    assert profile.warnings == ()


def test_opencode_tools_map_disallows_false_entries_and_is_kept() -> None:
    """A tools map switches tools: false removes them, true leaves them as inherited."""
    profile = _parse(OPENCODE_FILE, dialect="opencode")
    assert profile.tools is None
    assert profile.disallowed_tools == ("write", "bash")
    assert profile.tool_switches == {"read": True, "write": False, "bash": False, "task": True}
    assert profile.resolve_tools(PARENT_TOOLS) == ("Read", "Edit", "Glob", "Grep", "LS", "WebFetch")


def test_opencode_tools_map_adds_to_disallowed_tools() -> None:
    profile = _parse("---\ndescription: d\ndisallowedTools: Grep\ntools:\n  bash: false\n---\nB\n")
    assert profile.disallowed_tools == ("Grep", "bash")


def test_opencode_permission_rules_are_kept_in_order() -> None:
    """S-POL-2: rules are evaluated in order, so their order must survive."""
    profile = _parse(OPENCODE_FILE, dialect="opencode")
    assert profile.permission == {"bash": {"git status": "allow", "*": "deny"}, "edit": "ask"}
    assert isinstance(profile.permission, dict)
    assert list(profile.permission["bash"]) == ["git status", "*"]


def test_opencode_permission_may_be_one_action() -> None:
    assert _parse("---\ndescription: d\npermission: deny\n---\nB\n").permission == "deny"


def test_permissions_spelling_is_applied_with_a_warning() -> None:
    """opencode ignores ``permissions``; its denials are applied rather than dropped."""
    profile = _parse(
        "---\ndescription: d\npermissions:\n  bash: deny\n  edit: deny\npermission:\n"
        "  edit: ask\n---\nB\n",
        dialect="opencode",
    )
    assert profile.permission == {"bash": "deny", "edit": "ask"}
    assert profile.warnings[0].startswith("line 3: 'permissions' is not an opencode field")


@pytest.mark.parametrize(
    ("keys", "turns", "ignored"),
    [
        ("maxTurns: 3\nsteps: 9", 3, "steps"),
        ("steps: 9\nmaxSteps: 4", 9, "maxSteps"),
        ("maxSteps: 4\nmaxTurns: 3", 3, "maxSteps"),
    ],
)
def test_turn_limits_written_twice_keep_the_most_specific(
    keys: str, turns: int, ignored: str
) -> None:
    profile = _parse(f"---\ndescription: d\n{keys}\n---\nB\n")
    assert profile.max_turns == turns
    assert f"'{ignored}' ignored" in profile.warnings[0]


@pytest.mark.parametrize(("mode", "subagent"), [("primary", False), ("all", True)])
def test_opencode_primary_agents_are_not_subagents(mode: str, subagent: bool) -> None:
    assert _parse(f"---\ndescription: d\nmode: {mode}\n---\nB\n").is_subagent is subagent


def test_opencode_disable_switches_a_profile_off() -> None:
    profile = _parse("---\ndescription: d\ndisable: true\n---\nB\n")
    assert profile.disabled and not profile.is_subagent


# --- properties ---

_field_names = st.sampled_from(["name", "description", "tools", "model", "maxTurns", "x-y", "on"])
_yaml_text = st.text(
    alphabet=st.sampled_from(string.printable + "ü日:-[]{}#&*!|>'\"%@`\t"), max_size=80
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=200))
def test_any_text_parses_or_raises_profile_error(text: str) -> None:
    try:
        profile = _parse(text)
    except ProfileError:
        return
    assert isinstance(profile, AgentProfile)


@settings(max_examples=300)
@given(
    lines=st.lists(
        st.one_of(
            st.builds(lambda k, v: f"{k}: {v}", _field_names, _yaml_text),
            _yaml_text,
        ),
        max_size=8,
    ),
    scope=st.sampled_from(["user", "project", "plugin"]),
    dialect=st.sampled_from(["subvisor", "claude", "opencode"]),
)
def test_any_frontmatter_parses_or_raises_profile_error(
    lines: list[str], scope: Any, dialect: ProfileDialect
) -> None:
    text = "---\n" + "\n".join(lines) + "\n---\nBody\n"
    try:
        profile = _parse(text, scope=scope, dialect=dialect)
    except ProfileError as error:
        assert error.path == "/agents/x.md"
        file_lines = text.replace("\r\n", "\n").replace("\r", "\n").count("\n")
        assert error.line is None or 1 <= error.line <= file_lines
        return
    assert profile.scope == scope


_names = st.text(
    alphabet=st.characters(categories=["L", "N"], include_characters="-_."), min_size=1, max_size=20
)
_tool_names = st.lists(
    st.sampled_from(["Read", "Write", "Grep", "mcp__github__search"]), max_size=4
)


@given(
    name=_names,
    # Not YAML line breaks (NEL, U+2028/9) nor controls: PyYAML's own dump and
    # load do not round-trip those inside a scalar.
    description=st.text(
        alphabet=st.characters(exclude_categories=["Cc", "Cs", "Zl", "Zp"]),
        min_size=1,
        max_size=60,
    ).filter(lambda s: s.strip() == s and s),
    tools=st.none() | _tool_names,
    max_turns=st.none() | st.integers(min_value=1, max_value=500),
    background=st.booleans(),
    memory=st.none() | st.sampled_from(["user", "project", "local"]),
    body=st.text(max_size=200).map(str.strip),
)
def test_valid_fields_round_trip(
    name: str,
    description: str,
    tools: list[str] | None,
    max_turns: int | None,
    background: bool,
    memory: str | None,
    body: str,
) -> None:
    """S-PROF-2: whatever valid values a file holds, the profile has exactly them."""
    fields: dict[str, Any] = {"name": name, "description": description, "background": background}
    if tools is not None:
        fields["tools"] = tools
    if max_turns is not None:
        fields["maxTurns"] = max_turns
    if memory is not None:
        fields["memory"] = memory
    text = f"---\n{yaml.safe_dump(fields, allow_unicode=True)}---\n{body}\n"
    profile = _parse(text)
    assert profile.name == name.strip()
    assert profile.description == description
    assert profile.tools == (None if tools is None else tuple(tools))
    assert (profile.max_turns, profile.background, profile.memory) == (
        max_turns,
        background,
        memory,
    )
    # Line endings are normalised, as for the whole file.
    assert profile.prompt == body.replace("\r\n", "\n").replace("\r", "\n").strip()


@given(
    before=st.lists(st.sampled_from(["color: red", "model: inherit", "skills: [a]"]), max_size=4),
    bad=st.sampled_from(["maxTurns: lots", "background: sometimes", "tools: 3", "mode: x"]),
    after=st.lists(st.sampled_from(["color: red", "model: inherit"]), max_size=3),
)
def test_a_wrong_value_is_reported_on_its_own_line(
    before: list[str], bad: str, after: list[str]
) -> None:
    lines = ["name: a", "description: d", *before, bad, *after]
    error = _error("---\n" + "\n".join(lines) + "\n---\nB\n")
    assert error.line == lines.index(bad) + 2
    assert error.field == bad.split(":")[0]


# --- cpus: what a subagent's worker claims (S-DIST-1) ---


@given(cpus=st.floats(min_value=0.01, max_value=4096, allow_nan=False) | st.integers(1, 4096))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cpus_reads_a_positive_number_whole_or_fractional(cpus: float) -> None:
    """``cpus: 2`` or ``cpus: 0.5`` is the claim its worker carries (as Ray reads CPUs)."""
    profile = _parse(f"---\nname: a\ndescription: d\ncpus: {cpus!r}\n---\nBody\n")
    assert profile.cpus == cpus


_BAD_CPUS = (
    st.sampled_from(["0", "-1", "-0.5", ".nan", ".inf", "-.inf", "true", "false", "'2'", "two"])
    | st.floats(max_value=0, allow_nan=False, allow_infinity=False).map(repr)
    | st.integers(max_value=0).map(str)
    | st.lists(st.integers(1, 8), max_size=2).map(str)
    | st.text(string.ascii_letters, min_size=1, max_size=8).filter(
        lambda word: (
            word.lower() not in {"null", "nan", "inf", "true", "false", "yes", "no"}
            and word.lower() not in {"on", "off", "y", "n"}
        )
    )
)


@given(value=_BAD_CPUS)
def test_a_bad_cpus_is_a_one_line_profile_error(value: str) -> None:
    """Zero, negative, not finite, a bool or a string: one line naming file, line and field."""
    error = _error(f"---\nname: a\ndescription: d\ncpus: {value}\n---\nBody\n")
    assert (error.line, error.field) == (4, "cpus")
    assert "\n" not in str(error)
    assert str(error).startswith("/agents/x.md:4: cpus: ")


# --- frontmatter nested thousands deep (S-PROF-2) ---


@pytest.mark.parametrize(
    "nested",
    ["[" * 3000, "".join(f"\n{' ' * level}k{level}:" for level in range(3000)) + " x"],
    ids=["flow", "block"],
)
def test_frontmatter_nested_thousands_deep_is_refused_after_bounded_work(
    nested: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-PROF-2: a frontmatter of collections nested 3000 deep (a file of ``[``) is one
    error naming the nesting, found after at most MAX_DEPTH levels of parser events.
    Before, the pure Python parser read every level, at a cost per level that grows with
    the depth (40 KB of ``[`` stalled every `run` and `agents` for 46 s)."""
    from supervisor.files import _untrusted_yaml

    events = 0
    parse = yaml.parse

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal events
        for event in parse(*args, **kwargs):
            events += 1
            yield event

    monkeypatch.setattr(_untrusted_yaml.yaml, "parse", counted)
    error = _error(f"---\nname: deep\ndescription: d\nnested: {nested}\n---\nBody.\n")
    assert f"nested more than {_untrusted_yaml.MAX_DEPTH} levels deep" in str(error)
    assert "\n" not in str(error)
    # The first lines' events, then a start (and a key, in block style) per level.
    assert events <= 2 * _untrusted_yaml.MAX_DEPTH + 10
