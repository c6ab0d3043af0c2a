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
import inspect
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, Generic, TypeVar, overload

import trio
from pydantic import TypeAdapter, ValidationError

from ..delegation._subvisor import Subvisor
from ..files._input_files import read_regular_file
from ..providers import ModelError
from ._actor import Actor, ActorDefinition, ActorEnvironment
from ._contract import actor_system_prompt, actor_tool_names
from ._errors import (
    DuplicateActorNameError,
    WorkflowError,
    WorkflowFailedError,
    WorkflowScriptError,
)
from ._journal import ActorRecord, AskRecord, RunRecord, WorkflowJournal
from ._model import resolve_actor_model
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


class Workflow(Generic[R]):
    """An ``async def`` decorated with ``@workflow``; the engine runs it."""

    def __init__(self, fn: Callable[..., Awaitable[R]], *, model: str | None = None) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@workflow needs an async def, not {fn!r}")
        if not inspect.signature(fn).parameters:
            raise TypeError(f"@workflow {fn.__name__}() must take the run's context first: (ctx)")
        self.fn = fn
        self.name = fn.__name__
        #: The workflow's own model: its actors' default (the parent's model, S-ACT-5).
        self.model = model
        self.__doc__ = fn.__doc__


@overload
def workflow(fn: Callable[..., Awaitable[R]], /) -> Workflow[R]: ...


@overload
def workflow(
    *, model: str | None = None
) -> Callable[[Callable[..., Awaitable[R]]], Workflow[R]]: ...


def workflow(
    fn: Callable[..., Awaitable[R]] | None = None, /, *, model: str | None = None
) -> Workflow[R] | Callable[[Callable[..., Awaitable[R]]], Workflow[R]]:
    """Mark ``async def name(ctx, **inputs)`` as a workflow; ``model`` is its default model."""
    if fn is not None:
        return Workflow(fn, model=model)

    def decorate(inner: Callable[..., Awaitable[R]]) -> Workflow[R]:
        return Workflow(inner, model=model)

    return decorate


@dataclass(frozen=True, slots=True)
class WorkflowContext:
    """What a workflow function gets first: which run this is, and where it works."""

    run_id: str
    cwd: Path
    #: The model its actors inherit (the workflow's, else the configured one).
    model: str
    inputs: Mapping[str, Any]
    #: The run this one amends, if any.
    amends: str | None = None


@dataclass(frozen=True, slots=True)
class WorkflowOutcome:
    """A completed run: its id, the function's return value, the script's actor sites."""

    run_id: str
    value: Any
    sites: tuple[ActorSite, ...]


_CURRENT: contextvars.ContextVar[_Run] = contextvars.ContextVar("subvisor_workflow_run")


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


def _caller_line(script: Path, frame: FrameType | None) -> int:
    """The line of the script that called ``agent()`` (through helpers, if any)."""
    first = frame.f_lineno if frame is not None else 0
    while frame is not None:
        if Path(frame.f_code.co_filename) == script:
            return frame.f_lineno
        frame = frame.f_back
    return first


@dataclass(slots=True)
class _Earlier:
    """What an amended run may reuse of one named actor of the earlier run."""

    actor: ActorRecord
    asks: list[AskRecord] = field(default_factory=list)


