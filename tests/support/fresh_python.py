"""Running a test's script in a fresh interpreter, for state that is the whole process's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

__all__ = ["run_fresh_python"]


def run_fresh_python(script: str, *, prelude: str = "") -> str:
    """Run ``prelude`` then ``script`` (dedented) in a new interpreter; its stdout.

    Fails the test with the script's stderr unless it exits 0: its own
    ``assert`` statements are the test's assertions.
    """
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
