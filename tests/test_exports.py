"""The public face of each package, as trio's ``test_exports`` checks its own.

A public package is one whose dotted name has no part starting with ``_``.
Each names what it offers in ``__all__``: every name there exists, appears
once, and (class or function) has a docstring; nothing public that it
defines or imports is left out of ``__all__``. A room of ``supervisor/``
that offers nothing through its package (``state``, ``policy``, ...) has no
``__all__`` and defines nothing public: its modules are its own.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

ROOTS = ("protocol", "worker", "supervisor")


def _public_packages() -> list[str]:
    names = list(ROOTS)
    for root in ROOTS:
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}."):
            if info.ispkg and not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return sorted(names)


PUBLIC_PACKAGES = _public_packages()


def test_every_room_of_supervisor_is_found() -> None:
    """The walk sees the rooms, so the checks below cover them."""
    for room in ("kernel", "policy", "profiles", "state", "delegation", "config", "cli", "files"):
        assert f"supervisor.{room}" in PUBLIC_PACKAGES


def _public_attributes(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__ import annotations
    }


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_all_names_exist_once(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert len(exported) == len(set(exported)), f"{name}.__all__ names something twice"
    missing = [entry for entry in exported if not hasattr(module, entry)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_nothing_public_is_left_out_of_all(name: str) -> None:
    module = importlib.import_module(name)
    left_out = _public_attributes(module) - set(getattr(module, "__all__", []))
    assert not left_out, f"{name} has public names not in __all__: {sorted(left_out)}"


@pytest.mark.parametrize("name", PUBLIC_PACKAGES)
def test_every_public_name_has_a_docstring(name: str) -> None:
    module = importlib.import_module(name)
    assert (module.__doc__ or "").strip(), f"{name} has no docstring"
    undocumented = [
        entry
        for entry in getattr(module, "__all__", [])
        if (inspect.isclass(obj := getattr(module, entry)) or inspect.isfunction(obj))
        and not (obj.__doc__ or "").strip()
    ]
    assert not undocumented, f"{name} exports names without a docstring: {undocumented}"
