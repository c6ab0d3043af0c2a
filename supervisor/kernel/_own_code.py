"""Where the code the supervisor's own processes load lives, kept out of every worker's reach.

During a run the supervisor starts processes that load their code afresh:
gateway processes (they receive the keys), a zygote again, exec'd workers.
Each runs ``python -P -m``, so the current directory is never searched, but
the interpreter still loads its environment (``site-packages``, whose
``.pth`` files run at start-up) and subvisor's packages from disk. Where
those lie below a worker's writable root (subvisor installed in the
project's virtualenv, or run from its source checkout), the worker gets them
read-only, as it gets ``.git`` (S-SEC-1, S-SEC-3). A writable root that is
one of them, or lies inside one, cannot be protected that way: the spawn is
refused.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from ._environment import CHILD_IMPORT_ROOTS

__all__ = ["own_code", "own_code_below"]


@functools.cache
def own_code() -> tuple[str, ...]:
    """The directories of this interpreter's environment and of subvisor's packages, resolved.

    A virtualenv whole (its ``pyvenv.cfg`` and ``bin/python`` decide what
    starts); a system interpreter's prefix (``/usr``) not: only its library
    directories, else every project under ``/usr/src`` would count.
    """
    # What this process imports from, and what its children are told to.
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    places = {p for p in (*sys.path, *CHILD_IMPORT_ROOTS, *inherited) if os.path.isabs(p)}
    if sys.prefix != sys.base_prefix:
        places.add(sys.prefix)
    paths = sysconfig.get_paths()
    places.update(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
    for package in ("protocol", "supervisor", "worker"):
        spec = importlib.util.find_spec(package)
        places.update((spec.submodule_search_locations or ()) if spec is not None else ())
    return tuple(sorted({str(Path(p).resolve()) for p in places if os.path.isdir(p)}))


def own_code_below(roots: Iterable[str]) -> tuple[tuple[str, ...], str | None]:
    """Of ``own_code()``: the places strictly below any of ``roots``, and one that holds a root.

    The second is None when no root is (or lies inside) a place of subvisor's code.
    """
    # Strings, not ``PurePath.is_relative_to``: this runs once per spawn, and
    # the pathlib version cost 0.15 ms of the supervisor's CPU per subagent.
    # The roots are resolved on every call (never cached): a worker may have
    # turned a root's component into a symlink since the last spawn.
    places = own_code()
    below: list[str] = []
    for root in roots:
        resolved = os.path.realpath(root)
        for place in places:
            if _within(resolved, place):
                return (), place
            if _within(place, resolved):
                below.append(place)
    return tuple(dict.fromkeys(below)), None


def _within(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies below it (both absolute and resolved)."""
    return path == folder or path.startswith(folder if folder.endswith("/") else folder + "/")
