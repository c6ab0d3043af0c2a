"""The environment a zygote and its workers get: an allowlist, nothing else.

Credentials live in the supervisor's environment (``OPENAI_API_KEY``, ...);
workers run model-directed code, so they must never see them. Rather than
deleting known secrets, everything not on the allowlist is dropped.
"""

from __future__ import annotations

import importlib.metadata
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "CHILD_IMPORT_ROOTS",
    "ENV_ALLOWLIST",
    "IMPORT_ROOT",
    "TREE_ENV",
    "new_tree_id",
    "worker_environment",
]

TREE_ENV = "SUBVISOR_TREE"

ENV_ALLOWLIST = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",
        "TERM",
        "TZ",
        "TMPDIR",
        "COLUMNS",
        "LINES",
        "NO_COLOR",
    }
)

# The directory holding the ``protocol``/``worker`` packages (this file is
# ``<root>/supervisor/kernel/_environment.py``), so a zygote finds them even
# when subvisor runs from a source checkout, not installed.
IMPORT_ROOT = str(Path(__file__).resolve().parents[2])


def _installed() -> bool:
    try:
        importlib.metadata.distribution("subvisor")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


#: What the supervisor's own processes get first on ``PYTHONPATH``. Nothing
#: where subvisor is installed (its ``site-packages``, or an editable
#: install's finder, serves the packages): a source checkout on the path
#: would put every top-level module a subagent writes there (``trio.py``)
#: ahead of the real one, in a gateway process with the keys.
CHILD_IMPORT_ROOTS: tuple[str, ...] = () if _installed() else (IMPORT_ROOT,)


def new_tree_id() -> str:
    """A fresh id tagging every process of one supervisor's tree."""
    return f"tree_{uuid.uuid4().hex[:16]}"


def worker_environment(tree_id: str, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The scrubbed environment for the zygote and every worker of ``tree_id``."""
    env = source if source is not None else os.environ
    scrubbed = {key: value for key, value in env.items() if key in ENV_ALLOWLIST}
    scrubbed.setdefault("PATH", os.defpath)
    scrubbed[TREE_ENV] = tree_id
    # The zygote imports what the supervisor imports: our packages first,
    # then wherever the supervisor was told to find the rest.
    inherited = env.get("PYTHONPATH", "")
    scrubbed["PYTHONPATH"] = os.pathsep.join(p for p in (*CHILD_IMPORT_ROOTS, inherited) if p)
    return scrubbed
