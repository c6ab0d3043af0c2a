"""Actor sites: the ``agent(...)`` calls of a workflow script, found before it runs.

The script is parsed, never executed, so a bad script is refused before any
worker starts or any model is called. A call counts as a site when it calls
``agent`` imported from ``supervisor.workflow`` (under any alias), or the
``agent`` attribute of that module imported under any name. Its name is the
first positional argument or ``name=``:

=====================  ===========================================
``agent("critic")``    named site ``critic``
``agent(system=...)``  anonymous site (allowed, never replayed)
``agent(f"w{i}")``     dynamic site: its name is checked at run time
=====================  ===========================================

Two named sites with the same literal name are a ``DuplicateActorNameError``
(S-ACT-2), naming both lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal

from ._errors import DuplicateActorNameError, WorkflowScriptError

__all__ = ["ActorSite", "analyse_script", "check_unique_names", "workflow_functions"]

_MODULE = "supervisor.workflow"


@dataclass(frozen=True, slots=True)
class ActorSite:
    """One ``agent(...)`` call of a script."""

    line: int
    kind: Literal["named", "anonymous", "dynamic"]
    name: str | None = None

    def describe(self) -> str:
        """``critic (line 12)``, ``<anonymous> (line 20)`` or ``<dynamic> (line 7)``."""
        label = self.name if self.kind == "named" else f"<{self.kind}>"
        return f"{label} (line {self.line})"


def analyse_script(source: str, filename: str = "<workflow>") -> list[ActorSite]:
    """The actor sites of ``source``, in line order.

    Raises ``WorkflowScriptError`` when it is not valid Python and
    ``DuplicateActorNameError`` when two named sites share a name.
    """
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise WorkflowScriptError(
            f"{filename}:{exc.lineno}: the workflow script is not valid Python: {exc.msg}"
        ) from None
    functions, modules = _imported_names(tree)
    sites = [
        _site(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _calls_agent(node.func, functions, modules)
    ]
    sites.sort(key=lambda site: site.line)
    check_unique_names(sites, filename)
    return sites


def check_unique_names(sites: list[ActorSite], filename: str) -> None:
    """Raise ``DuplicateActorNameError`` for the first name two named sites share."""
    first_line: dict[str, int] = {}
    for site in sites:
        if site.kind != "named" or site.name is None:
            continue
        if site.name in first_line:
            raise DuplicateActorNameError(
                site.name, first_line[site.name], site.line, script=filename
            )
        first_line[site.name] = site.line


def _imported_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Local names bound to ``supervisor.workflow.agent``, and to the module itself."""
    functions: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                if node.module == _MODULE and alias.name == "agent":
                    functions.add(alias.asname or "agent")
                elif node.module == "supervisor" and alias.name == "workflow":
                    modules.add(alias.asname or "workflow")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == _MODULE:
                    # `import supervisor.workflow` binds `supervisor`; the
                    # attribute chain is matched in `_calls_agent`.
                    modules.add(alias.asname or _MODULE)
    return functions, modules


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def _calls_agent(func: ast.expr, functions: set[str], modules: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in functions
    if isinstance(func, ast.Attribute) and func.attr == "agent":
        return _dotted(func.value) in modules
    return False


def _site(call: ast.Call) -> ActorSite:
    name_node: ast.expr | None = call.args[0] if call.args else None
    for keyword in call.keywords:
        if keyword.arg == "name":
            name_node = keyword.value
    if name_node is None or (isinstance(name_node, ast.Constant) and name_node.value is None):
        return ActorSite(line=call.lineno, kind="anonymous")
    if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str):
        return ActorSite(line=call.lineno, kind="named", name=name_node.value)
    return ActorSite(line=call.lineno, kind="dynamic")


def workflow_model(source: str, filename: str = "<workflow>") -> str | None:
    """The ``model=`` of the script's ``@workflow(...)`` decorator, read without running it.

    A model-written script runs in a worker the supervisor does not trust, so
    its default model is read from the source: a string literal, or nothing.
    Raises ``WorkflowScriptError`` for anything else.
    """
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            dotted = _dotted(decorator.func)
            if dotted is None or dotted.rsplit(".", 1)[-1] != "workflow":
                continue
            for keyword in decorator.keywords:
                if keyword.arg != "model":
                    continue
                value = keyword.value
                if isinstance(value, ast.Constant) and (
                    value.value is None or isinstance(value.value, str)
                ):
                    return value.value or None
                raise WorkflowScriptError(
                    f"{filename}:{decorator.lineno}: @workflow(model=...) must be a string "
                    'literal such as "openai:gpt-4o-mini" (or left out)'
                )
    return None


def workflow_functions(source: str) -> list[str]:
    """The names of the ``async def`` functions decorated ``@workflow`` or ``@workflow(...)``.

    Parsed, never run (call ``analyse_script`` first for a readable syntax error).
    """
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                dotted = _dotted(target)
                if dotted is not None and dotted.rsplit(".", 1)[-1] == "workflow":
                    names.append(node.name)
    return names
