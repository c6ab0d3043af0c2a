"""S-SEC-3: a repository a subagent plants below its project runs nothing at the user's next git.

A workspace-write worker can still make a repository where no ``.git``
was (``git init a/b/sub``), a bare one, or a ``.git`` file that points at
a directory it can write. Git would run their ``core.fsmonitor``,
``credential.helper`` and hooks outside any sandbox. Once the worker's tree
is gone the supervisor disarms them: these tests then run the real git
commands that would have run them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor import RootSession
from supervisor.kernel._planted_repos import (
    CTIME_SLACK_S,
    DISARMED_SUFFIX,
    RepositorySweeps,
    _Listing,
    _Walk,
    disarm_planted,
    render_config,
)
from tests.support.attack import bash, bash_attack, children_said
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario
from tests.support.unprivileged import unprivileged


def _git(*args: str, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, input=input, env=env, check=False
    )


async def test_s_sec_3_repositories_a_subagent_plants_run_nothing_afterwards(
    tmp_path: Path,
) -> None:
    """S-SEC-3: after the run, `git status`, `git commit` and `git credential fill` run
    none of the programs the subagent named in repositories it made (nested, bare, behind
    a `.git` file or symlink) or changed (deeper than the read-only walk); their remotes
    are kept, the originals are kept aside, the parent is told, and a repository of the
    user's that the subagent left alone is untouched."""
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "PWNED"
    _git("init", "-q", "user-repo", cwd=project)
    # Deeper than the walk that makes each .git read-only while the worker runs.
    deep = project / "v" / "w" / "x" / "y" / "z" / "deep"
    _git("init", "-q", str(deep), cwd=project)
    _git("config", "core.fsmonitor", "false", cwd=project / "user-repo")
    user_config = (project / "user-repo" / ".git" / "config").read_text()
    # Only what changed after the worker started is disarmed, give or take the
    # supervisor's slack for the kernel's coarse clock: be older than that.
    changed = os.stat(project / "user-repo" / ".git" / "config").st_ctime
    await trio.sleep(max(0.0, changed + CTIME_SLACK_S + 0.5 - time.time()))
    hook = f"printf '#!/bin/sh\\ntouch {marker}\\n'"
    attack = await bash_attack(
        tmp_path,
        [
            "git init -q a/b/sub && cd a/b/sub"
            f" && git config core.fsmonitor 'touch {marker}; false'"
            " && git remote add origin https://example.com/sub.git"
            f" && {hook} > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit; echo rc=$?",
            "git init -q --bare bare.git"
            f" && git -C bare.git config credential.helper '!touch {marker}'; echo rc=$?",
            "mkdir stash && git init -q --separate-git-dir=stash/g ptr"
            f" && git -C ptr config core.fsmonitor 'touch {marker}; false'; echo rc=$?",
            "git init -q stash/l && mkdir link && ln -s ../stash/l/.git link/.git"
            f" && git -C stash/l config core.fsmonitor 'touch {marker}; false'; echo rc=$?",
            f"git -C {deep} config core.fsmonitor 'touch {marker}; false'; echo rc=$?",
        ],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    for result in attack.results:
        assert "rc=0" in result.content, result.content  # planting itself is not refused

    sub = project / "a" / "b" / "sub"
    (sub / "f").write_text("x\n")
    _git("add", "f", cwd=sub)
    commit = _git("-c", "user.email=u@x", "-c", "user.name=u", "commit", "-qm", "x", cwd=sub)
    assert commit.returncode == 0, commit.stderr
    _git("status", cwd=sub)
    _git("status", cwd=project / "ptr")
    _git("status", cwd=project / "link")
    _git("status", cwd=deep)
    _git("credential", "fill", cwd=project / "bare.git", input="protocol=https\nhost=x\n\n")
    assert not marker.exists()

    assert _git("remote", "get-url", "origin", cwd=sub).stdout.strip() == (
        "https://example.com/sub.git"
    )
    assert "fsmonitor" in (sub / ".git" / f"config{DISARMED_SUFFIX}").read_text()
    assert (sub / ".git" / "hooks" / f"pre-commit{DISARMED_SUFFIX}").exists()
    assert (project / "user-repo" / ".git" / "config").read_text() == user_config
    answer = attack.record.result or ""
    assert "disarmed" in answer and str(sub / ".git" / "config") in answer, answer
    assert str(project / "bare.git" / "config") in answer and "credential.helper" in answer
    assert str(project / "stash" / "g" / "config") in answer
    assert str(project / "stash" / "l" / ".git" / "config") in answer
    assert str(deep / ".git" / "config") in answer


def test_s_sec_3_a_walk_disarms_only_what_changed_since(tmp_path: Path) -> None:
    """S-SEC-3: a repository whose config and hooks predate the worker is left as it is;
    the same repository, changed later, is disarmed, and a second walk finds nothing left."""
    repo = tmp_path / "r"
    _git("init", "-q", str(repo), cwd=tmp_path)
    _git("config", "core.pager", "less", cwd=repo)
    hooks = repo / ".git" / "hooks"
    (hooks / "post-checkout").write_text("#!/bin/sh\n")
    later = os.stat(repo / ".git" / "config").st_ctime + 3600
    assert disarm_planted([str(tmp_path)], later) == []
    found = disarm_planted([str(tmp_path)], 0)
    assert any("core.pager" in line for line in found), found
    assert (hooks / f"post-checkout{DISARMED_SUFFIX}").exists()
    assert not (hooks / "post-checkout").exists() and (hooks / "pre-commit.sample").exists()
    assert disarm_planted([str(tmp_path)], 0) == []


_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
_VALUES = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\0")
    | st.sampled_from(['"', "\\", "\t", "\n", " ", ";", "#"]),
    max_size=20,
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["remote", "branch", "submodule"]),
            st.text(
                alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\0")
                | st.sampled_from(['"', "\\", ".", " "]),
                min_size=1,
                max_size=10,
            ),
            _NAMES,
            _VALUES,
        ),
        max_size=6,
    )
)
def test_s_sec_3_a_rewritten_config_reads_back_as_the_entries_kept(
    entries: list[tuple[str, str, str, str]],
) -> None:
    """S-SEC-3: git reads the config written for the kept entries back exactly: quotes,
    backslashes, tabs, newlines and dots in subsections included."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config"
        kept = [(f"{section}.{sub}.{name}", value) for section, sub, name, value in entries]
        path.write_text(render_config(kept), encoding="utf-8")
        listed = _git("config", "--file", str(path), "--null", "--list", cwd=Path(tmp))
        assert listed.returncode == 0, (listed.stderr, path.read_text())
        read = [item.partition("\n") for item in listed.stdout.split("\0")[:-1]]
        assert [(key, value) for key, _, value in read] == kept


def test_s_sec_3_a_fifo_where_git_metadata_belongs_does_not_stall_the_walk(
    tmp_path: Path,
) -> None:
    """S-SEC-3: a FIFO as a worktree's `commondir`, as a `.git` file and as a config does
    not block the supervisor's walk (it would hold the subagent's end forever); the
    repository beside them is still disarmed."""
    repo = tmp_path / "r"
    _git("init", "-q", str(repo), cwd=tmp_path)
    _git("config", "core.fsmonitor", "true", cwd=repo)
    os.mkfifo(repo / ".git" / "commondir")
    (tmp_path / "p").mkdir()
    os.mkfifo(tmp_path / "p" / ".git")
    bare = tmp_path / "b"
    for part in ("objects", "refs"):
        (bare / part).mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    os.mkfifo(bare / "config")
    walk = (
        "import sys; from supervisor.kernel._planted_repos import disarm_planted; "
        "print('\\n'.join(disarm_planted([sys.argv[1]], 0)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", walk, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert str(repo / ".git" / "config") in done.stdout and "core.fsmonitor" in done.stdout
    assert str(bare / "config") in done.stdout  # a FIFO config is set aside
    assert not (bare / "config").exists()


def test_s_sec_3_as_a_user_a_repository_hidden_behind_modes_is_disarmed() -> None:
    """S-SEC-3, as uid 65534: a repository planted in a directory made traverse-only (the
    user can still `cd` through it by name), with its hooks in a traverse-only `hooks/`,
    is found and disarmed; the directories are made readable and writable again, and the
    findings say so."""
    script = (
        "import os, subprocess, sys\n"
        "from supervisor.kernel._planted_repos import disarm_planted\n"
        "root = os.path.join(os.getcwd(), 'proj')\n"
        "sub = os.path.join(root, 'hidden', 'sub')\n"
        "subprocess.run(['git', 'init', '-q', sub], check=True)\n"
        "subprocess.run(['git', '-C', sub, 'config', 'core.fsmonitor', 'touch x'], check=True)\n"
        "hooks = os.path.join(sub, '.git', 'hooks')\n"
        "with open(os.path.join(hooks, 'pre-commit'), 'w') as f: f.write('#!/bin/sh\\n')\n"
        "os.chmod(hooks, 0o111)\n"
        "os.chmod(os.path.join(root, 'hidden'), 0o111)\n"
        "print('\\n'.join(disarm_planted([root], 0)))\n"
        "print('hooks:', sorted(os.listdir(hooks)))\n"
    )
    with unprivileged() as user:
        done = user.run(["python", "-c", script])
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "hidden: made readable" in out, out
    assert "sub/.git/config: removed core.fsmonitor" in out, out
    assert "pre-commit.subvisor-disarmed" in out and "'pre-commit'" not in out, out


async def test_s_sec_3_a_later_walk_finds_what_was_planted_where_an_earlier_one_read(
    tmp_path: Path,
) -> None:
    """S-SEC-3: the supervisor's walks of a root reuse what the last one read of each
    directory whose entries did not change; a repository planted afterwards in a directory
    read before, in a new one below it, or a config changed in a repository seen before,
    is found all the same."""
    root = tmp_path / "proj"
    (root / "a" / "b").mkdir(parents=True)
    (root / "c").mkdir()
    _git("init", "-q", str(root / "old"), cwd=tmp_path)
    # Listings of directories changed within a clock tick of a walk are not kept.
    await trio.sleep(CTIME_SLACK_S + 0.5)
    sweeps = RepositorySweeps()
    assert await sweeps.after("w_1", [str(root)], time.time()) == ()
    started = time.time() - CTIME_SLACK_S
    _git("init", "-q", str(root / "a" / "b" / "new"), cwd=tmp_path)
    _git("init", "-q", str(root / "c" / "x" / "y" / "deep"), cwd=tmp_path)
    for repo in ("a/b/new", "c/x/y/deep", "old"):
        _git("config", "core.fsmonitor", "true", cwd=root / repo)
    found = "\n".join(await sweeps.after("w_2", [str(root)], started))
    for repo in ("a/b/new", "c/x/y/deep", "old"):
        assert f"{root / repo / '.git' / 'config'}: removed core.fsmonitor" in found, found


async def test_s_sec_3_a_repository_hidden_from_a_walk_by_a_live_sibling_is_disarmed_later(
    tmp_path: Path,
) -> None:
    """S-SEC-3: X plants a repository and ends; while X's walk runs, a sibling Y (still
    alive, a writer of the same root) holds it out of the walk's way, and puts it back after.
    Y started after the config was written, so a walk of Y's alone would not count it as
    changed. The walk after Y ends disarms it all the same, and says so; with no writer left,
    the next worker's walk starts from its own start again (nothing old is reported twice)."""
    root, away = tmp_path / "proj", tmp_path / "away"
    root.mkdir()
    away.mkdir()
    sweeps = RepositorySweeps()
    x_started = time.time() - CTIME_SLACK_S
    sweeps.begin("x", [str(root)])
    _git("init", "-q", str(root / "hide"), cwd=tmp_path)
    _git("config", "core.fsmonitor", "touch pwned", cwd=root / "hide")
    sweeps.begin("y", [str(root)])
    await trio.sleep(CTIME_SLACK_S + 0.5)
    y_started = time.time() - CTIME_SLACK_S
    (root / "hide").rename(away / "hide")  # Y, while X's walk runs
    assert await sweeps.after("x", [str(root)], x_started) == ()
    (away / "hide").rename(root / "hide")  # Y, once it passed
    found = "\n".join(await sweeps.after("y", [str(root)], y_started))
    config = root / "hide" / ".git" / "config"
    assert f"{config}: removed core.fsmonitor" in found, found
    assert "fsmonitor" not in config.read_text()
    sweeps.begin("z", [str(root)])
    assert await sweeps.after("z", [str(root)], time.time()) == ()
    sweeps.close()


