"""S-SEC-2: a subagent cannot read what a sibling wrote in its private temp dir.

Every sandboxed worker gets a temp dir (``$TMPDIR``) under one parent per
supervisor, all of one uid. Two real subagents run at once: the writer puts
a marker in its temp dir and says where (a file in the project), then waits
for the reader, which tries to read it and to list the parent.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from protocol import SandboxPolicy
from supervisor import RootSession, SpawnError, Supervisor, SupervisorConfig
from supervisor.policy._sandbox import SandboxSettings
from tests.support.attack import bash, children_said
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

MARKER = "sibling-private-MARKER-5ca1ab1e"
#: Bounded waits (0.05 s steps) on files the other agent makes.
_WAIT = "for i in $(seq 1200); do [ -e {file} ] && break; sleep 0.05; done"


async def test_s_sec_2_a_sibling_cannot_read_another_workers_temp_dir(tmp_path: Path) -> None:
    """S-SEC-2: the reader neither reads the writer's temp file nor sees its dir; the writer
    did write it (control), and the reader's own temp dir works."""
    project = tmp_path / "project"
    project.mkdir()
    writer = (
        f"echo {MARKER} > $TMPDIR/scratch.txt && cat $TMPDIR/scratch.txt && echo $TMPDIR > ready;"
        f" {_WAIT.format(file='release')}"
    )
    reader = (
        f"{_WAIT.format(file='ready')}; d=$(cat ready); echo sibling=$d;"
        " cat $d/scratch.txt; echo read=$?; ls -a $(dirname $TMPDIR);"
        " echo mine > $TMPDIR/own.txt && cat $TMPDIR/own.txt; touch release"
    )
    model = write_scenario(
        tmp_path / "siblings.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("writer", "w", run_in_background=True),
                        agent_call("reader", "r"),
                    ]
                },
                {"text": "{{tool_result}}"},
                {"text": "end"},
            ],
            "writer": [{"tool_calls": [bash(writer)]}, {"text": "{{tool_result}}"}],
            "reader": [{"tool_calls": [bash(reader)]}, {"text": "{{tool_result}}"}],
        },
    )
    settings = SandboxSettings(force_mode="workspace-write", force_network="deny")
    async with subvisor(home_for(tmp_path), sandbox=settings) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        said = await children_said(host, root.session_id, ended="writer")
    assert MARKER in said["writer"], said["writer"]  # control: it was written
    sibling = said["reader"].split("sibling=")[1].split()[0]
    assert sibling.startswith("/"), said["reader"]  # the reader learnt where it is
    assert MARKER not in said["reader"], said["reader"]
    assert "read=0" not in said["reader"]
    assert Path(sibling).name not in said["reader"].split("read=")[1], said["reader"]
    assert "mine" in said["reader"]


async def test_s_sec_2_a_temp_dir_path_planted_as_a_symlink_is_refused(tmp_path: Path) -> None:
    """S-SEC-2: the zygote makes a worker's temp dir (0700) at the path it is given; one
    that is already there as a symlink is refused, with the reason, and nothing is made
    where the link points. The made one is the worker's own, private (control)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = tmp_path / "planted"
    planted.symlink_to(elsewhere)
    fresh = tmp_path / "fresh"
    read_only = SandboxPolicy(mode="read-only", on_unsupported="warn")
    async with Supervisor(SupervisorConfig(max_workers=2)) as sup:
        with pytest.raises(SpawnError) as refused:
            await sup.spawn(sandbox=read_only.model_copy(update={"temp_dir": str(planted)}))
        handle = await sup.spawn(sandbox=read_only.model_copy(update={"temp_dir": str(fresh)}))
        await handle.kill("test done")
    (line,) = str(refused.value).splitlines()
    assert f"its temp dir {planted} exists and is not a directory" in line, line
    assert list(elsewhere.iterdir()) == []
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
    assert fresh.stat().st_uid == os.geteuid()


@pytest.mark.machine_may_lack("a mount namespace of a worker's own (CAP_SYS_ADMIN where it is)")
async def test_s_sec_2_a_temp_dir_given_outside_the_supervisors_layout_covers_its_parent_only(
    tmp_path: Path,
) -> None:
    """S-SEC-2: a temp dir a caller gives directly in the system temp dir (not in the uid's
    dir of every session's) has its parent covered, its siblings hidden, and nothing
    above: no cover is tried on ``/``, and the report names no failure."""
    given = Path(tempfile.mkdtemp(prefix="subvisor-test-given-")) / "tmp"
    read_only = SandboxPolicy(mode="read-only", on_unsupported="warn")
    try:
        async with Supervisor(SupervisorConfig(max_workers=1)) as sup:
            handle = await sup.spawn(sandbox=read_only.model_copy(update={"temp_dir": str(given)}))
            report = handle.sandbox
            await handle.kill("test done")
    finally:
        shutil.rmtree(given.parent, ignore_errors=True)
    assert report is not None
    if not report.ipc_namespace:  # needs CAP_SYS_ADMIN where the worker is, as the cover does
        pytest.skip(f"no namespace of its own here: {report.reason}")
    assert "temp dirs" not in report.reason, report.reason
    assert str(given.parent) in report.hidden, report
    assert "/" not in report.hidden and str(given.parent.parent) not in report.hidden, report
