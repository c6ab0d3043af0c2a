"""The scripted provider: deterministic offline answers from scenario files (S-MODEL-1 runs)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from protocol._chat import ChatMessage, ModelRequest, ModelResult, ModelStreamDelta, ToolCall
from supervisor.files._confined import Confinement
from supervisor.providers import ModelEvent, ScenarioError, ScriptedProvider, load_scenario
from supervisor.providers._scripted import split_text_deltas

SCENARIO = """
agents:
  root:
    - text: "I will delegate the search."
      tool_calls:
        - name: Agent
          input: {subagent_type: Explore, prompt: "search auth code"}
    - text: "The child said: {{tool_result}}"
  Explore:
    - text: "explore answer one two three four five"
  "search auth code":
    - text: "specific answer"
      tool_calls:
        - name: Grep
          input: {pattern: "auth", context: {previous: ["{{ tool_result }}", 3]}}
        - name: Read
          input: {path: "a.py"}
  crashy:
    - fault: segfault
    - {text: "slow", latency_ms: 50}
"""


@pytest.fixture
def scenario_path(tmp_path: Path) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    return str(path)


async def collect(events: AsyncIterator[ModelEvent]) -> tuple[list[str], ModelResult]:
    deltas: list[str] = []
    results: list[ModelResult] = []
    async for event in events:
        if isinstance(event, ModelStreamDelta):
            assert not results, "a delta came after the result"
            deltas.append(event.text)
        else:
            results.append(event)
    assert len(results) == 1
    return deltas, results[0]


def request(
    *keys: str, call_index: int = 0, messages: tuple[ChatMessage, ...] = ()
) -> ModelRequest:
    return ModelRequest(
        model="scripted:x", agent_keys=keys, call_index=call_index, messages=messages
    )


async def test_first_present_agent_key_wins(scenario_path: str) -> None:
    provider = ScriptedProvider()
    _, specific = await collect(
        provider.stream(request("search auth code", "Explore", "default"), scenario_path)
    )
    _, by_type = await collect(
        provider.stream(request("unknown description", "Explore", "default"), scenario_path)
    )
    assert specific.text == "specific answer"
    assert by_type.text == "explore answer one two three four five"


async def test_call_index_selects_the_turn_and_text_streams_in_pieces(scenario_path: str) -> None:
    provider = ScriptedProvider()
    deltas, first = await collect(provider.stream(request("root"), scenario_path))
    assert len(deltas) > 1
    assert "".join(deltas) == first.text == "I will delegate the search."
    assert first.stop_reason == "tool_use"
    assert first.model == scenario_path
    assert [(c.name, c.input) for c in first.tool_calls] == [
        ("Agent", {"subagent_type": "Explore", "prompt": "search auth code"})
    ]
    _, second = await collect(provider.stream(request("root", call_index=1), scenario_path))
    assert second.text == "The child said: "
    assert second.stop_reason == "end_turn"
    assert second.tool_calls == ()


async def test_tool_result_is_substituted_from_results_after_last_assistant(
    scenario_path: str,
) -> None:
    history = (
        ChatMessage(role="user", content="go"),
        ChatMessage(
            role="assistant",
            tool_calls=(ToolCall(id="a", name="Agent"),),
        ),
        ChatMessage(role="tool", tool_call_id="a", content="old result"),
        ChatMessage(
            role="assistant",
            tool_calls=(ToolCall(id="b", name="X"), ToolCall(id="c", name="Y")),
        ),
        ChatMessage(role="tool", tool_call_id="b", content="found auth.py"),
        ChatMessage(role="tool", tool_call_id="c", content="and login.py", is_error=True),
    )
    provider = ScriptedProvider()
    _, answer = await collect(
        provider.stream(request("root", call_index=1, messages=history), scenario_path)
    )
    assert answer.text == "The child said: found auth.py\nand login.py"
    _, nested = await collect(
        provider.stream(request("search auth code", messages=history), scenario_path)
    )
    grep = nested.tool_calls[0]
    assert grep.input == {
        "pattern": "auth",
        "context": {"previous": ["found auth.py\nand login.py", 3]},
    }


async def test_tool_call_ids_are_deterministic_and_distinct(scenario_path: str) -> None:
    first = await collect(ScriptedProvider().stream(request("search auth code"), scenario_path))
    again = await collect(ScriptedProvider().stream(request("search auth code"), scenario_path))
    ids = [call.id for call in first[1].tool_calls]
    assert ids == [call.id for call in again[1].tool_calls]
    assert len(set(ids)) == 2
    assert all(i.startswith("call_") and i.endswith(f"_0_{n}") for n, i in enumerate(ids))
    root = await collect(ScriptedProvider().stream(request("root"), scenario_path))
    assert root[1].tool_calls[0].id not in ids


async def test_fault_is_copied_to_the_result(scenario_path: str) -> None:
    _, result = await collect(ScriptedProvider().stream(request("crashy"), scenario_path))
    assert result.fault == "segfault"
    assert result.text == ""


async def test_latency_sleeps_with_trio(scenario_path: str) -> None:
    provider = ScriptedProvider()
    await provider.scenario(scenario_path)  # load outside the timed part
    started = trio.current_time()
    _, result = await collect(provider.stream(request("crashy", call_index=1), scenario_path))
    assert result.text == "slow"
    assert trio.current_time() - started >= 0.05


async def test_usage_counts_words(scenario_path: str) -> None:
    history = (ChatMessage(role="user", content="please find the auth code"),)
    system_request = ModelRequest(
        model="scripted:x", system="you are terse", agent_keys=("Explore",), messages=history
    )
    _, result = await collect(ScriptedProvider().stream(system_request, scenario_path))
    assert result.usage.input_tokens == 3 + 5
    assert result.usage.output_tokens == 7


async def test_out_of_turns_names_file_and_key(scenario_path: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        await collect(ScriptedProvider().stream(request("Explore", call_index=1), scenario_path))
    message = str(caught.value)
    assert scenario_path in message
    assert "'Explore'" in message
    assert "add turns under agents.Explore" in message
    assert caught.value.agent_key == "Explore"


async def test_no_matching_key_lists_tried_and_known_keys(scenario_path: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        await collect(ScriptedProvider().stream(request("nope", "nada"), scenario_path))
    message = str(caught.value)
    assert scenario_path in message
    assert "['nope', 'nada']" in message
    assert "'Explore'" in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("agents:\n  root:\n    - {fault: explode}\n", "agents.root.0.fault"),
        ("agents:\n  root:\n    - {text: 12}\n", "agents.root.0.text"),
        ("agents:\n  root:\n    - {latency_ms: -1}\n", "agents.root.0.latency_ms"),
        (
            "agents:\n  root:\n    - {tool_calls: [{input: {}}]}\n",
            "agents.root.0.tool_calls.0.name",
        ),
        ("agents:\n  root:\n    - {txt: hi}\n", "agents.root.0.txt"),
        ("agents:\n  root: hello\n", "agents.root"),
        ("agent:\n  root: []\n", "agents: Field required"),
        ("- just a list\n", "the top level must be a mapping"),
        ("agents: [unclosed\n", "is not valid YAML"),
    ],
)
async def test_bad_scenarios_are_typed_errors_naming_the_file(
    tmp_path: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ScenarioError) as caught:
        await collect(ScriptedProvider().stream(request("root"), str(path)))
    assert str(path) in str(caught.value)
    assert fragment in str(caught.value)


async def test_missing_file_says_what_the_model_string_needs(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.yaml")
    with pytest.raises(ScenarioError, match="must name a YAML or JSON scenario file"):
        await collect(ScriptedProvider().stream(request("root"), missing))


async def test_json_scenarios_load_and_are_cached_by_path(tmp_path: Path) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"agents": {"root": [{"text": "from json"}]}}))
    provider = ScriptedProvider()
    _, first = await collect(provider.stream(request("root"), str(path)))
    path.write_text(json.dumps({"agents": {"root": [{"text": "changed"}]}}))
    _, second = await collect(provider.stream(request("root"), str(path)))
    assert first.text == second.text == "from json"
    assert load_scenario(str(path)).agents["root"][0].text == "changed"


@given(st.text(max_size=80), st.integers(min_value=1, max_value=5))
def test_text_deltas_join_back_to_the_text(text: str, parts: int) -> None:
    pieces = split_text_deltas(text, parts)
    assert "".join(pieces) == text
    assert len(pieces) <= parts
    assert all(pieces)


async def test_s_sec_3_a_confined_scenario_swapped_for_a_link_out_is_not_read(
    tmp_path: Path,
) -> None:
    """S-SEC-3: a project profile's scenario is checked inside the project, then a link to
    a file outside is swapped in before the provider reads it: what is read is checked on
    the open file, so the outside text is neither loaded nor shown, nor where it lies."""
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "outside.yaml"
    outside.write_text("agents:\n  default:\n    - text: read from outside\n")
    scenario = project / "s.yaml"
    scenario.write_text("agents:\n  default:\n    - text: read from inside\n")
    provider = ScriptedProvider()
    provider.confine(str(scenario), Confinement.of_project(project))
    scenario.unlink()
    scenario.symlink_to(outside)
    with pytest.raises(ScenarioError) as refused:
        await provider.scenario(str(scenario))
    assert "outside the project" in str(refused.value)
    assert str(outside) not in str(refused.value)
    # Control: unconfined (a user's own scenario), the same path is read.
    loaded = await ScriptedProvider().scenario(str(scenario))
    assert loaded.agents["default"][0].text == "read from outside"
