"""Running the ``subvisor`` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["CHECKOUT", "cli_env", "run_cli"]

#: This checkout: a child started in another directory imports its code, not an installed copy.
CHECKOUT = Path(__file__).resolve().parents[2]


def cli_env(home: Path) -> dict[str, str]:
    """This environment for a ``subvisor`` child: its own home, wide output, not in a tree,
    this checkout's code whatever its working directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("SUBVISOR_TREE", "SUBVISOR_MODEL")}
    env["SUBVISOR_HOME"] = str(home)
    env["COLUMNS"] = "200"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHECKOUT), env.get("PYTHONPATH")]))
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
