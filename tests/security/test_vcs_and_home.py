"""S-SEC-3 / S-SEC-1: a subagent cannot plant version-control hooks or config, nor reach home.

A ``.git`` hook or ``core.hooksPath``/``core.fsmonitor`` written by a
subagent would run outside any sandbox, with the user's environment, at the
user's next commit (as would a Mercurial ``.hg/hgrc`` hook at the user's next
``hg status``, or a pager in Jujutsu's ``.jj/repo/config.toml``). A
workspace-write worker therefore gets its project's ``.git``, ``.hg`` and
``.jj`` read-only, while the rest of the project (top directory included)
stays writable. The Landlock-only fallback, for machines where no mount
namespace can be made, is exercised on the real kernel too.
"""

from __future__ import annotations

import os
import subprocess
import traceback
from pathlib import Path

import pytest

from protocol import SandboxPolicy
from supervisor import RootSession
from tests.support.attack import bash_attack
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario
from worker import _landlock
from worker._sandbox import _ruleset, landlock_abi


def _git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True)


def _git_project(root: Path) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "app.py").write_text("print('hi')\n")
    return root


async def test_s_sec_3_a_workspace_write_subagent_cannot_write_git(tmp_path: Path) -> None:
    """S-SEC-3: hooks, config (core.hooksPath, core.fsmonitor), removal and renaming of
    `.git` all fail; the project itself, its top directory included, stays writable."""
    project = _git_project(tmp_path / "project")
    config_before = (project / ".git" / "config").read_text()
    attack = await bash_attack(
        tmp_path,
        [
            "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit; echo rc=$?",
            "git config core.hooksPath /tmp/evil; echo rc=$?",
            "git config core.fsmonitor 'touch /tmp/pwned'; echo rc=$?",
            "rm -rf .git; echo rc=$?",
            "mv .git .git-gone; echo rc=$?",
            "echo new > brand_new.py && echo x >> app.py && mkdir pkg && echo rc=$?",
        ],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    hook, hooks_path, fsmonitor, remove, rename, control = (r.content for r in attack.results)
    for text in (hook, hooks_path, fsmonitor, remove, rename):
        assert "rc=0" not in text, text
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    assert (project / ".git" / "config").read_text() == config_before
    assert (project / ".git" / "HEAD").exists() and not (project / ".git-gone").exists()
    # Control: the rest of the project is the subagent's to write.
    assert "rc=0" in control, control
    assert (project / "brand_new.py").read_text() == "new\n"
    assert (project / "app.py").read_text().endswith("x\n") and (project / "pkg").is_dir()
    record = attack.record.sandbox
    assert record is not None and str(project / ".git") in record.read_only


async def test_s_sec_3_workspace_write_is_refused_where_the_project_holds_home(
    tmp_path: Path,
) -> None:
    """S-SEC-3: run from a directory that holds subvisor's home (as from `~`), a
    workspace-write launch fails saying why, and runs nothing; so does every later
    launch of the session (which asks where home is only once)."""
    project = tmp_path / "user-home"
    project.mkdir()
    home = project / ".subvisor"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("w", "w", subagent_type="general-purpose")]},
                {"tool_calls": [agent_call("w2", "w2", subagent_type="general-purpose")]},
                {"text": "{{tool_result}}"},
            ],
            "w": [{"text": "should not run"}],
            "w2": [{"text": "should not run"}],
        },
    )
    async with subvisor(home) as host:
        root = RootSession(host, model=model, cwd=project)
        outcome = await root.run("go")
        results = [m.content for m in host.store.messages(root.session_id) if m.role == "tool"]
    assert len(results) == 2
    assert all("workspace-write refused" in text for text in results), results
    assert "should not run" not in outcome.text


# -- the Landlock-only fallback, on the real kernel ------------------------------------

needs_landlock = pytest.mark.machine_may_lack(
    "Landlock in its kernel: the fallback cannot run without it", when=landlock_abi() < 1
)


