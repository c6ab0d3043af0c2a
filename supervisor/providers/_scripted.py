"""The scripted provider: deterministic, offline answers from a scenario file.

Used by tests, the demo and stress runs. A scenario (YAML or JSON) maps agent
keys to the turns that answer that agent's calls, in order::

    agents:
      root:
        - text: "Delegating."
          tool_calls: [{name: Agent, input: {prompt: "search auth code"}}]
        - text: "The child said: {{tool_result}}"
      Explore:
        - {text: "found it", latency_ms: 20}
        - {fault: segfault}
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any, Literal

import trio
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from protocol import ModelRequest, ModelResult, ModelStreamDelta, ToolCall, Usage

from ..files._confined import Confinement, OutsideConfinementError
from ..files._input_files import read_regular_file
from ..files._untrusted_yaml import describe_yaml_error, load_untrusted_yaml
from ._base import ModelEvent, TextSink
from ._errors import ScenarioError

#: A scenario file larger than this is refused (a 5,000-agent stress scenario is 2.5 MB).
MAX_SCENARIO_BYTES = 64 << 20
_SCENARIO_SHAPE = (
    "expected agents: mapping each agent key to a list of turns "
    "{text, tool_calls: [{name, input}], latency_ms, fault}"
)
_PROBLEMS_SHOWN = 5

__all__ = [
    "MAX_SCENARIO_BYTES",
    "Scenario",
    "ScriptedProvider",
    "ScriptedToolCall",
    "ScriptedTurn",
    "load_scenario",
    "split_text_deltas",
]

_TOOL_RESULT = re.compile(r"\{\{\s*tool_result\s*\}\}")
_WORD_RUNS = re.compile(r"\S+\s*|\s+")
_DELTAS_PER_TEXT = 3


class ScriptedToolCall(BaseModel):
    """A tool call a scripted turn makes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: StrictStr
    input: dict[str, Any] = Field(default_factory=dict)


class ScriptedTurn(BaseModel):
    """One scripted answer: text and/or tool calls, optional latency and fault."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: StrictStr = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    latency_ms: float = Field(default=0.0, ge=0, strict=True)
    fault: Literal["segfault", "exit", "oom", "hang", "flood"] | None = None


class Scenario(BaseModel):
    """A scenario file: ``agents`` maps an agent key to its turns.

    Other top-level keys are ignored, so tools may keep their own settings
    in the same file.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    agents: dict[StrictStr, tuple[ScriptedTurn, ...]]


def load_scenario(path: str, *, confine: Confinement | None = None) -> Scenario:
    """Read and validate a scenario file (JSON if it ends in ``.json``, else YAML).

    With ``confine``, a file that resolves where it does not allow is not
    read. Raises ``ScenarioError`` (and only that), with one line that names the file.
    """
    kind = "JSON" if path.endswith(".json") else "YAML"
    try:
        raw = read_regular_file(path, MAX_SCENARIO_BYTES, confine=confine)
    except OutsideConfinementError:
        # Where it resolves is not said: whoever wrote the path (a repository)
        # must not learn what exists outside the project.
        raise ScenarioError(
            f"scenario file {path!r} resolves outside the project, so it is not read (S-SEC-3):"
            " a project profile may only be scripted from the project's own files",
            path=path,
        ) from None
    except OSError as exc:
        raise ScenarioError(
            f"scenario file {path!r} cannot be read ({exc.strerror or exc}): the model "
            "string scripted:PATH must name a YAML or JSON scenario file",
            path=path,
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"scenario file {path!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}): a scenario is a {kind} text file",
            path=path,
        ) from None
    try:
        document = json.loads(text) if kind == "JSON" else load_untrusted_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(
            f"scenario file {path!r} is not valid YAML: {describe_yaml_error(exc)}", path=path
        ) from None
    except (ValueError, RecursionError) as exc:
        # json: malformed text (ValueError) or arrays nested past the stack (RecursionError).
        raise ScenarioError(
            f"scenario file {path!r} is not valid {kind}: {' '.join(str(exc).split())}",
            path=path,
        ) from None
    if kind == "JSON" and not _is_text(document):
        raise ScenarioError(
            f"scenario file {path!r} holds a \\u escape that is half of a UTF-16 surrogate "
            "pair, not a character: write the character itself",
            path=path,
        )
    if not isinstance(document, dict):
        raise ScenarioError(
            f"scenario file {path!r} is malformed: the top level must be a mapping with an "
            f"agents: key, got {_kind_of(document)}; {_SCENARIO_SHAPE}",
            path=path,
        )
    try:
        return Scenario.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(top level)'}: {error['msg']}"
            for error in errors[:_PROBLEMS_SHOWN]
        )
        if len(errors) > _PROBLEMS_SHOWN:
            problems += f"; and {len(errors) - _PROBLEMS_SHOWN} more"
        raise ScenarioError(
            f"scenario file {path!r} is malformed: {problems}; {_SCENARIO_SHAPE}", path=path
        ) from None


def _is_text(document: Any) -> bool:
    # JSON decodes "\\udcff" to a lone surrogate, which no UTF-8 encoder takes.
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except RecursionError:
        return True  # as deep as json.loads went; validation says what is wrong
    return True