class _Run:
    """One run in progress: declares actors and closes them at the end."""

    def __init__(
        self,
        env: ActorEnvironment,
        *,
        script: Path,
        parent_model: str,
        run_model: str | None,
        earlier: dict[str, _Earlier],
        amends: str | None,
    ) -> None:
        self.env = env
        self.script = script
        self.parent_model = parent_model
        self.run_model = run_model
        self.earlier = earlier
        self.amends = amends
        self.actors: list[Actor] = []
        self._names: dict[str, int] = {}
        self._anonymous = 0

    def declare(
        self,
        name: str | None,
        *,
        system: str,
        tools: Sequence[str] | None,
        model: str | None,
        max_turns: int | None,
        line: int,
    ) -> Actor:
        host = self.env.host
        if name is not None:
            if name in self._names:
                raise DuplicateActorNameError(
                    name, self._names[name], line, script=str(self.script)
                )
            self._names[name] = line
            key = name
        else:
            self._anonymous += 1
            key = f"~{self._anonymous}"
        earlier = self.earlier.get(name) if name is not None else None
        label = name if name is not None else f"(anonymous, line {line})"
        chosen = resolve_actor_model(
            label,
            run_model=self.run_model,
            declared=model,
            pin=earlier.actor.model if earlier is not None else None,
            parent_model=self.parent_model,
        )
        try:
            host.gateway.resolve(chosen.model)
        except ModelError as exc:
            raise WorkflowError(
                f"actor {label}: model {chosen.model!r} is unusable: {exc}"
            ) from None
        if max_turns is not None and max_turns < 1:
            raise WorkflowError(f"actor {label}: max_turns must be at least 1, not {max_turns}")
        definition = ActorDefinition(
            key=key,
            name=name,
            line=line,
            system=actor_system_prompt(system, self.env.cwd),
            tools=actor_tool_names(tools, [spec.name for spec in self.env.lent_mcp]),
            model=chosen,
            max_turns=max_turns or host.settings.max_turns,
        )
        replay: list[AskRecord] = []
        if (
            earlier is not None
            and earlier.actor.definition_hash == definition.definition_hash
            and earlier.actor.model == chosen.model
        ):
            replay = earlier.asks
        self.env.journal.add_actor(
            ActorRecord(
                run_id=self.env.run_id,
                actor_key=key,
                name=name,
                line=line,
                model=chosen.model,
                model_source=chosen.source,
                definition_hash=definition.definition_hash,
                tools=definition.tools,
            )
        )
        actor = Actor(self.env, definition, replay, replayed_from=self.amends)
        self.actors.append(actor)
        return actor

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for actor in self.actors:
                    nursery.start_soon(actor.close)


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
    found = [
        value
        for value in vars(module).values()
        if isinstance(value, Workflow) and value.fn.__module__ == module_name
    ]
    if len(found) != 1:
        names = ", ".join(w.name for w in found)
        raise WorkflowScriptError(
            f"{script}: a workflow script defines exactly one @workflow async function; "
            + (f"this one defines {len(found)} ({names})" if found else "this one defines none")
        )
    return found[0]


def _bind_inputs(flow: Workflow[Any], inputs: Mapping[str, Any], script: Path) -> dict[str, Any]:
    try:
        signature = inspect.signature(flow.fn, eval_str=True)
    except (NameError, SyntaxError):
        signature = inspect.signature(flow.fn)
    parameters = list(signature.parameters.values())[1:]
    known = {p.name for p in parameters}
    unknown = sorted(set(inputs) - known)
    described = ", ".join(
        p.name + ("" if p.default is inspect.Parameter.empty else "=...") for p in parameters
    )
    if unknown:
        raise WorkflowScriptError(
            f"{script}: {flow.name}() takes no input {', '.join(map(repr, unknown))}; "
            f"its inputs are: {described or '(none)'}"
        )
    bound: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name not in inputs:
            if parameter.default is inspect.Parameter.empty:
                raise WorkflowScriptError(
                    f"{script}: {flow.name}() needs the input {parameter.name!r}: pass "
                    f"--input {parameter.name}=VALUE (its inputs are: {described})"
                )
            continue
        value = inputs[parameter.name]
        annotation = parameter.annotation
        if isinstance(value, str) and annotation not in (inspect.Parameter.empty, str, Any):
            try:
                value = TypeAdapter(annotation).validate_strings(value)
            except ValidationError as exc:
                raise WorkflowScriptError(
                    f"{script}: input {parameter.name}={value!r} is not a valid "
                    f"{getattr(annotation, '__name__', annotation)}: {exc.errors()[0]['msg']}"
                ) from None
        bound[parameter.name] = value
    return bound


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


def _earlier_actors(journal: WorkflowJournal, run_id: str) -> dict[str, _Earlier]:
    earlier: dict[str, _Earlier] = {}
    for actor in journal.actors(run_id):
        if actor.name is not None:
            earlier[actor.name] = _Earlier(actor)
    for ask in journal.asks(run_id):
        found = earlier.get(ask.actor_key)
        if found is not None and found.actor.actor_key == ask.actor_key:
            found.asks.append(ask)
    return earlier


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
    earlier: dict[str, _Earlier] = {}
    amends: str | None = None
    if amend is not None:
        previous = journal.find_run(amend)
        if previous is None:
            raise WorkflowError(
                f"no workflow run {amend!r} to amend in {journal.path}; "
                "`subvisor workflow show` lists the recent runs"
            )
        amends = previous.run_id
        earlier = _earlier_actors(journal, amends)
    parent_model = flow.model or parent_model or host.settings.model or model
    if not parent_model:
        raise WorkflowError(
            "no model for this workflow's actors: pass --model provider:model, set "
            "SUBVISOR_MODEL or `model = ...` in subvisor.toml, or write @workflow(model=...)"
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
            run = _Run(
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
