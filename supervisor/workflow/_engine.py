"""The engine: ``@workflow``, ``agent()`` and ``run_workflow``.

A run goes in this order, and stops at the first step that fails:

1. read the script and find its actor sites (``DuplicateActorNameError`` here,
   before anything runs);
2. import it and find its one ``@workflow`` function; bind the inputs;
3. with ``amend``, read the earlier run's actors (their model pins) and
   answered asks from the journal; a named actor whose instructions, tools
   and model are unchanged may replay them, in order, while each ask's
   prompt and schema match (see ``Actor``);
4. journal the run, then call the function with a ``WorkflowContext``;
   ``agent()`` declares actors of this run (a name used twice is a
   ``DuplicateActorNameError`` here too), and their asks run, replay or fail;
5. stop every actor's worker and journal how the run ended.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TypeVar

import trio

from worker.workflow import (
    ScriptError,
    Workflow,
    WorkflowContext,
    bind_inputs,
    find_workflow,
    workflow,
)

from ..delegation._subvisor import Subvisor
from ..files._input_files import read_regular_file
from ._actor import Actor, ActorEnvironment
from ._errors import WorkflowError, WorkflowFailedError, WorkflowScriptError
from ._journal import RunRecord, WorkflowJournal
from ._roster import ActorRoster, EarlierActor, earlier_actors
from ._sites import ActorSite, analyse_script
from ._typed import dump_value

__all__ = [
    "Workflow",
    "WorkflowContext",
    "WorkflowOutcome",
    "agent",
    "load_workflow",
    "run_workflow",
    "workflow",
]

R = TypeVar("R")
#: A workflow script larger than this is refused.
MAX_SCRIPT_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class WorkflowOutcome:
    """A completed run: its id, the function's return value, the script's actor sites."""

    run_id: str
    value: Any
    sites: tuple[ActorSite, ...]


_CURRENT: contextvars.ContextVar[ActorRoster] = contextvars.ContextVar("subvisor_workflow_run")


def agent(
    name: str | None = None,
    *,
    system: str = "",
    tools: Sequence[str] | None = None,
    model: str | None = None,
    max_turns: int | None = None,
) -> Actor:
    """Declare an actor of the running workflow (S-ACT-1).

    ``name`` is its identity across amended re-runs (unique in a run;
    None: anonymous, never replayed). ``tools`` default to all an actor may
    have (S-ACT-4); ``model`` replaces the inherited one (S-ACT-5);
    ``max_turns`` bounds the model calls of one ask.
    """
    run = _CURRENT.get(None)
    if run is None:
        raise WorkflowError(
            "agent() declares an actor of a running workflow: call it inside a @workflow "
            "function run by `subvisor workflow run` (or supervisor.workflow.run_workflow)"
        )
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise WorkflowError(f"an actor's name must be a non-empty string, not {name!r}")
    return run.declare(
        name,
        system=system,
        tools=tools,
        model=model,
        max_turns=max_turns,
        line=_caller_line(run.script, sys._getframe(1)),
    )


def _caller_line(script: Path | str, frame: FrameType | None) -> int:
    """The line of the script that called ``agent()`` (through helpers, if any)."""
    first = frame.f_lineno if frame is not None else 0
    while frame is not None:
        if Path(frame.f_code.co_filename) == Path(script):
            return frame.f_lineno
        frame = frame.f_back
    return first


def load_workflow(script: Path, source: str) -> Workflow[Any]:
    """Import ``script`` and return its one ``@workflow`` function."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module_name = f"_subvisor_workflow_{digest}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, script)
    if spec is None or spec.loader is None:
        raise WorkflowScriptError(f"{script}: cannot be imported as a Python module")
    module: ModuleType = importlib.util.module_from_spec(spec)
    # Registered first, so the script's pydantic models and dataclasses can
    # resolve their own annotations.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise WorkflowScriptError(
            f"{script}: importing the script failed: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return find_workflow(module)
    except ScriptError as exc:
        raise WorkflowScriptError(f"{script}: {exc}") from None


def _bind_inputs(flow: Workflow[Any], inputs: Mapping[str, Any], script: Path) -> dict[str, Any]:
    try:
        return bind_inputs(flow, inputs)
    except ScriptError as exc:
        raise WorkflowScriptError(f"{script}: {exc}") from None


