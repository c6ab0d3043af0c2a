"""The ``workflow.run`` command: run one workflow script in this (sandboxed) worker.

The script is a model's code. It runs here, under the worker's sandbox (no
keys, no network, its filesystem rules, its caps), and reaches the
supervisor only through the script API's two requests (``worker.workflow``).

How ``from supervisor.workflow import agent`` resolves here: before the
script runs, ``sys.modules`` gets a module named ``supervisor`` that is not a
package and holds one attribute, ``workflow``, and ``supervisor.workflow``
names ``worker.workflow``. Scripts keep the one import name the docs,
``subvisor workflow run`` and the site analysis use, and the worker still
never imports the real ``supervisor``: anything else under that name
(``supervisor.delegation``, ``Subvisor``) fails to import. A script that
digs the real package out anyway gains nothing: it holds no key, cannot
write subvisor's home, and a supervisor started in a worker tree refuses to
run (S-SEC-7).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import trio
from pydantic import BaseModel

from protocol import (
    MAX_CHECK_PROBLEM_CHARS,
    WORKFLOW_CHECK_ANSWER,
    WORKFLOW_RUN,
    WORKFLOW_SCRIPT_ERROR,
    MethodSpec,
    WorkflowAnswerCheck,
    WorkflowCheckResult,
    WorkflowScriptOutcome,
    WorkflowScriptSpec,
)

from . import workflow as script_api
from ._channel import SupervisorError, SupervisorLink
from ._commands import Command, CommandContext, CommandError, command_table
from .workflow import (
    CallRefusedError,
    ScriptError,
    ScriptRun,
    WorkflowContext,
    bind_inputs,
    dump_value,
    enter_run,
    find_workflow,
    leave_run,
)

__all__ = ["WORKFLOW_COMMANDS", "install_script_api"]

P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)

#: The error code of a workflow function that raised.
SCRIPT_FAILED = "script_failed"

# The script this worker runs, for ``workflow.check_answer``: that request
# runs in a task of its own, outside the script's context. One at a time.
_running: ScriptRun | None = None


def install_script_api() -> None:
    """Make ``supervisor.workflow`` name the script API, and nothing else under ``supervisor``."""
    package = ModuleType(
        "supervisor",
        "Inside a script worker only supervisor.workflow, the script API, exists.",
    )
    package.workflow = script_api  # type: ignore[attr-defined]
    sys.modules["supervisor"] = package
    sys.modules["supervisor.workflow"] = script_api


def _load(spec: WorkflowScriptSpec) -> ModuleType:
    digest = hashlib.sha256(spec.source.encode()).hexdigest()[:12]
    module = ModuleType(f"_subvisor_workflow_{digest}")
    module.__file__ = spec.filename
    # Registered first, so the script's pydantic models and dataclasses can
    # resolve their own annotations.
    sys.modules[module.__name__] = module
    try:
        code = compile(spec.source, spec.filename, "exec")
        exec(code, module.__dict__)
    except Exception as exc:
        raise CommandError(
            WORKFLOW_SCRIPT_ERROR,
            f"{spec.filename}: importing the script failed: {type(exc).__name__}: {exc}",
        ) from None
    return module


async def _run_script(spec: WorkflowScriptSpec, ctx: CommandContext) -> WorkflowScriptOutcome:
    install_script_api()
    module = _load(spec)
    try:
        flow = find_workflow(module)
        arguments = bind_inputs(flow, spec.inputs)
    except ScriptError as exc:
        raise CommandError(WORKFLOW_SCRIPT_ERROR, f"{spec.filename}: {exc}") from None
    context = WorkflowContext(
        run_id=spec.run_id,
        cwd=Path(spec.cwd),
        model=spec.model,
        inputs=dict(spec.inputs),
        amends=spec.amends,
    )
    value: Any = None
    failure: Exception | None = None
    global _running
    if _running is not None:
        raise CommandError(WORKFLOW_SCRIPT_ERROR, "this worker is already running a script")
    async with trio.open_nursery() as nursery:
        run = ScriptRun(_SupervisorAsker(ctx.link), nursery, spec.filename)
        token = enter_run(run)
        _running = run
        try:
            value = await flow.fn(context, **arguments)
        except Exception as exc:
            # Raised after the nursery, so it is reported unwrapped.
            failure = exc
        finally:
            _running = None
            leave_run(token)
            # Declarations nobody asked are not waited for.
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise CommandError(SCRIPT_FAILED, f"{type(failure).__name__}: {failure}")
    return WorkflowScriptOutcome(value=dump_value(value))


def _check_answer(params: WorkflowAnswerCheck, ctx: CommandContext) -> WorkflowCheckResult:
    """Validate a typed ask's answer against the script's type (a plain function: CPU only)."""
    try:
        if _running is None:
            raise KeyError(params.check_id)
        problem = _running.check_answer(params.check_id, params.text)
    except KeyError:
        raise CommandError(
            "no_such_ask", f"no typed ask {params.check_id} of this script is in flight"
        ) from None
    except Exception as exc:
        # The script's own validators raised something else: the answer does not fit.
        problem = f"answer: {type(exc).__name__}: {exc}"
    if problem is not None and len(problem) > MAX_CHECK_PROBLEM_CHARS:
        problem = problem[: MAX_CHECK_PROBLEM_CHARS - 3] + "..."
    return WorkflowCheckResult(problem=problem)


class _SupervisorAsker:
    """The script API's way to the supervisor (``SupervisorCalls``): this worker's link."""

    def __init__(self, link: SupervisorLink) -> None:
        self._link = link

    async def __call__(self, method: MethodSpec[P, R], params: P, /) -> R:
        try:
            return await self._link.call(method, params)
        except SupervisorError as exc:
            raise CallRefusedError(exc.code, exc.message) from None


WORKFLOW_COMMANDS = command_table(
    Command(WORKFLOW_RUN, _run_script), Command(WORKFLOW_CHECK_ANSWER, _check_answer)
)
