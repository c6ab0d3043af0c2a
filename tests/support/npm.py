"""Node packages the tests use, installed from a folder's pinned lockfile on first use.

``npm install --no-save`` rather than ``npm ci``: the lockfiles pin every
version we install, but npm leaves out of them the optional packages of
other platforms that its registry does not serve (opencode's darwin and
windows builds, vite's windows helper), and ``npm ci`` then refuses the
lockfile as out of sync. ``install`` reads the same lockfile, installs the
same versions and writes nothing back. ``.ci/run`` does the same up front.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["NPM_INSTALL", "npm_installed"]

NPM_INSTALL = ("install", "--no-save", "--silent", "--no-audit", "--no-fund")


def npm_installed(executable: Path, folder: Path, *, timeout: float) -> Path:
    """``executable``, after installing ``folder``'s packages if it is not there yet.

    Without node and npm the test fails naming what to install: a machine
    that lacks them can have them, so they are no reason to skip.
    """
    if not executable.exists():
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            pytest.fail(
                "node and npm are needed for this test: install Node.js (>= 20, with npm), "
                f"then run `npm {' '.join(NPM_INSTALL)}` in {folder}"
            )
        subprocess.run([npm, *NPM_INSTALL], cwd=folder, check=True, timeout=timeout)
    return executable