def _prepare(
    script: Path, inputs: Mapping[str, Any]
) -> tuple[Path, str, list[ActorSite], Workflow[Any], dict[str, Any]]:
    """Steps 1-2: read, analyse (before anything runs), import, bind the inputs."""
    path = script.resolve()
    try:
        source = read_regular_file(path, MAX_SCRIPT_BYTES).decode("utf-8")
    except OSError as exc:
        raise WorkflowScriptError(
            f"cannot read the workflow script {path}: {exc.strerror or exc}"
        ) from None
    except UnicodeDecodeError as exc:
        raise WorkflowScriptError(f"cannot read the workflow script {path}: {exc}") from None
    sites = analyse_script(source, str(path))
    flow = load_workflow(path, source)
    return path, source, sites, flow, _bind_inputs(flow, inputs, path)


async def run_workflow(
    host: Subvisor,
    script: Path | str,
    *,
    journal: WorkflowJournal,
    inputs: Mapping[str, Any] | None = None,
    amend: str | None = None,
    model: str | None = None,
    parent_model: str | None = None,
    cwd: Path | None = None,
    on_start: Callable[[str, list[ActorSite]], None] | None = None,
) -> WorkflowOutcome:
    """Run a workflow script on ``host``, journaled in ``journal`` (see the module doc).

    ``amend``: the run id (or a unique prefix) whose unchanged asks are
    replayed. ``model``: the run's model for every actor (S-ACT-5).
    ``parent_model``: the model actors inherit when the workflow names none
    (default: the host's configured model).
    ``on_start`` is told the run id and the sites once the run is journaled.
    Raises ``WorkflowScriptError``/``DuplicateActorNameError``/``WorkflowError``
    before the run starts, and ``WorkflowFailedError`` when the function raised.
    """
    inputs = dict(inputs or {})
    path, source, sites, flow, arguments = _prepare(Path(script), inputs)
    earlier: dict[str, EarlierActor] = {}
    amends: str | None = None
    if amend is not None:
        previous = journal.find_run(amend)
        if previous is None:
            raise WorkflowError(
                f"no workflow run {amend!r} to amend in {journal.path}; "
                "`subvisor workflow show` lists the recent runs"
            )
        amends = previous.run_id
        earlier = earlier_actors(journal, amends)
    parent_model = flow.model or parent_model or host.settings.model or model
    if not parent_model:
        raise WorkflowError(
            "no model for this workflow's actors: pass --model provider:model, set "
            "SUBVISOR_MODEL or `model = ...` in $SUBVISOR_HOME/config.toml, or write"
            " @workflow(model=...)"
        )
    run_id = f"wf_{uuid.uuid4().hex[:12]}"
    workdir = (cwd or Path.cwd()).resolve()
    journal.start_run(
        RunRecord(
            run_id=run_id,
            workflow=flow.name,
            script_path=str(path),
            script_hash=hashlib.sha256(source.encode()).hexdigest(),
            parent_model=parent_model,
            run_model=model,
            inputs=dump_value(inputs),
            sites=[{"line": s.line, "kind": s.kind, "name": s.name} for s in sites],
            amends=amends,
        )
    )
    if on_start is not None:
        on_start(run_id, sites)
    value: Any = None
    failure: Exception | None = None
    try:
        async with trio.open_nursery() as nursery:
            env = ActorEnvironment(
                host=host,
                journal=journal,
                run_id=run_id,
                cwd=str(workdir),
                nursery=nursery,
                lent_mcp=host.mcp.tool_specs(lent=True),
            )
            run = ActorRoster(
                env,
                script=path,
                parent_model=parent_model,
                run_model=model,
                earlier=earlier,
                amends=amends,
            )
            context = WorkflowContext(
                run_id=run_id, cwd=workdir, model=parent_model, inputs=inputs, amends=amends
            )
            token = _CURRENT.set(run)
            try:
                value = await flow.fn(context, **arguments)
            except Exception as exc:
                # Raised after the nursery, so the caller sees it unwrapped.
                failure = exc
            finally:
                _CURRENT.reset(token)
                await run.close()
                # The actors' event readers end with their workers; nothing else is left.
                nursery.cancel_scope.cancel()
    except BaseException:
        journal.finish_run(run_id, "failed", error="interrupted")
        raise
    if failure is not None:
        journal.finish_run(run_id, "failed", error=f"{type(failure).__name__}: {failure}")
        raise WorkflowFailedError(run_id, failure) from failure
    journal.finish_run(run_id, "completed", result=dump_value(value))
    return WorkflowOutcome(run_id=run_id, value=value, sites=tuple(sites))
