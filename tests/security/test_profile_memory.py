"""S-SEC-1 / S-PROF-8: a subagent reads no profile's cross-project memory but its own.

User-level profiles with ``memory: user`` keep their memory in
``$SUBVISOR_HOME/agent-memory/NAME``, which the hidden home leaves in place so
that each can reach its own. Another subagent, a read-only Explore or one
launched from a repository's profile, must not read it: it holds what the
user told that profile in other projects. The attack is a real worker's
Bash; what it read is asserted, and the owner still reads and writes its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.attack import bash_attack
from tests.support.delegation import home_for
from worker._sandbox import landlock_abi

MARKER = "ACME-CONFIDENTIAL deal terms"


def _user_profile(home: Path, name: str, frontmatter: str) -> None:
    agents = home / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: {name} for tests\n{frontmatter}---\nYou test.\n"
    )


def _remembered(home: Path, name: str) -> Path:
    memory = home / "agent-memory" / name
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text(f"- [client](client.md): {MARKER}\n")
    (memory / "client.md").write_text(f"{MARKER}, from another project\n")
    return memory


def _reads(memory: Path) -> list[str]:
    agent_memory = memory.parent
    return [
        f"cat {memory}/MEMORY.md {memory}/client.md; echo rc=$?",
        f"cat {agent_memory}/*/*.md; grep -r ACME {agent_memory}; echo rc=$?",
        f"python3 -c 'print(open(\"{memory}/client.md\").read())'; echo rc=$?",
    ]


@pytest.mark.machine_may_lack("Landlock in its kernel", when=landlock_abi() < 1)
@pytest.mark.parametrize(
    ("subagent_type", "mode"),
    [("Explore", None), ("general-purpose", "workspace-write"), ("keeper", None)],
)
async def test_s_sec_1_a_subagent_cannot_read_another_profiles_user_memory(
    tmp_path: Path, subagent_type: str, mode: str | None
) -> None:
    """S-SEC-1, S-PROF-8: the `reviewer` profile's MEMORY.md and memory files under
    $SUBVISOR_HOME/agent-memory are read by no other subagent: not a read-only Explore
    with no memory, not a workspace-write one, not another profile with `memory: user`,
    whose own memory dir it still reads and writes (the control)."""
    home = home_for(tmp_path)
    _user_profile(home, "reviewer", "memory: user\n")
    _user_profile(home, "keeper", "tools: Read, Bash\nmemory: user\nsandbox: read-only\n")
    theirs = _remembered(home, "reviewer")
    mine = home / "agent-memory" / "keeper"
    attack = await bash_attack(
        tmp_path,
        [
            *_reads(theirs),
            f"echo mine > {mine}/note.md && cat {mine}/note.md; echo rc=$?",
        ],
        subagent_type=subagent_type,
        mode=mode,
        home=home,
    )
    *reads, own = (r.content for r in attack.results)
    for text in reads:
        assert MARKER not in text, text
    if subagent_type == "keeper":
        assert own.split()[:2] == ["mine", "rc=0"], own
        assert (mine / "note.md").read_text() == "mine\n"
    assert (theirs / "MEMORY.md").read_text() == f"- [client](client.md): {MARKER}\n"
