"""The agent loop on its own, with in-process ports (DESIGN "The agent loop and its ports")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from protocol import (
    PARTIAL_MARKER,
    EventSpec,
    ModelRequest,
    ModelResult,
    PermissionVerdict,
    ToolCall,
    ToolSpec,
)
from worker.agent import AgentLoop, Toolbox
from worker.tools import LocalToolSet, ToolContext, ToolOutput


class ScriptedModel:
    """Answers with the given results in order and records the requests."""

    def __init__(self, results: Sequence[ModelResult]) -> None:
        self.results = list(results)
        self.requests: list[ModelRequest] = []

    async def call(self, request: ModelRequest) -> ModelResult:
        self.requests.append(request)
        return self.results.pop(0)


D = TypeVar("D", bound=BaseModel)


class Events:
    def __init__(self) -> None:
        self.names: list[str] = []

    async def emit(self, event: EventSpec[D], data: D) -> None:
        assert isinstance(data, event.data)
        self.names.append(event.name)


class BrokenTool:
    spec = ToolSpec(name="Broken", description="always raises")
    aliases: Sequence[str] = ()
    concurrency_safe = True

    async def __call__(self, call: ToolCall) -> ToolOutput:
        raise RuntimeError("boom")


class Refuser:
    async def authorize(self, call: ToolCall) -> PermissionVerdict:
        refused = call.name == "LS"
        return PermissionVerdict(allowed=not refused, reason="not today" if refused else "")


def _loop(tmp_path: Path, model: ScriptedModel, events: Events, **kwargs: Any) -> AgentLoop:
    toolbox = Toolbox(
        LocalToolSet(["Read", "LS"]),
        ToolContext(cwd=tmp_path),
        [BrokenTool()],
        approvals=kwargs.pop("approvals", None),
    )
    return AgentLoop(model=model, tools=toolbox, events=events, system="s", **kwargs)


async def test_tool_results_flow_back_and_every_call_emits_events(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    model = ScriptedModel(
        [
            ModelResult(tool_calls=(ToolCall(id="1", name="Read", input={"file_path": "a.txt"}),)),
            ModelResult(text="done"),
        ]
    )
    events = Events()
    outcome = await _loop(tmp_path, model, events).run("go")
    assert outcome.status == "completed" and outcome.text == "done" and outcome.tool_calls == 1
    assert "alpha" in model.requests[1].messages[-1].content
    assert [r.call_index for r in model.requests] == [0, 1]
    assert events.names.count("tool.started") == events.names.count("tool.finished") == 1


async def test_max_turns_marks_a_partial_outcome(tmp_path: Path) -> None:
    """S-PROF-7."""
    again = ModelResult(
        text="still", tool_calls=(ToolCall(id="x", name="LS", input={"path": "."}),)
    )
    model = ScriptedModel([again, again])
    outcome = await _loop(tmp_path, model, Events(), max_turns=2).run("go")
    assert outcome.status == "partial"
    assert outcome.text.endswith(PARTIAL_MARKER.format(max_turns=2))


async def test_a_crashing_tool_and_a_refused_call_are_results_not_crashes(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            ModelResult(
                tool_calls=(
                    ToolCall(id="1", name="Broken", input={}),
                    ToolCall(id="2", name="LS", input={"path": "."}),
                )
            ),
            ModelResult(text="ok"),
        ]
    )
    outcome = await _loop(tmp_path, model, Events(), approvals=Refuser()).run("go")
    broken, refused = model.requests[1].messages[-2:]
    assert outcome.text == "ok"
    assert broken.is_error and "RuntimeError: boom" in broken.content
    assert refused.is_error and "permission denied: not today" in refused.content


async def test_steps_between_turns_are_injected(tmp_path: Path) -> None:
    """S-NOTE-2: messages that arrive during a run join it between steps."""
    injected = ["[SYSTEM NOTIFICATION - NOT USER INPUT] a child finished"]

    async def between() -> list[str]:
        return [injected.pop()] if injected else []

    model = ScriptedModel(
        [
            ModelResult(tool_calls=(ToolCall(id="1", name="LS", input={"path": "."}),)),
            ModelResult(text="ok"),
        ]
    )
    await _loop(tmp_path, model, Events(), between_steps=between).run("go")
    contents = [m.content for m in model.requests[0].messages]
    assert contents == ["go", "[SYSTEM NOTIFICATION - NOT USER INPUT] a child finished"]
