"""S-SEC-1 / S-SEC-3 / S-PROF-8: a link planted in the project's profile dirs loads nothing
from outside the project.

The supervisor reads profile files with the user's rights, and a profile's body becomes a
subagent's system prompt, its description part of the root's Agent tool. A workspace-write
subagent (or a cloned repository) can plant links there: to another profile's memory in
the hidden subvisor home (whose frontmatter is a valid profile), to another project's
profiles, as a file or a dir, absolute or relative, or as the `.opencode` dir itself. The
attack is a real worker's Bash; the next run's agent list and what any prompt holds are
asserted, and a link that stays inside the project still loads (the control).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from supervisor import RootSession
from supervisor.profiles._profile_catalog import ProfileCatalog
from tests.support.attack import bash
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

MARKER = "ACME-CONFIDENTIAL deal terms"


def _memory(home: Path) -> Path:
    """The `reviewer` profile's user memory: a memory file's frontmatter is a profile's."""
    (home / "agents").mkdir(parents=True)
    (home / "agents" / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: reviews\nmemory: user\n---\nYou review.\n"
    )
    memory = home / "agent-memory" / "reviewer"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("- [client](client.md): client deal\n")
    (memory / "client.md").write_text(
        f"---\nname: client-deal\ndescription: {MARKER}\ntype: project\n---\n{MARKER} body\n"
    )
    (memory / "pricing.md").write_text(
        f"---\nname: pricing\ndescription: {MARKER} pricing\ntype: project\n---\n{MARKER}\n"
    )
    return memory


def _relative(target: Path, start: Path) -> str:
    return os.path.relpath(target, start)


async def test_s_sec_1_and_3_profile_links_out_of_the_project_load_nothing(
    tmp_path: Path,
) -> None:
    """S-SEC-1, S-SEC-3, S-PROF-8: a workspace-write subagent plants `.claude/agents/m` ->
    the reviewer's memory dir (absolute), `.claude/agents/c.md` -> its `pricing.md`
    (relative), and `.opencode` -> another project's `.opencode`. The next run's agent list
    has none of `client-deal`, `pricing`, `other-secret`; nothing of theirs reaches the root.
    The catalog says, per refused path, to copy the file into the project. Control: a link
    from `.subvisor/agents` to a profile elsewhere in the project loads."""
    home = home_for(tmp_path)
    memory = _memory(home)
    other = tmp_path / "other"
    (other / ".opencode" / "agent").mkdir(parents=True)
    (other / ".opencode" / "agent" / "other-secret.md").write_text(
        f"---\ndescription: {MARKER} other project\n---\n{MARKER}\n"
    )
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "helper.md").write_text(
        "---\nname: helper\ndescription: in-project helper\n---\nYou help.\n"
    )
    agents = project / ".claude" / "agents"
    relative = _relative(memory / "pricing.md", agents)
    plant = " && ".join(
        [
            "mkdir -p .claude/agents .subvisor/agents",
            f"ln -s {memory} .claude/agents/m",
            f"ln -s {relative} .claude/agents/c.md",
            f"ln -s {other / '.opencode'} .opencode",
            "ln -s ../../docs/helper.md .subvisor/agents/helper.md",
            "echo planted",
        ]
    )
    first = write_scenario(
        tmp_path / "plant.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("plant", "plant", subagent_type="general-purpose")]},
                {"text": "{{tool_result}}"},
            ],
            "plant": [{"tool_calls": [bash(plant)]}, {"text": "{{tool_result}}"}],
        },
    )
    async with subvisor(home) as host:
        planted = await RootSession(host, model=first, cwd=project).run("go")
    assert "planted" in planted.text, planted.text

    second = write_scenario(
        tmp_path / "use.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("a", "a", subagent_type="client-deal")]},
                {"tool_calls": [agent_call("b", "b", subagent_type="helper")]},
                {"text": "{{tool_result}}"},
            ],
            "b": [{"text": "the helper ran"}],
        },
    )
    async with subvisor(home) as host:
        root = RootSession(host, model=second, cwd=project)
        used = await root.run("go")
        offered = repr(root.agent_tool.spec)
        launched = [r.subagent_type for r in host.registry.list(root.session_id)]
        messages = host.store.messages(root.session_id)
    assert launched == ["helper"] and "the helper ran" in used.text
    assert MARKER not in offered and all(MARKER not in m.content for m in messages)
    for name in ("client-deal", "pricing", "other-secret"):
        assert name not in offered
    assert "helper" in offered

    catalog = ProfileCatalog.discover(project, home=home)
    assert MARKER not in " ".join(p.prompt + p.description for p in catalog.profiles.values())
    for path in (agents / "m", agents / "c.md", project / ".opencode" / "agent"):
        assert "copy the file into the project" in catalog.ignored[str(path)], path


def test_s_sec_1_a_link_into_a_home_inside_the_project_loads_nothing(tmp_path: Path) -> None:
    """S-SEC-1: with `SUBVISOR_HOME` inside the project (hidden from its workers), a
    relative link from `.claude/agents` to a memory dir there loads nothing, though it
    resolves inside the project; the project's own profile beside it loads."""
    project = tmp_path / "project"
    home = project / ".subvisor-home"
    memory = _memory(home)
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "m").symlink_to(os.path.relpath(memory, agents))
    (agents / "mine.md").write_text("---\nname: mine\ndescription: ours\n---\nOurs.\n")
    catalog = ProfileCatalog.discover(project, home=home, user_dirs=[])
    assert "mine" in catalog.profiles
    assert {"client-deal", "pricing"}.isdisjoint(catalog.profiles)
    assert "hidden from the project" in catalog.ignored[str(agents / "m")]


_IN_OPEN = 0x20


class _OpenWatch:
    """inotify's ``IN_OPEN`` on some files: whether anything opened them since."""

    def __init__(self, paths: list[Path]) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self._fd >= 0, os.strerror(ctypes.get_errno())
        for path in paths:
            assert self._libc.inotify_add_watch(self._fd, str(path).encode(), _IN_OPEN) >= 0

    def opened(self) -> bool:
        try:
            return bool(os.read(self._fd, 4096))
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self._fd)


def test_s_sec_3_a_profile_link_out_of_the_project_is_never_opened(tmp_path: Path) -> None:
    """S-SEC-3, S-PROF-8: project profile links to a file and to a FIFO outside the project
    are refused without opening either: no open reaches their watchers (before, each was
    opened, non-blocking, then refused: a FIFO's waiting writer was let through)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text(f"---\nname: secret\ndescription: {MARKER}\n---\n{MARKER}\n")
    fifo = outside / "fifo.md"
    os.mkfifo(fifo)
    project = tmp_path / "project"
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "s.md").symlink_to(secret)
    (agents / "f.md").symlink_to(fifo)
    (agents / "mine.md").write_text("---\nname: mine\ndescription: ours\n---\nOurs.\n")
    watch = _OpenWatch([secret, fifo])
    try:
        catalog = ProfileCatalog.discover(project, home=tmp_path / "home", user_dirs=[])
        assert not watch.opened()
    finally:
        watch.close()
    assert "mine" in catalog.profiles and "secret" not in catalog.profiles
    for name in ("s.md", "f.md"):
        assert "outside the project" in catalog.ignored[str(agents / name)], catalog.ignored
