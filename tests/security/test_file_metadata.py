"""S-SBX-1 / S-SEC-3: a restricted subagent changes no metadata of a file it may not write.

Found by red-teaming: Landlock (ABI 7) has no right for the metadata of an
existing file, so a ``read-only`` (Explore) or ``workspace-write`` worker
could ``chmod``, ``touch -d`` and set ``user.*`` xattrs on any file it owned
outside its writable paths; as uid 0 without capabilities it owns every
root-owned file (``chmod 0644 /etc/shadow``, ``chmod u+s``). The attack is a
real subagent's Bash; controls show what it may still do (its project in
workspace-write, its temp dir, ``/dev/null``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.attack import bash, bash_attack
from tests.support.cli import cli_env
from tests.support.delegation import agent_call, write_scenario

PY = sys.executable
OLD = "2000-01-01"


def _tamper(path: Path) -> list[str]:
    """Bash commands changing ``path``'s mode, mtime and a ``user.*`` xattr, each with its rc."""
    return [
        f"chmod 0777 {path}; echo rc=$?; chmod u+s {path}; echo rc=$?",
        f"touch -d {OLD} {path}; echo rc=$?",
        f"{PY} -c \"import os; os.setxattr('{path}', 'user.x', b'1'); print('rc=0')\"",
    ]


def _metadata(path: Path) -> tuple[int, int, list[str]]:
    st = path.stat()
    return st.st_mode, st.st_mtime_ns, os.listxattr(path)


def _file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A git config the supervisor's disarm walk keeps as it is (S-SEC-3).
    path.write_text("[user]\n\tname = someone\n")
    path.chmod(0o600)
    return path


async def test_s_sbx_1_a_read_only_subagent_changes_no_metadata(tmp_path: Path) -> None:
    """S-SBX-1: in read-only (Explore), mode, mtime and xattrs of a file outside the project
    and of a project file stay as they were; writing /dev/null and metadata of a file in its
    own temp dir still work."""
    outside = _file(tmp_path / "elsewhere" / "notes.txt")
    project_file = _file(tmp_path / "project" / "app.py")
    before = {p: _metadata(p) for p in (outside, project_file)}
    attack = await bash_attack(
        tmp_path,
        [
            *_tamper(outside),
            *_tamper(project_file),
            "echo x > /dev/null; echo rc=$?",
            'f="$TMPDIR/mine"; echo hi > "$f" && chmod 0700 "$f" && touch -d 2000-01-01 "$f"'
            ' && stat -c "%a %Y" "$f"',
        ],
    )
    for path, was in before.items():
        assert _metadata(path) == was, path
    for text in [r.content for r in attack.results[:6]]:
        assert "rc=0" not in text, text
    devnull, temp = attack.output(6), attack.output(7)
    assert "rc=0" in devnull, devnull
    assert "700 946684800" in temp, temp