async def test_s_sec_3_a_writer_of_a_root_inside_another_hides_nothing_from_its_walk(
    tmp_path: Path,
) -> None:
    """S-SEC-3: as above, with Y a writer of a directory inside X's root only (a read-only
    agent's project memory dir, `.subvisor/agent-memory/NAME`; the end-to-end test below shows
    how a walk is dodged from inside its root): X's walk, which Y was alive for, covers
    nothing, and Y's end walks X's root again, which disarms what Y held away."""
    root = tmp_path / "proj"
    memory = root / ".subvisor" / "agent-memory" / "m"
    memory.mkdir(parents=True)
    sweeps = RepositorySweeps()
    x_started = time.time() - CTIME_SLACK_S
    sweeps.begin("x", [str(root)])
    _git("init", "-q", str(memory / "hide"), cwd=tmp_path)
    _git("config", "core.fsmonitor", "touch pwned", cwd=memory / "hide")
    await trio.sleep(CTIME_SLACK_S + 0.5)
    y_started = time.time() - CTIME_SLACK_S
    sweeps.begin("y", [str(memory)])
    (memory / "hide").rename(tmp_path / "away")  # out of the way of X's walk, as Y can
    assert await sweeps.after("x", [str(root)], x_started) == ()
    (tmp_path / "away").rename(memory / "hide")  # Y, once it passed
    found = "\n".join(await sweeps.after("y", [str(memory)], y_started))
    config = memory / "hide" / ".git" / "config"
    assert f"{config}: removed core.fsmonitor" in found, found
    assert "fsmonitor" not in config.read_text()
    sweeps.close()


