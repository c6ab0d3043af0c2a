"""``read_only_except``: the mount view that keeps file metadata out of a restricted worker's reach.

S-SBX-1: Landlock has no right for ``chmod``, ``utimensat`` or ``setxattr``;
a read-only mount refuses them. These run the real step in a forked child (its
own mount namespace, as a worker's) and check, with real system calls, what
stays changeable and what does not; the parent's view is untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from worker import _mounts
from worker._privileges import drop_privileges

needs_root = pytest.mark.machine_may_lack(
    "root, to make mount namespaces and bind mounts", when=os.geteuid() != 0
)


def _in_child(body: Callable[[], object]) -> object:
    """Run ``body`` in a forked child; its JSON result (or its error) comes back."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        try:
            os.close(read_fd)
            said = json.dumps(body())
        except BaseException as exc:
            said = json.dumps({"error": repr(exc)})
        os.write(write_fd, said.encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _chmod(path: Path) -> str:
    try:
        os.chmod(path, 0o777)
    except OSError as exc:
        return exc.strerror or str(exc)
    return "changed"


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True)


@needs_root
def test_s_sbx_1_only_the_writable_paths_keep_their_metadata_changeable(tmp_path: Path) -> None:
    """S-SBX-1: outside the writable paths chmod is refused; inside, a read-only bind stays
    read-only and a writable bind writable; a symlinked root is writable where it resolves;
    a path kept out of the write grant is read-only, a writable path inside it writable;
    /dev/null is written; the namespace the step ran from is left as it was."""
    root, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    dirs = (root / ".git", root / "pinned", root / "kept" / "inner", elsewhere, tmp_path / "real")
    for d in dirs:
        d.mkdir(parents=True)
    files = {
        "outside": elsewhere / "f",
        "inside": root / "f",
        "git": root / ".git" / "config",
        "pinned": root / "pinned" / "f",
        "kept": root / "kept" / "f",
        "inside kept": root / "kept" / "inner" / "f",
        "linked": tmp_path / "real" / "f",
    }
    for path in files.values():
        path.write_text("x\n")
        path.chmod(0o600)
    (tmp_path / "link").symlink_to(tmp_path / "real")

    def body() -> object:
        assert _mounts.private_proc() == ""
        _mount("--bind", str(root / ".git"), str(root / ".git"))
        _mount("-o", "remount,bind,ro", str(root / ".git"))
        _mount("--bind", str(root / "pinned"), str(root / "pinned"))
        error = _mounts.read_only_except(
            [str(root), str(root / "kept" / "inner"), str(tmp_path / "link"), str(tmp_path / "no")],
            kept=[str(root / "kept")],
        )
        with open(os.devnull, "w") as null:
            null.write("x")
        return {"error": error, **{name: _chmod(path) for name, path in files.items()}}

    seen = _in_child(body)
    assert seen == {
        "error": "",
        "outside": "Read-only file system",
        "inside": "changed",
        "git": "Read-only file system",
        "pinned": "changed",
        "kept": "Read-only file system",
        "inside kept": "changed",
        "linked": "changed",
    }
    # The step's namespace was the child's own: here nothing is read-only.
    assert _chmod(files["outside"]) == "changed"


@needs_root
def test_s_sbx_2_without_a_mount_namespace_the_step_says_why_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """S-SBX-2: with no capability to take a mount namespace of its own, the step reports
    why, and the files stay as changeable as before (the report, not the view, says so)."""
    target = tmp_path / "f"
    target.write_text("x\n")

    def body() -> object:
        drop_privileges()
        return {
            "error": _mounts.read_only_except([str(tmp_path / "nothing")]),
            "chmod": _chmod(target),
        }

    seen = _in_child(body)
    assert isinstance(seen, dict) and "unshare(CLONE_NEWNS)" in seen["error"], seen
    assert seen["chmod"] == "changed"
