"""S-SEC-9: Bash rules see through wrappers and see redirections, in a real subagent.

Each attack runs in a ``full`` sandbox, where the kernel would let it through:
only the permission rules stand between the command and the file. The
sandbox, not these rules, is the boundary (README, Permissions); these tests
hold the rules to what a lexer can see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.attack import bash_attack

DENY_RM = {"*": "allow", "bash": {"*": "allow", "rm *": "deny"}}
DENIED_BY_RM_RULE = "is denied by the rule bash 'rm *' -> deny"

WRAPPED_RM = [
    "/bin/rm victim",
    "command rm victim",
    "env rm victim",
    "nice -n 5 rm victim",
    "timeout 5 rm victim",
    "sudo rm victim",
    "echo victim | xargs rm",
    "sudo env FOO=1 nice -n 5 /usr/bin/rm -f victim",
    "sh -c 'rm victim'",
    "\\rm victim",
]


def _project(tmp_path: Path, *files: str) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for name in files:
        (project / name).write_text(f"{name}\n")
    return project


async def test_s_sec_9_wrapped_rm_is_denied_by_an_rm_rule(tmp_path: Path) -> None:
    """S-SEC-9: with ``rm *`` denied, no wrapper or spelling of rm removes the victim, and
    each tool result names the rule that denied it."""
    project = _project(tmp_path, "victim")
    attack = await bash_attack(
        tmp_path,
        [*WRAPPED_RM, "ls victim"],
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission=DENY_RM,
    )
    assert (project / "victim").exists()
    for index, command in enumerate(WRAPPED_RM):
        assert DENIED_BY_RM_RULE in attack.output(index), (command, attack.output(index))
    # Only rm is denied: the same file is listed by an allowed command.
    assert "victim" in attack.output(len(WRAPPED_RM))
    assert "denied" not in attack.output(len(WRAPPED_RM))


async def test_s_sec_9_control_rm_runs_where_no_rule_denies_it(tmp_path: Path) -> None:
    """Control: the same sandbox lets ``rm`` and a wrapped ``rm`` remove files."""
    project = _project(tmp_path, "other", "another")
    attack = await bash_attack(
        tmp_path,
        ["rm other", "echo another | xargs /bin/rm"],
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission={"*": "allow"},
    )
    assert not (project / "other").exists(), attack.output(0)
    assert not (project / "another").exists(), attack.output(1)


@pytest.mark.parametrize(
    ("external_directory", "refusal"),
    [
        ("deny", "is denied by the rule external_directory '*' -> deny"),
        # Nobody can approve in this session: the ask is refused, with how to allow it.
        ("ask", "nobody can approve in this session"),
    ],
)
async def test_s_sec_9_redirect_outside_the_project_needs_external_directory(
    tmp_path: Path, external_directory: str, refusal: str
) -> None:
    """S-SEC-9: ``echo x > <outside>``, ``>>``, ``2>``, ``&>`` and ``tee`` are edits outside the
    project: external_directory refuses them and the file is never written."""
    project = _project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    commands = [
        f"echo x > {outside}/a.txt",
        f"echo x >> {outside}/b.txt",
        f"ls /nonexistent 2> {outside}/c.txt",
        f"echo x &>{outside}/d.txt",
        f"echo x | sudo tee {outside}/e.txt",
        f"echo x | tee -a {outside}/f.txt",
        "echo x > /dev/null && echo sink-ok",
    ]
    attack = await bash_attack(
        tmp_path,
        commands,
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission={"*": "allow", "external_directory": external_directory},
    )
    assert sorted(outside.iterdir()) == []
    for index, command in enumerate(commands[:-1]):
        assert refusal in attack.output(index), (command, attack.output(index))
    # A device sink is no edit: nothing to refuse.
    assert "sink-ok" in attack.output(len(commands) - 1)


async def test_s_sec_9_control_redirect_outside_runs_when_allowed(tmp_path: Path) -> None:
    """Control: with external_directory allowed, the same redirection writes the file."""
    project = _project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    await bash_attack(
        tmp_path,
        [f"echo x > {outside}/a.txt"],
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission={"*": "allow"},
    )
    assert (outside / "a.txt").read_text() == "x\n"


async def test_s_sec_9_redirect_inside_the_project_is_an_edit(tmp_path: Path) -> None:
    """S-SEC-9: an ``edit`` deny on a project file holds against ``>`` and ``tee`` as it
    holds against Write; other files stay writable."""
    project = _project(tmp_path, "protected.txt")
    attack = await bash_attack(
        tmp_path,
        ["echo pwned > protected.txt", "echo pwned | tee protected.txt", "echo ok > free.txt"],
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission={"*": "allow", "edit": {"*": "allow", "protected.txt": "deny"}},
    )
    assert (project / "protected.txt").read_text() == "protected.txt\n"
    for index in (0, 1):
        assert "is denied by the rule edit 'protected.txt' -> deny" in attack.output(index)
    assert (project / "free.txt").read_text() == "ok\n"


# bash "*" asks (nobody can approve: refused), "git status *" is allowed, "rm *" denied.
GIT_STATUS_ONLY: dict[str, Any] = {
    "*": "allow",
    "bash": {"*": "ask", "git status *": "allow", "rm *": "deny"},
}

# Lines an allowed ``git status`` fronts, whose ``rm`` bash runs: the lexer once took ``<<`` in
# ``$[..]``, ``${..}`` and ``((..))`` for a here-document, dropped an unquoted here-document's
# body, and copied ``$((..))`` as text.
HIDDEN_RM = [
    "git status $[1<<2]\nrm -rf victim",
    "git status ${x:-1<<2}\nrm -rf victim",
    "(( x = 1<<2 ))\nrm -rf victim",
    "git status <<EOF\n$(rm -rf victim)\nEOF",
    "git status $(( $(rm -rf victim) 0 ))",
    "git status $((rm -rf victim) )",
]


async def test_s_sec_9_an_allowed_command_hides_no_denied_one(tmp_path: Path) -> None:
    """S-SEC-9, S-POL-2: with ``git status *`` allowed and ``rm *`` denied, no arithmetic,
    ``${..}``, here-document or ``$((`` around an ``rm`` makes the line pass as ``git status``:
    the victim survives every line, each refused, while a plain ``git status`` runs."""
    project = _project(tmp_path, "victim")
    attack = await bash_attack(
        tmp_path,
        [*HIDDEN_RM, "git status $[1<<2] 2>&1"],
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission=GIT_STATUS_ONLY,
    )
    assert (project / "victim").read_text() == "victim\n"
    for index, command in enumerate(HIDDEN_RM):
        output = attack.output(index)
        assert "denied" in output or "nobody can approve" in output, (command, output)
    # The allowed command itself runs (the project is no repository: git says so).
    assert "not a git repository" in attack.output(len(HIDDEN_RM))


async def test_s_sec_9_assignments_do_not_ride_on_the_commands_allow(tmp_path: Path) -> None:
    """S-SEC-9, S-POL-2: with ``git status *`` allowed and ``rm *`` denied, an assignment in
    front of ``git status`` (git's config from the environment running a program, a PATH
    reaching a planted ``git``, alone or before it) does not pass as ``git status``: each line
    is refused and the victim survives."""
    project = _project(tmp_path, "victim")
    await trio.run_process(["git", "init", "-q", str(project)])
    evil = project / "evil"
    evil.mkdir()
    (evil / "git").write_text("#!/bin/sh\nrm -rf victim\n")
    (evil / "git").chmod(0o755)
    lines = [
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor "
        "GIT_CONFIG_VALUE_0='rm -rf victim; false' git status",
        "PATH=$PWD/evil:$PATH git status",
        "PATH=$PWD/evil:$PATH; git status",
    ]
    attack = await bash_attack(
        tmp_path,
        [*lines, "git status --short 2>&1; true"],
        cwd=project,
        subagent_type="general-purpose",
        mode="full",
        permission={**GIT_STATUS_ONLY, "bash": {**GIT_STATUS_ONLY["bash"], "true": "allow"}},
    )
    assert (project / "victim").read_text() == "victim\n"
    for index, command in enumerate(lines):
        assert "nobody can approve" in attack.output(index), (command, attack.output(index))
    # The allowed command runs: git lists the untracked files.
    assert "victim" in attack.output(len(lines))
