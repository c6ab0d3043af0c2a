"""Running subvisor as an unprivileged user (uid 65534), from a test suite run as root.

CI runs as root, but some attacks differ for a user without capabilities
(a user's supervisor is dumpable unless it says otherwise; it has no
``CAP_SYS_ADMIN`` for a mount namespace, so it needs a user namespace).
``run_unprivileged`` runs a command as ``nobody`` with this checkout and its
installed packages importable: their paths may sit below a directory nobody
may enter (``/root``), so as root they are bind-mounted, in a mount namespace
of the command's own, below a directory nobody may read. Run by a user who
is not root, the command simply runs as that user.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NOBODY", "Unprivileged", "unprivileged"]

NOBODY = 65534
_REPO = Path(__file__).resolve().parents[2]


def _python() -> str:
    """An interpreter of this minor version that nobody may run."""
    mine = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        os.path.realpath(sys.executable),
        f"/usr/bin/{mine}",
        f"/usr/local/bin/{mine}",
    ):
        if _nobody_may(["test", "-x", candidate]):
            return candidate
    raise RuntimeError(f"no {mine} that uid {NOBODY} may run: install one (apt-get install {mine})")


def _nobody_may(argv: list[str]) -> bool:
    if os.geteuid() != 0:
        return subprocess.run(argv, capture_output=True).returncode == 0
    return (
        subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
            capture_output=True,
        ).returncode
        == 0
    )


class Unprivileged:
    """A scratch directory owned by the unprivileged user, and a way to run commands there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._site = next(p for p in site.getsitepackages() if Path(p, "pydantic").exists())

    def run(
        self, argv: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (``python`` as its first word is this interpreter) as the user."""
        repo, packages = str(_REPO), self._site
        if os.geteuid() == 0:
            repo, packages = str(self.root / ".repo"), str(self.root / ".site")
        full_env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "PYTHONPATH": f"{repo}:{packages}",
            "SUBVISOR_HOME": str(self.root / "home"),
            **(env or {}),
        }
        command = [_python() if argv[0] == "python" else argv[0], *argv[1:]]
        if os.geteuid() == 0:
            binds = (
                f"mount --bind {_REPO} {repo} && mount --bind {self._site} {packages} && "
                f"exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups "
                '--inh-caps=-all --bounding-set=-all "$@"'
            )
            command = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                binds,
                "sh",
                *command,
            ]
        return subprocess.run(
            command, env=full_env, cwd=self.root, capture_output=True, text=True, timeout=timeout
        )


@contextmanager
def unprivileged() -> Iterator[Unprivileged]:
    """A scratch directory for the unprivileged user, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="subvisor-nobody-"))
    try:
        for name in (".repo", ".site", "home"):
            (root / name).mkdir()
        if os.geteuid() == 0:
            for path in (root, root / "home"):
                os.chown(path, NOBODY, NOBODY)
        yield Unprivileged(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
