"""S-SEC-2: a subagent cannot read what another session's subagent wrote in its temp dir.

Every sandboxed worker's temp dir (``$TMPDIR``) lies under its supervisor's
dir, and every supervisor's of one uid in one dir of that uid in the system's
temp dir (``subvisor-sandboxes-<uid>``). Two sessions, each with its own supervisor: session B's
subagent writes a marker in its temp dir, says where (a file in its project)
and waits; session A, started only then, has a read-only subagent read that
path and glob the system temp dir for it.
"""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import pytest
import trio

from supervisor import RootSession
from supervisor.policy._sandbox import SandboxSettings
from tests.support.attack import bash, bash_attack, tool_results
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

MARKER = "other-session-MARKER-b0a7f00d"
SECRET = "secret-b0a7f00d.txt"
#: Bounded waits (0.05 s steps) on a file the test makes: no wall-clock threshold.
_WAIT = "for i in $(seq 2400); do [ -e {file} ] && break; sleep 0.05; done"


@pytest.mark.parametrize("name_taken", [False, True], ids=["ours", "taken-by-another-uid"])
async def test_s_sec_2_a_subagent_cannot_read_another_sessions_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name_taken: bool
) -> None:
    """S-SEC-2: session A's read-only subagent neither reads session B's temp file by its
    path nor finds it by a glob over the system temp dir (old and new layouts); B did
    write it (control), and A's own temp dir works. Before, every session's dir lay
    directly in the system temp dir, beside the others, and A read B's (red team).

    The same holds where another uid took the name first in a shared temp dir: both
    sessions then use it in ``.cache`` of the uid's home (before, each made a stand-in of its
    own beside the other's in the temp dir, and neither was hidden)."""
    temp = tempfile.gettempdir()
    if name_taken:
        shared_temp = tmp_path / "tmp"
        shared_temp.mkdir(mode=0o1777)
        shared_temp.chmod(0o1777)
        squatted = shared_temp / f"subvisor-sandboxes-{os.getuid()}"
        squatted.mkdir(mode=0o777)
        os.chown(squatted, 65534, 65534)
        monkeypatch.setattr(tempfile, "tempdir", str(shared_temp))
        temp = str(shared_temp)
    where = f"{pwd.getpwuid(os.getuid()).pw_dir}/.cache" if name_taken else temp
    b_dir = tmp_path / "b"
    b_project = b_dir / "project"
    b_project.mkdir(parents=True)
    ready, release = b_project / "ready", b_project / "release"
    writer = (
        f"echo {MARKER} > $TMPDIR/{SECRET} && cat $TMPDIR/{SECRET} && echo $TMPDIR > ready;"
        f" {_WAIT.format(file='release')}"
    )
    model = write_scenario(
        b_dir / "writer.yaml",
        {
            "root": [{"tool_calls": [agent_call("writer", "w")]}, {"text": "{{tool_result}}"}],
            "writer": [{"tool_calls": [bash(writer)]}, {"text": "{{tool_result}}"}],
        },
    )
    said_b: list[str] = []

    async def session_b() -> None:
        settings = SandboxSettings(force_mode="workspace-write", force_network="deny")
        async with subvisor(home_for(b_dir), sandbox=settings) as host:
            root = RootSession(host, model=model, cwd=b_project)
            await root.run("go")
            [record] = host.registry.list(root.session_id)
            said_b.extend(m.content for m in tool_results(host, record))

    a_dir = tmp_path / "a"
    a_dir.mkdir()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session_b)
        for _ in range(2400):  # B's worker says where its temp dir is
            if ready.exists():
                break
            await trio.sleep(0.05)
        secret = f"{ready.read_text().strip()}/{SECRET}" if ready.exists() else "/nonexistent"
        try:
            attack = await bash_attack(
                a_dir,
                [
                    f"cat {secret}; echo read=$?",
                    # The old layout (every session's root directly in $TMPDIR) and the new.
                    f"cat {temp}/subvisor-sandbox*/workers/*/{SECRET}"
                    f" {temp}/subvisor-sandbox*/*/workers/*/{SECRET}"
                    f" {where}/subvisor-sandbox*/*/workers/*/{SECRET}; echo globbed=$?",
                    "echo mine > $TMPDIR/own.txt && cat $TMPDIR/own.txt",
                ],
                subagent_type="Explore",
            )
        finally:
            release.touch()
    assert MARKER in "".join(said_b), said_b  # control: B wrote it, where it said
    said_a = "".join(attack.output(i) for i in range(3))
    assert MARKER not in said_a, said_a
    assert "read=0" not in said_a and "globbed=0" not in said_a, said_a
    assert attack.output(2).strip() == "mine", attack.output(2)  # control: A's own temp dir
    assert secret.startswith(f"{where}/subvisor-sandboxes-{os.getuid()}/"), secret