async def test_s_sec_3_a_workspace_write_subagent_changes_no_metadata_outside_it(
    tmp_path: Path,
) -> None:
    """S-SEC-3 / S-SBX-1: in workspace-write, mode, mtime and xattrs of the project's
    .git/config and of a file outside the project stay as they were; a project file's mode
    and mtime are the subagent's to change."""
    project = tmp_path / "project"
    git_config = _file(project / ".git" / "config")
    outside = _file(tmp_path / "elsewhere" / "notes.txt")
    script = _file(project / "run.sh")
    before = {p: _metadata(p) for p in (git_config, outside)}
    attack = await bash_attack(
        tmp_path,
        [
            *_tamper(git_config),
            *_tamper(outside),
            f"chmod +x {script} && touch -d {OLD} {script} && echo rc=$?",
            "echo x > /dev/null; echo rc=$?",
        ],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    for path, was in before.items():
        assert _metadata(path) == was, path
    for text in [r.content for r in attack.results[:6]]:
        assert "rc=0" not in text, text
    assert "rc=0" in attack.output(6) and "rc=0" in attack.output(7), attack.results
    assert script.stat().st_mode & 0o111 and script.stat().st_mtime == 946684800


def _run_in_own_mounts(script: str, tmp_path: Path, **env: object) -> str:
    """Run ``script`` (bash, ``env`` and ``$PY`` set) in a private mount namespace made for
    the test; the answer of the ``subvisor run --json`` it leaves in ``$OUT/run.json``."""
    full = {**cli_env(tmp_path / "home"), "PY": sys.executable}
    full.update({name: str(value) for name, value in env.items()})
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    answer: str = json.loads(Path(full["OUT"], "run.json").read_text())["answer"]
    return answer


# A project holding two filesystems of its own: a writable one, and one
# mounted read-only. The supervisor runs in a private mount namespace made for
# the test, as ``subvisor run`` would on a machine with such mounts.
_MOUNTS_SCRIPT = """
set -eu
mount -t tmpfs -o size=1m tmpfs "$P/scratch"
mount -t tmpfs -o size=1m tmpfs "$P/frozen"
echo data > "$P/frozen/f" && chmod 600 "$P/frozen/f"
mount -o remount,bind,ro "$P/frozen"
"$PY" -m supervisor.cli run --model "$MODEL" --json --sandbox workspace-write \\
    --network deny --cwd "$P" attack > "$OUT/run.json"
stat -c %a "$P/frozen/f" "$P/scratch/new" > "$OUT/modes"
"""


@pytest.mark.machine_may_lack(
    "root and unshare, to mount filesystems in a private mount namespace",
    when=os.geteuid() != 0 or shutil.which("unshare") is None,
)
def test_s_sbx_1_mounts_in_the_project_keep_their_writability(tmp_path: Path) -> None:
    """S-SBX-1: in workspace-write, a writable filesystem mounted in the project stays the
    subagent's to write and chmod; one mounted read-only there stays unchanged."""
    project, out = tmp_path / "project", tmp_path / "out"
    for path in (project / "scratch", project / "frozen", out):
        path.mkdir(parents=True)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("attack", "attack", subagent_type="general-purpose")]},
                {"text": "done:\n{{tool_result}}"},
            ],
            "attack": [
                {
                    "tool_calls": [
                        bash("echo new > scratch/new && chmod 0700 scratch/new; echo rc=$?"),
                        bash("chmod 0777 frozen/f; echo rc=$?; echo x >> frozen/f; echo rc=$?"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
        },
    )
    answer = _run_in_own_mounts(_MOUNTS_SCRIPT, tmp_path, P=project, OUT=out, MODEL=model)
    assert re.findall(r"rc=(\d+)", answer) == ["0", "1", "1"], answer
    assert (out / "modes").read_text().split() == ["600", "700"], answer


# A filesystem the host mounts while a read-only subagent runs. ``$B`` is a
# shared mount of the test's own namespace, so the mount made below it reaches
# every namespace copied from it, as a mount under a shared ``/`` reaches a
# supervisor's on a host. The subagent waits for ``$SIG`` after its marker
# shows in the process list, then tries the new filesystem's file.
_LATE_MOUNT_SCRIPT = """
set -eu
mount -t tmpfs -o size=1m tmpfs "$B"
mount --make-shared "$B"
mkdir "$B/mnt"
"$PY" -m supervisor.cli run --model "$MODEL" --json --cwd "$P" attack > "$OUT/run.json" &
run=$!
for _ in $(seq 600); do pgrep -f "$MARKER" > /dev/null && break; sleep 0.1; done
mount -t tmpfs -o size=1m tmpfs "$B/mnt"
echo data > "$B/mnt/f" && chmod 600 "$B/mnt/f"
touch "$SIG"
wait "$run"
stat -c %a "$B/mnt/f" > "$OUT/modes"
"""


@pytest.mark.machine_may_lack(
    "root and unshare, to mount filesystems in a private mount namespace",
    when=os.geteuid() != 0 or shutil.which("unshare") is None,
)
def test_s_sbx_1_a_filesystem_mounted_later_is_no_writable_way_out(tmp_path: Path) -> None:
    """S-SBX-1: a filesystem the host mounts while a read-only subagent runs gives it no file
    whose mode it may change (before, the mount arrived writable in its view)."""
    project, out, base = tmp_path / "project", tmp_path / "out", tmp_path / "base"
    for path in (project, out, base):
        path.mkdir()
    marker = f"wait-for-the-host-{os.getpid()}"
    signal = tmp_path / "mounted"
    wait = f"for i in $(seq 600); do [ -e {signal} ] && break; sleep 0.1; done; : {marker}"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("attack", "attack", subagent_type="Explore")]},
                {"text": "done:\n{{tool_result}}"},
            ],
            "attack": [
                {"tool_calls": [bash(f"{wait}; chmod 0777 {base}/mnt/f; echo rc=$?")]},
                {"text": "{{tool_result}}"},
            ],
        },
    )
    answer = _run_in_own_mounts(
        _LATE_MOUNT_SCRIPT, tmp_path, P=project, B=base, OUT=out, SIG=signal, MARKER=marker,
        MODEL=model,
    )  # fmt: skip
    assert re.findall(r"rc=(\d+)", answer) == ["1"], answer
    assert (out / "modes").read_text().split() == ["600"], answer