def _kind_of(document: Any) -> str:
    if document is None:
        return "nothing (the file is empty)"
    if isinstance(document, list):
        return "a list"
    return "a string" if isinstance(document, str) else type(document).__name__


def split_text_deltas(text: str, parts: int = _DELTAS_PER_TEXT) -> list[str]:
    """Split ``text`` at word boundaries into at most ``parts`` pieces that join to it."""
    runs = _WORD_RUNS.findall(text)
    if not runs:
        return []
    count = min(parts, len(runs))
    size = -(-len(runs) // count)
    return ["".join(runs[start : start + size]) for start in range(0, len(runs), size)]


class ScriptedProvider:
    """Answers call ``request.call_index`` of an agent with that turn of the scenario.

    ``model`` is the scenario path; each file is loaded once and cached by
    that path. The agent key is the first of ``request.agent_keys`` the
    scenario has. ``{{tool_result}}`` in any string of a turn becomes the
    tool results after the last assistant message, joined by newlines.
    Usage counts whitespace-separated words: the prompt's as input, the
    answer's (text, tool names and JSON inputs) as output.
    """

    def __init__(self) -> None:
        self._scenarios: dict[str, Scenario] = {}
        self._confined: dict[str, Confinement] = {}

    def confine(self, path: str, confinement: Confinement) -> None:
        """Read ``path``, when it is first used, only where ``confinement`` allows (S-SEC-3).

        For a project profile's scenario: its path was checked, but a link
        may be swapped in before it is read, so the read checks again on the
        file it opened. A scenario already loaded is not read again.
        """
        self._confined[path] = confinement

    def stream(
        self, request: ModelRequest, model: str, *, on_text: TextSink | None = None
    ) -> AsyncIterator[ModelEvent]:
        """Answer ``request`` from the scenario file ``model`` (its pieces are yielded)."""
        return self._answer(request, model)

    async def scenario(self, path: str) -> Scenario:
        """The scenario at ``path``, loaded on first use."""
        cached = self._scenarios.get(path)
        if cached is None:
            cached = await trio.to_thread.run_sync(
                functools.partial(load_scenario, path, confine=self._confined.get(path))
            )
            self._scenarios[path] = cached
        return cached

    async def _answer(self, request: ModelRequest, path: str) -> AsyncIterator[ModelEvent]:
        scenario = await self.scenario(path)
        agent_key = _resolve_agent_key(scenario, request, path)
        turns = scenario.agents[agent_key]
        if not 0 <= request.call_index < len(turns):
            raise ScenarioError(
                f"scenario {path!r} ran out of turns for agent key {agent_key!r}: it has "
                f"{len(turns)} turn(s) but this is call_index {request.call_index}; add turns "
                f"under agents.{agent_key} (keys tried, best first: {list(request.agent_keys)})",
                path=path,
                agent_key=agent_key,
            )
        turn = turns[request.call_index]
        tool_result = "\n".join(_tool_results_since_last_answer(request))
        text = _substitute(turn.text, tool_result)
        key_hash = hashlib.sha256(agent_key.encode()).hexdigest()[:8]
        calls = tuple(
            ToolCall(
                id=f"call_{key_hash}_{request.call_index}_{i}",
                name=call.name,
                input=_substitute(call.input, tool_result),
            )
            for i, call in enumerate(turn.tool_calls)
        )
        if turn.latency_ms:
            await trio.sleep(turn.latency_ms / 1000)
        for piece in split_text_deltas(text):
            yield ModelStreamDelta(text=piece)
        yield ModelResult(
            text=text,
            tool_calls=calls,
            stop_reason="tool_use" if calls else "end_turn",
            usage=Usage(
                input_tokens=_prompt_words(request), output_tokens=_answer_words(text, calls)
            ),
            model=path,
            fault=turn.fault,
        )


def _resolve_agent_key(scenario: Scenario, request: ModelRequest, path: str) -> str:
    for key in request.agent_keys:
        if key in scenario.agents:
            return key
    raise ScenarioError(
        f"scenario {path!r} has no turns for any of the agent keys {list(request.agent_keys)}"
        f" (best first); add one of them under agents: (the file has {sorted(scenario.agents)})",
        path=path,
    )


def _tool_results_since_last_answer(request: ModelRequest) -> list[str]:
    start = 0
    for index, message in enumerate(request.messages):
        if message.role == "assistant":
            start = index + 1
    return [m.content for m in request.messages[start:] if m.role == "tool"]


def _substitute(value: Any, tool_result: str) -> Any:
    # A plain function replacement, so backslashes in tool output stay literal.
    if isinstance(value, str):
        return _TOOL_RESULT.sub(lambda _: tool_result, value)
    if isinstance(value, dict):
        return {key: _substitute(item, tool_result) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_substitute(item, tool_result) for item in value]
    return value


def _words(text: str) -> int:
    return len(text.split())


def _prompt_words(request: ModelRequest) -> int:
    total = _words(request.system)
    for message in request.messages:
        total += _words(message.content)
        total += sum(_words(c.name) + _words(json.dumps(c.input)) for c in message.tool_calls)
    return total


def _answer_words(text: str, calls: tuple[ToolCall, ...]) -> int:
    return _words(text) + sum(_words(c.name) + _words(json.dumps(c.input)) for c in calls)
