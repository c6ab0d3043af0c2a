"""``ActorRoster``: the actors one workflow run declares, and what it may replay.

Both engines declare through it: the supervisor's ``agent()`` for a script
run in the supervisor, and the script host for a script in a worker. A
declaration resolves the actor's model (S-ACT-5), refuses a name used twice
(S-ACT-2), journals the actor, and hands it the earlier run's answered asks
when its definition and model are unchanged (S-ACT-3).

A script the root model wrote is untrusted (``ScriptBounds``): like a
subagent's model, which cannot choose its model, it cannot choose one the
user did not give. A model string may name a file the supervisor reads
(``scripted:PATH``: its turns, or its errors, would come back to the script),
so an actor's ``model=`` must be one the user configured for this session:
the root's model or the configured ``model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from ..providers import ModelError
from ._actor import Actor, ActorDefinition, ActorEnvironment
from ._contract import actor_system_prompt, actor_tool_names
from ._errors import DuplicateActorNameError, WorkflowError
from ._journal import ActorRecord, AskRecord, WorkflowJournal
from ._model import canonical_model, resolve_actor_model

__all__ = ["ActorRoster", "EarlierActor", "ScriptBounds", "earlier_actors"]


@dataclass(frozen=True, slots=True)
class ScriptBounds:
    """What a script the root wrote may choose for its actors (a user's script: no bounds).

    ``models``: the models it may name (``agent(model=)``, ``@workflow(model=)``),
    as ``canonical_model`` writes them; ``max_turns``: the limit in force, which
    it may lower but not raise (S-SEC-3, as a project profile's ``maxTurns``).
    """

    models: frozenset[str]
    max_turns: int

    @classmethod
    def of(cls, *models: str | None, max_turns: int) -> ScriptBounds:
        """Bounds allowing ``models`` (None: not set) and ``max_turns``."""
        return cls(frozenset(canonical_model(m) for m in models if m), max_turns)

    def check_model(self, who: str, model: str) -> None:
        """Refuse ``model`` unless the user gave it (the error never reads the model's file)."""
        if canonical_model(model) not in self.models:
            allowed = ", ".join(sorted(self.models)) or "none"
            raise WorkflowError(
                f"{who}: model {model!r} is not one a workflow the root wrote may choose "
                f"(the root's or the configured model: {allowed}); leave model= out to "
                "run on the root's model"
            )


@dataclass(slots=True)
class EarlierActor:
    """What an amended run may reuse of one named actor of the earlier run."""

    actor: ActorRecord
    asks: list[AskRecord] = field(default_factory=list)


class ActorRoster:
    """The actors of one run in progress: declares them (S-ACT-2, S-ACT-5), closes them at the end.

    ``script`` names the script in messages (a path, or ``<CreateWorkflow>``).
    """

    def __init__(
        self,
        env: ActorEnvironment,
        *,
        script: Path | str,
        parent_model: str,
        run_model: str | None,
        earlier: dict[str, EarlierActor],
        amends: str | None,
        bounds: ScriptBounds | None = None,
    ) -> None:
        self.env = env
        #: What the script may choose, when the root wrote it (None: the user's script).
        self.bounds = bounds
        self.script = script
        self.parent_model = parent_model
        self.run_model = run_model
        self.earlier = earlier
        self.amends = amends
        self.actors: list[Actor] = []
        #: Declared actors by id, for the asks of a script in a worker.
        self.by_id: dict[str, Actor] = {}
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
            if name.startswith("~"):
                # ``~N`` is the journal key of the N-th anonymous actor.
                raise WorkflowError(
                    f"actor name {name!r}: a name may not start with '~' (the journal's key "
                    "of an anonymous actor); rename it"
                )
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
        if self.bounds is not None and chosen.source == "declared":
            self.bounds.check_model(f"actor {label}", chosen.model)
        try:
            host.gateway.resolve(chosen.model)
        except ModelError as exc:
            raise WorkflowError(
                f"actor {label}: model {chosen.model!r} is unusable: {exc}"
            ) from None
        if max_turns is not None and max_turns < 1:
            raise WorkflowError(f"actor {label}: max_turns must be at least 1, not {max_turns}")
        if self.bounds is not None and max_turns is not None and max_turns > self.bounds.max_turns:
            # As for a project profile's maxTurns (``_agent_tool._max_turns``): refused.
            raise WorkflowError(
                f"actor {label}: max_turns={max_turns} is above the max_turns = "
                f"{self.bounds.max_turns} in force; a workflow the root wrote may only lower "
                "it (S-SEC-3): leave max_turns out, or ask for less at once"
            )
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
        self.by_id[actor.agent_id] = actor
        return actor

    async def close(self, stopped: str | None = None) -> None:
        """Close every actor (``stopped``: why the run was stopped, if it was)."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for actor in self.actors:
                    nursery.start_soon(actor.close, stopped)


def earlier_actors(journal: WorkflowJournal, run_id: str) -> dict[str, EarlierActor]:
    """The named actors of run ``run_id`` and their asks, by name."""
    earlier: dict[str, EarlierActor] = {}
    for actor in journal.actors(run_id):
        if actor.name is not None:
            earlier[actor.name] = EarlierActor(actor)
    for ask in journal.asks(run_id):
        found = earlier.get(ask.actor_key)
        if found is not None and found.actor.actor_key == ask.actor_key:
            found.asks.append(ask)
    return earlier
