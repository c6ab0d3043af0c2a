"""S-SEC-3: a project's `subvisor.toml` may only tighten the user's permissions.

The repository controls `subvisor.toml`. Here the user's config denies Bash and
the root's scripted model runs `touch` on a marker outside the project, through
the real `subvisor` CLI: a project rule or mode that would let it run is
refused with one line naming the file and the key, and the marker never
appears. Controls: the same command runs where the user's own config allows
it, and a project rule that tightens is taken.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.delegation import home_for


class Setup:
    """A user whose config denies Bash, a project, and a root that runs Bash."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = home_for(tmp_path)
        self.home.mkdir(exist_ok=True)
        self.marker = tmp_path / "bash-ran"
        scenario = tmp_path / "bash.yaml"
        scenario.write_text(
            "agents:\n  root:\n"
            f"    - tool_calls: [{{name: Bash, input: {{command: 'touch {self.marker}'}}}}]\n"
            "    - text: 'bash said {{tool_result}}'\n"
        )
        self.model = f"scripted:{scenario}"
        self.project = tmp_path / "project"
        self.project.mkdir()
        self.user_config('"*" = "allow"\nbash = "deny"\n')

    def user_config(self, permission: str) -> None:
        (self.home / "config.toml").write_text(f"[permission]\n{permission}")

    def run(self) -> subprocess.CompletedProcess[str]:
        return run_cli(self.home, "run", "--model", self.model, "go", cwd=self.project)


@pytest.mark.parametrize(
    ("project_toml", "named"),
    [
        ('[permission]\nbash = "allow"\n', "permission bash '*' = 'allow'"),
        ('[permission]\nbash = "ask"\n', "permission bash '*' = 'ask'"),
        ('[permission]\nbash = { "touch *" = "allow" }\n', "permission bash 'touch *' = 'allow'"),
        ('[permission]\n"*" = "allow"\n', "permission * '*' = 'allow'"),
        ('permission = "allow"\n', "permission * '*' = 'allow'"),
        ('permission_mode = "bypassPermissions"\n', "permission_mode = 'bypassPermissions'"),
        ('permission_mode = "acceptEdits"\n', "permission_mode = 'acceptEdits'"),
    ],
)
def test_s_sec_3_a_project_cannot_loosen_the_users_bash_deny(
    tmp_path: Path, project_toml: str, named: str
) -> None:
    """S-SEC-3: with the user's `bash = "deny"`, a project's allow (for all, for the
    command's pattern, or as `*`), an ask, or an auto-approving mode is refused naming
    the file, the key and the user's config; Bash never runs."""
    setup = Setup(tmp_path)
    path = setup.project / "subvisor.toml"
    path.write_text(project_toml)
    result = setup.run()
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert str(path) in line and named in line
    assert str(setup.home / "config.toml") in line
    assert not setup.marker.exists()


def test_s_sec_3_the_users_own_allow_runs_and_a_project_deny_tightens_it(
    tmp_path: Path,
) -> None:
    """Controls: the user's own `bash = "allow"` runs the command; the project's
    `bash = { "touch *" = "deny" }` is taken and denies it again."""
    setup = Setup(tmp_path)
    setup.user_config('"*" = "allow"\n')
    allowed = setup.run()
    assert allowed.returncode == 0, allowed.stderr
    assert setup.marker.exists()
    setup.marker.unlink()

    (setup.project / "subvisor.toml").write_text('[permission]\nbash = { "touch *" = "deny" }\n')
    denied = setup.run()
    assert denied.returncode == 0, denied.stderr
    assert "bash said" in denied.stdout
    assert not setup.marker.exists()


@pytest.mark.parametrize(
    ("frontmatter", "kind"),
    [
        ("permission:\n  bash: allow\n", "project"),
        ('permission:\n  "*": allow\n', "project"),
        ("tools:\n  bash: true\n", "project"),
        ("permission:\n  bash: allow\n", "user"),
    ],
)
def test_s_sec_3_a_project_profile_cannot_loosen_the_users_ask(
    tmp_path: Path, frontmatter: str, kind: str
) -> None:
    """S-SEC-3: with the user's `bash = "ask"` and nobody to approve, a subagent of a
    project profile that allows Bash (by `permission:` or opencode's `tools:`) is still
    asked, so refused, and its Bash never runs; the same profile of the user's own
    (in ~/.claude/agents) may allow it."""
    setup = Setup(tmp_path)
    setup.user_config('"*" = "allow"\nbash = "ask"\n')
    # The suite gives each test a $HOME of its own, which the CLI inherits.
    folder = (
        setup.project / ".opencode" / "agent"
        if kind == "project"
        else Path.home() / ".claude" / "agents"
    )
    folder.mkdir(parents=True)
    (folder / "helper.md").write_text(
        f"---\ndescription: a helper\nmode: subagent\n{frontmatter}---\nYou help.\n"
    )
    scenario = tmp_path / "helper.yaml"
    scenario.write_text(
        "agents:\n  root:\n"
        "    - tool_calls: [{name: Agent, input: {description: t, prompt: t,"
        " subagent_type: helper}}]\n"
        "    - text: 'root got {{tool_result}}'\n"
        "  t:\n"
        "    - tool_calls: [{name: Bash, input: {command: 'echo BASH-$((40 + 2))'}}]\n"
        "    - text: 'bash said {{tool_result}}'\n"
    )
    result = run_cli(setup.home, "run", "--model", f"scripted:{scenario}", "go", cwd=setup.project)
    assert result.returncode == 0, result.stdout + result.stderr
    said = " ".join(result.stdout.split())
    if kind == "project":
        # The child's text reaches the root escaped (S-NOTE-1): its "->" reads "-&gt;".
        assert "is set to ask by the rule bash '*' -&gt; ask; nobody can approve" in said, said
        assert "BASH-42" not in said
    else:
        assert "bash said BASH-42" in said, said
