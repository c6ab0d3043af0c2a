"""One error tree, drawn where a reader looks for it (issue 15).

- Every exception class defined anywhere in ``supervisor`` derives from
  ``SubvisorError``, so ``except SubvisorError`` catches whatever the
  supervisor raises on purpose (model errors included).
- The tree in ``supervisor._errors``'s docstring is the real one: each class,
  its parent in the tree, its bases from outside the tree and its room.
- Every exception class of ``protocol``, ``worker`` and ``supervisor`` is
  named ``...Error``; the old names kept as aliases are exactly the renamed
  ones that were public, and each is the renamed class.
- ``protocol`` raises ``LocalProtocolError`` (our bug) or
  ``RemoteProtocolError`` (the peer's), both ``ProtocolError``; never the
  base itself.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import protocol
import supervisor
import supervisor.workflow
from protocol import LocalProtocolError, ProtocolError, RemoteProtocolError
from supervisor import _errors
from supervisor._errors import SubvisorError

ROOTS = ("protocol", "worker", "supervisor")

#: Old name -> (package that exported it, its name now).
ALIASES = {
    ("supervisor", "RequestRefused"): "RequestRefusedError",
    ("supervisor.workflow", "ActorAnswerInvalid"): "ActorAnswerInvalidError",
    ("supervisor.workflow", "ActorAskFailed"): "ActorAskFailedError",
    ("supervisor.workflow", "ActorCrashed"): "ActorCrashedError",
    ("supervisor.workflow", "DuplicateActorName"): "DuplicateActorNameError",
    ("supervisor.workflow", "WorkflowFailed"): "WorkflowFailedError",
}


def _modules(root: str) -> list[str]:
    package = importlib.import_module(root)
    return [root] + [
        info.name
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}.")
        if info.name.rpartition(".")[2] != "__main__"  # running it is its only job
    ]


def _exception_classes(root: str) -> list[type[BaseException]]:
    """Every exception class defined (not just imported) in a module of ``root``."""
    found: dict[str, type[BaseException]] = {}
    for name in _modules(root):
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{value.__qualname__}"] = value
    return [found[key] for key in sorted(found)]


SUPERVISOR_ERRORS = _exception_classes("supervisor")


def test_the_walk_finds_every_room() -> None:
    """The walk reaches each room, so the checks below cover it."""
    rooms = {cls.__module__.split(".")[1] for cls in SUPERVISOR_ERRORS}
    assert {"cli", "config", "files", "kernel", "policy", "profiles", "providers"} <= rooms
    assert {"state", "workflow"} <= rooms


@pytest.mark.parametrize("cls", SUPERVISOR_ERRORS, ids=lambda cls: cls.__qualname__)
def test_every_supervisor_exception_is_a_subvisor_error(cls: type[BaseException]) -> None:
    """``except SubvisorError`` catches every exception ``supervisor`` defines."""
    assert issubclass(cls, SubvisorError), f"{cls.__module__}.{cls.__qualname__}"


def test_model_errors_are_subvisor_errors() -> None:
    """The gateway's errors were a second root (``ModelError(Exception)``); no more."""
    from supervisor.providers import ModelError, ModelStringError

    assert issubclass(ModelError, SubvisorError)
    assert issubclass(ModelStringError, ValueError)  # ``except ValueError`` still catches it


#: ``  * Name (OutsideBase, ...)   room``, two spaces of indent per level.
_TREE_LINE = re.compile(
    r"^(?P<indent> *)\* (?P<name>\w+)(?: \((?P<bases>[^)]*)\))? +(?P<room>\w+)$"
)


def _drawn_tree() -> set[tuple[str, str, tuple[str, ...], str]]:
    """(class, parent, outside bases, room) for each line of the drawing."""
    doc = _errors.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    lines = block.splitlines()
    assert lines[0].strip() == "SubvisorError"
    margin = len(lines[0]) - len(lines[0].lstrip())
    parents = ["SubvisorError"]
    drawn = set()
    for line in lines[1:]:
        match = _TREE_LINE.match(line[margin:])
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match["indent"]) // 2
        del parents[depth:]
        bases = tuple(b.rpartition(".")[2] for b in (match["bases"] or "").split(", ") if b)
        drawn.add((match["name"], parents[-1], bases, match["room"]))
        parents.append(match["name"])
    return drawn


def _real_tree() -> set[tuple[str, str, tuple[str, ...], str]]:
    real = set()
    for cls in SUPERVISOR_ERRORS:
        if cls is SubvisorError:
            continue
        parent = next(base for base in cls.__bases__ if issubclass(base, SubvisorError))
        outside = tuple(b.__name__ for b in cls.__bases__ if not issubclass(b, SubvisorError))
        real.add((cls.__name__, parent.__name__, outside, cls.__module__.split(".")[1]))
    return real


def test_the_docstring_draws_the_real_tree() -> None:
    """``supervisor._errors``'s drawing: every class, under its parent, in its room."""
    drawn, real = _drawn_tree(), _real_tree()
    assert not real - drawn, f"missing from the drawing, or drawn wrong: {sorted(real - drawn)}"
    assert not drawn - real, f"drawn, but not so in the code: {sorted(drawn - real)}"


@pytest.mark.parametrize("root", ROOTS)
def test_every_exception_is_named_error(root: str) -> None:
    """One naming rule for the three packages: an exception class ends in ``Error``."""
    names = [cls.__qualname__ for cls in _exception_classes(root)]
    assert [name for name in names if not name.endswith("Error")] == []


def _exported_aliases() -> set[tuple[str, str]]:
    """Public exception names that are not their class's own name."""
    found = set()
    for name in sorted({package for package, _ in ALIASES} | set(ROOTS)):
        module = importlib.import_module(name)
        for entry in getattr(module, "__all__", []):
            value = getattr(module, entry)
            is_exception = inspect.isclass(value) and issubclass(value, BaseException)
            if is_exception and value.__name__ != entry:
                found.add((name, entry))
    return found


def test_old_names_are_kept_only_where_they_were_public() -> None:
    """Each alias is the renamed class itself; no other alias exists."""
    assert _exported_aliases() == set(ALIASES)
    for (package, old), new in ALIASES.items():
        module = importlib.import_module(package)
        assert getattr(module, old) is getattr(module, new)
    assert supervisor.RequestRefused is supervisor.RequestRefusedError
    assert supervisor.workflow.ActorCrashed is supervisor.workflow.ActorCrashedError


def test_protocol_errors_say_whose_fault() -> None:
    """h11's split: both kinds are ``ProtocolError``, so ``except ProtocolError`` still works."""
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert not issubclass(LocalProtocolError, RemoteProtocolError)
    assert not issubclass(RemoteProtocolError, LocalProtocolError)
    assert RemoteProtocolError("x", limit="max_nesting").limit == "max_nesting"
    with pytest.raises(TypeError, match="LocalProtocolError or RemoteProtocolError"):
        ProtocolError("whose fault?")
    assert {cls.__name__ for cls in _exception_classes("protocol")} == {
        "ProtocolError",
        "LocalProtocolError",
        "RemoteProtocolError",
    }
    assert {"LocalProtocolError", "ProtocolError", "RemoteProtocolError"} <= set(protocol.__all__)
