"""The import graph has no circles: between modules, and between packages (issue #15).

``lint-imports`` keeps the layers in order (protocol and worker stand alone,
supervisor's rooms import downwards); this checks what contracts do not
say: that no two modules, and no two packages, import each other in a
circle. A package's own modules (``worker/_runtime.py``) count as that
package; its subpackages (``worker/workflow``) as packages of their own.
"""

from __future__ import annotations

import grimp

ROOTS = ("protocol", "worker", "supervisor")


def _graph() -> grimp.ImportGraph:
    # A typing-only import (``if TYPE_CHECKING``) is no dependency at run time.
    return grimp.build_graph(*ROOTS, exclude_type_checking_imports=True)


def _package(module: str, packages: set[str]) -> str:
    """The innermost package that holds ``module`` (a package holds itself)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        if name in packages:
            return name
    return parts[0]


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(edges) | {n for targets in edges.values() for n in targets})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    """Issue #15: no circle of imports between modules."""
    graph = _graph()
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _circles(edges) == []


def test_no_two_packages_import_each_other_in_a_circle() -> None:
    """Issue #15: no circle of imports between packages (a room and the rooms it uses)."""
    graph = _graph()
    packages = {m for m in graph.modules if graph.find_children(m)} | set(ROOTS)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        source = _package(module, packages)
        for imported in graph.find_modules_directly_imported_by(module):
            target = _package(imported, packages)
            if target != source:
                edges.setdefault(source, set()).add(target)
    assert _circles(edges) == []


def test_a_circle_is_found_when_there_is_one() -> None:
    """Control: the search finds a circle of three, and none in a chain."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"c"}}) == []