def _confined(policy: SandboxPolicy, carve: list[str], script: str) -> str:
    """Fork; apply only the Landlock rules (no mounts) that carve ``carve``; run ``script``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        report = ""
        try:
            os.close(read_fd)
            ruleset, _ = _ruleset(policy, landlock_abi(), carve)
            _landlock.restrict_self(ruleset)
            done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
            report = done.stdout + done.stderr
        except BaseException:
            report = f"the confined child failed: {traceback.format_exc()}"
        finally:
            try:
                os.write(write_fd, report.encode())
            finally:
                os._exit(0)  # never back into pytest, even if the write fails
    os.close(write_fd)
    with os.fdopen(read_fd) as out:
        text = out.read()
    os.waitpid(pid, 0)
    return text


@needs_landlock
@pytest.mark.parametrize("mode", ["read-only", "workspace-write", "full"])
def test_s_sec_1_and_3_the_landlock_fallback_carves_home_and_git(tmp_path: Path, mode: str) -> None:
    """S-SEC-1, S-SEC-3: with no mount namespace, Landlock grants siblings instead, so home
    is unreadable and `.git` unwritable, while the rest stays as the mode says."""
    project = _git_project(tmp_path / "project")
    home = home_for(tmp_path)
    home.mkdir()
    (home / "config.toml").write_text("api_key = 'sk-MARKER'\n")
    policy = SandboxPolicy(
        mode=mode,  # type: ignore[arg-type]
        writable_roots=(str(project),) if mode == "workspace-write" else (),
        hidden_paths=(str(home),),
    )
    carve = [str(home)] + ([str(project / ".git")] if mode != "full" else [])
    out = _confined(
        policy,
        carve,
        f"cat {home}/config.toml; echo read=$?; "
        f"echo x > {project}/.git/hooks/post-checkout; echo hook=$?; "
        f"cat {project}/app.py; echo src=$?; "
        f"echo y >> {project}/app.py; echo write=$?",
    )
    assert "MARKER" not in out and "read=0" not in out, out
    assert "src=0" in out  # the project stays readable
    if mode == "full":
        assert "write=0" in out
    else:
        assert "hook=0" not in out, out
        assert ("write=0" in out) is (mode == "workspace-write"), out


async def test_s_sec_3_every_nested_git_in_the_project_is_read_only(tmp_path: Path) -> None:
    """S-SEC-3: in a project holding other repositories (a vendored repo, `~/src`), each
    `.git` the walk finds, three levels down too, and a worktree's `.git` file, is
    read-only: hooks, core.fsmonitor and the gitfile cannot be written; their work trees can."""
    project = tmp_path / "project"
    project.mkdir()
    _git("init", "-q", str(project / "inner"))
    _git("init", "-q", str(project / "a" / "b" / "deep"))
    (project / "wt").mkdir()
    (project / "wt" / ".git").write_text(f"gitdir: {project / 'inner' / '.git'}\n")
    gitfile_before = (project / "wt" / ".git").read_text()
    attack = await bash_attack(
        tmp_path,
        [
            "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > inner/.git/hooks/pre-commit; echo rc=$?",
            "git -C inner config core.fsmonitor 'touch /tmp/pwned'; echo rc=$?",
            "git -C a/b/deep config core.hooksPath /tmp/evil; echo rc=$?",
            "echo 'gitdir: /tmp/evil' > wt/.git; echo rc=$?",
            "echo x > inner/code.py && echo y > a/b/deep/code.py && echo rc=$?",
        ],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    *attacks, control = (r.content for r in attack.results)
    for text in attacks:
        assert "rc=0" not in text, text
    assert not (project / "inner" / ".git" / "hooks" / "pre-commit").exists()
    assert "fsmonitor" not in (project / "inner" / ".git" / "config").read_text()
    assert "hooksPath" not in (project / "a" / "b" / "deep" / ".git" / "config").read_text()
    assert (project / "wt" / ".git").read_text() == gitfile_before
    assert "rc=0" in control, control
    record = attack.record.sandbox
    assert record is not None
    assert {str(project / p / ".git") for p in ("inner", "a/b/deep", "wt")} <= set(record.read_only)


async def test_s_sec_3_mercurial_and_jujutsu_config_are_read_only(tmp_path: Path) -> None:
    """S-SEC-3 (red team F7): in a Mercurial (and a Jujutsu) project a subagent cannot add a
    `[hooks]` entry to `.hg/hgrc` (run by the user's next `hg status`, unsandboxed) nor a
    pager to `.jj/repo/config.toml`; the rest of the project stays writable."""
    project = tmp_path / "project"
    (project / ".hg").mkdir(parents=True)
    (project / ".hg" / "hgrc").write_text("[paths]\ndefault = /tmp/upstream\n")
    (project / ".hg" / "requires").write_text("store\n")
    (project / ".jj" / "repo").mkdir(parents=True)
    (project / ".jj" / "repo" / "config.toml").write_text("")
    (project / "a.txt").write_text("a\n")
    attack = await bash_attack(
        tmp_path,
        [
            "printf '[hooks]\\npre-status = touch /tmp/pwned\\n' >> .hg/hgrc; echo rc=$?",
            "printf '[hooks]\\npre-status = touch /tmp/pwned\\n' > .hg/hgrc-new && "
            "mv .hg/hgrc-new .hg/hgrc; echo rc=$?",
            "mv .hg .hg-gone; echo rc=$?",
            "printf '[ui]\\npager = \"touch /tmp/pwned\"\\n' >> .jj/repo/config.toml; echo rc=$?",
            "echo b >> a.txt && echo rc=$?",
        ],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    *attacks, control = (r.content for r in attack.results)
    for text in attacks:
        assert "rc=0" not in text, text
    assert (project / ".hg" / "hgrc").read_text() == "[paths]\ndefault = /tmp/upstream\n"
    assert not (project / ".hg" / "hgrc-new").exists()
    assert (project / ".jj" / "repo" / "config.toml").read_text() == ""
    assert "rc=0" in control, control
    record = attack.record.sandbox
    assert record is not None
    assert {str(project / ".hg"), str(project / ".jj")} <= set(record.read_only)


async def test_s_sec_3_no_repository_can_be_planted_at_a_project_without_one(
    tmp_path: Path,
) -> None:
    """S-SEC-3: run from a subdirectory of a repository (whose `.git` is above the project),
    `git init .` and `mkdir .git` fail, so the user's later git there runs no planted
    core.fsmonitor; the project's top directory stays writable, and the empty placeholder
    that kept `.git` out is gone once the run ends."""
    repo = tmp_path / "repo"
    _git("init", "-q", str(repo))
    project = repo / "pkg"
    project.mkdir()
    marker = tmp_path / "PWNED"
    attack = await bash_attack(
        tmp_path,
        [
            f"git init -q . && git config core.fsmonitor 'touch {marker}; false'; echo rc=$?",
            "rm -rf .git; mkdir -p .git/hooks; echo rc=$?",
            "echo new > brand_new.py && mkdir sub && echo rc=$?",
        ],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    plant, make, control = (r.content for r in attack.results)
    assert "rc=0" not in plant and "rc=0" not in make, (plant, make)
    _git("status", cwd=project)
    assert not marker.exists()
    assert not (project / ".git").exists()
    assert "rc=0" in control, control
    assert (project / "brand_new.py").read_text() == "new\n"
    record = attack.record.sandbox
    assert record is not None and str(project / ".git") in record.read_only


@needs_landlock
def test_a_rule_for_a_path_gone_since_the_rules_were_drawn_grants_nothing(
    tmp_path: Path,
) -> None:
    """The fallback grants every sibling along a carved path, and a sibling in /tmp may be
    removed (by another program) before its rule is added: that grants nothing and the
    rest of the ruleset holds, rather than the spawn failing."""
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.mkdir()
    ruleset = _landlock.Ruleset(
        handled_fs=_landlock.fs_access_for_abi(landlock_abi()),
        handled_net=_landlock.NetAccess(0),
        scoped=_landlock.Scope(0),
        paths=[
            _landlock.PathRule("/", _landlock.READ_ACCESS),
            _landlock.PathRule(str(gone), _landlock.fs_access_for_abi(landlock_abi())),
            _landlock.PathRule(str(kept), _landlock.fs_access_for_abi(landlock_abi())),
        ],
    )
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            _landlock.restrict_self(ruleset)
            (kept / "x").write_text("ok")
            try:
                (tmp_path / "y").write_text("no")
                said = "wrote outside"
            except PermissionError:
                said = "kept only"
        except BaseException as exc:
            said = f"failed: {exc}"
        os.write(write_fd, said.encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as out:
        said = out.read()
    os.waitpid(pid, 0)
    assert said == "kept only"