#: Bounded waits (0.05 s steps) on files another agent, or the walk, makes.
_WAIT = "for i in $(seq 1200); do [ -e {file} ] && break; sleep 0.05; done"


async def test_s_sec_3_a_sibling_that_hides_a_planted_repository_from_a_walk_leaves_it_disarmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3, end to end (a red team's attack): X plants `hide/.git` (`core.fsmonitor`,
    a hook) and ends while Y, a workspace-write sibling started after the plant, is alive.
    Y renames `hide` away once X's walk has listed the project, and back once that walk is
    done. After the run the repository is disarmed all the same: the hook set aside, the
    config rewritten, and `git status` and `git checkout` in it run nothing."""
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "PWNED"
    hooked: list[_Walk] = []
    real_read, real_run = _Walk.read, _Walk.run

    # The seam that makes X's walk observable: the first walk of the project that
    # lists it once Y is ready says so, and goes on only once Y moved `hide` away.
    def read(self: _Walk, directory: str, info: os.stat_result) -> _Listing | None:
        listing = real_read(self, directory, info)
        ours = os.path.realpath(directory) == os.path.realpath(project)
        if not hooked and ours and (project / "y-ready").exists():
            hooked.append(self)
            (project / "walking").touch()
            for _ in range(1200):
                if (project / "moved").exists():
                    break
                time.sleep(0.05)
        return listing

    def run(self: _Walk, root: str) -> None:
        try:
            real_run(self, root)
        finally:
            if self in hooked:
                (project / "walked").touch()

    monkeypatch.setattr(_Walk, "read", read)
    monkeypatch.setattr(_Walk, "run", run)
    plant = (
        "git init -q hide"
        f" && git -C hide config core.fsmonitor 'touch {marker}; false'"
        f" && printf '#!/bin/sh\\ntouch {marker}\\n' > hide/.git/hooks/post-checkout"
        " && chmod +x hide/.git/hooks/post-checkout && touch planted && echo planted;"
        f" {_WAIT.format(file='y-ready')}; echo x-ends"
    )
    # Y must start after the planted config's ctime, give or take the supervisor's
    # slack for the kernel's coarse clock: a read-only agent waits that long first.
    age = f"{_WAIT.format(file='planted')}; sleep {CTIME_SLACK_S + 1}; echo aged"
    hide = (
        f"touch y-ready; {_WAIT.format(file='walking')}; mv hide hide2 && touch moved"
        f" && echo moved; {_WAIT.format(file='walked')}; mv hide2 hide && echo back"
    )
    model = write_scenario(
        tmp_path / "hide.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call(
                            "X", "x", subagent_type="general-purpose", run_in_background=True
                        )
                    ]
                },
                {"tool_calls": [agent_call("W", "w", subagent_type="Explore")]},
                {"tool_calls": [agent_call("Y", "y", subagent_type="general-purpose")]},
                {"text": "{{tool_result}}"},
                {"text": "end"},
            ],
            "X": [{"tool_calls": [bash(plant)]}, {"text": "{{tool_result}}"}],
            "W": [{"tool_calls": [bash(age)]}, {"text": "{{tool_result}}"}],
            "Y": [{"tool_calls": [bash(hide)]}, {"text": "{{tool_result}}"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        said = await children_said(host, root.session_id, ended="X")
    # Control: the attack ran as the red team's did, and the walk it hid from was X's.
    assert "planted" in said["X"] and "x-ends" in said["X"], said["X"]
    assert "aged" in said["W"], said["W"]
    assert "moved" in said["Y"] and "back" in said["Y"], said["Y"]
    assert len(hooked) == 1 and (project / "walked").exists()

    git_dir = project / "hide" / ".git"
    assert (git_dir / "hooks" / f"post-checkout{DISARMED_SUFFIX}").exists()
    assert not (git_dir / "hooks" / "post-checkout").exists()
    assert "fsmonitor" in (git_dir / f"config{DISARMED_SUFFIX}").read_text()
    assert "fsmonitor" not in (git_dir / "config").read_text()
    _git("status", cwd=project / "hide")
    _git("checkout", "-q", "-b", "other", cwd=project / "hide")
    assert not marker.exists()


def test_s_sec_3_the_walk_runs_the_systems_git_not_one_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3: with a `git` of a subagent's first on PATH (an activated virtualenv's `bin`
    in the project), the walk still reads a planted config with the system's git: the
    planted one never runs, and the config is disarmed all the same."""
    marker = tmp_path / "RAN"
    fake = tmp_path / "project" / ".venv" / "bin"
    fake.mkdir(parents=True)
    (fake / "git").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (fake / "git").chmod(0o755)
    repo = tmp_path / "project" / "sub"
    _git("init", "-q", str(repo), cwd=tmp_path)
    _git("config", "core.fsmonitor", "true", cwd=repo)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    found = disarm_planted([str(tmp_path / "project")], 0)
    assert not marker.exists()
    assert any("core.fsmonitor" in line for line in found), found


