"""Running the ``subvisor`` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import supervisor

__all__ = ["cli_env", "run_cli"]

#: The checkout whose ``supervisor`` these tests import: the child runs the same code,
#: not whatever copy the environment has installed.
_CHECKOUT = str(Path(supervisor.__file__).resolve().parent.parent)


#: The checkout under test; first on the child's path, whatever its working directory.
REPO_ROOT = Path(__file__).resolve().parents[2]


def cli_env(home: Path) -> dict[str, str]:
    """This environment for a ``subvisor`` child: its own home, wide output, not in a tree.

    The child imports this checkout's code, not whichever one the virtualenv
    has installed (another worktree's, say).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("SUBVISOR_TREE", "SUBVISOR_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["SUBVISOR_HOME"] = str(home)
    env["COLUMNS"] = "200"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_CHECKOUT, os.environ.get("PYTHONPATH")]))
    return env


def run_cli(
    home: Path, *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``subvisor ARGS`` to completion, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        cwd=cwd,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