def test_s_sec_3_a_git_pointer_out_of_the_root_leads_the_walk_nowhere(tmp_path: Path) -> None:
    """A `.git` symlink or `gitdir:` file planted in the root that names a repository
    elsewhere (the user's other project, whose hook the user just changed) leaves that
    repository as it is: the walk disarms only what lies in its root."""
    since = time.time() - CTIME_SLACK_S
    other = tmp_path / "other"
    _git("init", "-q", str(other), cwd=tmp_path)
    hook = other / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    root = tmp_path / "root"
    (root / "by-link").mkdir(parents=True)
    (root / "by-link" / ".git").symlink_to(other / ".git")
    (root / "by-file").mkdir()
    (root / "by-file" / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert disarm_planted([str(root)], since) == []
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
    assert not list(other.rglob(f"*{DISARMED_SUFFIX}*"))


class _Escape:
    """A walk that does what a path swapped under a real walk would make it do."""

    def __init__(self, outside: Path) -> None:
        self.outside = outside
        self.tried: dict[str, str] = {}

    def run(self, root: str) -> None:
        attempts = {
            "rename out": lambda: os.rename(self.outside / "secret", self.outside / "moved"),
            "move in": lambda: os.rename(self.outside / "secret", Path(root) / "stolen"),
            "read": lambda: (self.outside / "secret").read_text(),
            "write": lambda: (self.outside / "new").write_text("x"),
            "rename in root": lambda: os.rename(Path(root) / "a", Path(root) / "b"),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
                self.tried[name] = "done"
            except OSError as exc:
                self.tried[name] = type(exc).__name__


def test_s_sec_3_a_confined_walk_changes_and_reads_nothing_outside_its_root(
    tmp_path: Path,
) -> None:
    """S-SEC-3: the walk runs in a thread Landlock keeps to its root, so a directory a
    running sibling swapped for a symlink mid-walk cannot make it rename, read or write
    anything outside (subvisor's home, another repository). Only inside is it done."""
    from supervisor.kernel._planted_repos import walk_confined

    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    root.mkdir()
    (outside / "secret").write_text("api_key")
    (root / "a").write_text("")
    walk = _Escape(outside)
    walk_confined(walk, str(root))  # type: ignore[arg-type]
    assert walk.tried == {
        "rename out": "PermissionError",
        "move in": "PermissionError",
        "read": "PermissionError",
        "write": "PermissionError",
        "rename in root": "done",
    }
    assert (outside / "secret").read_text() == "api_key" and not (outside / "new").exists()
    # The supervisor's other threads are not confined.
    (outside / "new").write_text("still mine")
