"""S-SEC-8, S-MSG-2: a subagent flooding RespondToCoordinator cannot flood its root.

Real workers, real requests: a background subagent whose one scripted turn
calls RespondToCoordinator thousands of times (each one byte, costing it one
event and a few hundred bytes of budget). Before, each message became ~365
bytes of the root's next turn, and each batch the root took started a new
root turn, so the root's model calls and its transcript (which every call
resends) grew with the flood; none of it was counted to the child. Now an
agent may send at most ``MAX_MESSAGES_PER_AGENT`` messages (the rest are
refused, and its model is told why), a turn carries each sender's messages in
one block with the peer guidance once, and the root's calls and transcript
stay within a bound that does not depend on the flood's size. The control: an
honest child's few messages still reach the root, in order.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from protocol import ResourceLimits
from supervisor import RootSession
from supervisor.delegation._notifications import MAX_MESSAGES_PER_AGENT
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario

#: A safety net only: a run the fix failed to bound ends here, as a wall timeout.
_WALL = ResourceLimits(memory_mb=1024, idle_timeout_s=60, wall_timeout_s=300)
#: Root turns the scenario holds: more than a flood of ``_FLOOD`` could ever start.
_ROOT_TURNS = 2_100
#: The root's transcript with every message of one agent delivered: its own few
#: turns plus ``MAX_MESSAGES_PER_AGENT`` one-byte messages, each at most a turn
#: of its own (~450 bytes with its framing), whatever the flood's size.
_TRANSCRIPT_BOUND = 64 * 1024


def _reply(message: str) -> dict[str, object]:
    return {"name": "RespondToCoordinator", "input": {"message": message}}


async def _run(tmp_path: Path, child_turns: list[dict[str, object]]) -> tuple[int, int, list[str]]:
    """A root that launches ``child`` in the background and answers whatever comes.

    Returns the root's model calls, its transcript's size in bytes, and its user turns.
    """
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("child", "go", run_in_background=True)]},
                {"text": "launched"},
                *({"text": f"noted {i}"} for i in range(_ROOT_TURNS)),
            ],
            "child": child_turns,
        },
    )
    async with subvisor(home_for(tmp_path), subagent_limits=_WALL) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        assert record.status == "completed", record.error
        stored = host.store.messages(root.session_id)
        size = sum(len(m.model_dump_json()) for m in stored)
        turns = [m.content for m in root.loop.messages if m.role == "user"]
        return root.loop.model_calls, size, turns


@pytest.mark.parametrize("flood", [2_000])
async def test_s_sec_8_s_msg_2_a_child_flooding_its_coordinator_cannot_drive_the_root(
    tmp_path: Path, flood: int
) -> None:
    """S-SEC-8, S-MSG-2: a background child sending 2,000 one-byte RespondToCoordinator
    messages costs the root at most one model call per delivered message (at most
    MAX_MESSAGES_PER_AGENT of them) and a transcript under a fixed 64 KB; before, it was
    ~730 KB here (growing with the flood, ~365 bytes a message) and a root call per batch.
    The child's model is told why the rest were refused."""
    turns = [{"tool_calls": [_reply("x") for _ in range(flood)]}, {"text": "flooded"}]
    calls, size, root_turns = await _run(tmp_path, turns)
    # The launch, its answer, and at most one turn per message delivered.
    assert calls <= 2 + MAX_MESSAGES_PER_AGENT + 1
    assert size <= _TRANSCRIPT_BOUND
    delivered = sum(t.count("\nx") for t in root_turns if "<subagent-message" in t)
    assert 1 <= delivered <= MAX_MESSAGES_PER_AGENT
    # The guidance is said once per turn, not once per message.
    assert all(t.count("permission laundering") <= 1 for t in root_turns)


async def test_s_msg_2_control_an_honest_childs_messages_reach_the_root_in_order(
    tmp_path: Path,
) -> None:
    """Control (S-MSG-2, S-MSG-3): a child's three messages all reach the root, in the
    order sent, framed as a peer's, and the run ends as usual."""
    turns = [
        {"tool_calls": [_reply("first: found 3 files")]},
        {"tool_calls": [_reply("second: 2 of them are tests")]},
        {"tool_calls": [_reply("third: done reading")]},
        {"text": "scouted", "latency_ms": 200},
    ]
    _, _, root_turns = await _run(tmp_path, turns)
    text = "\n".join(t for t in root_turns if "<subagent-message" in t)
    positions = [text.index(m) for m in ("first: found", "second: 2 of", "third: done")]
    assert positions == sorted(positions)
    assert "permission laundering" in text
    assert any("scouted" in t and "<task-notification>" in t for t in root_turns)


async def test_s_sec_8_s_run_8_notifications_past_the_roots_call_cap_are_withheld(
    tmp_path: Path,
) -> None:
    """S-SEC-8, S-RUN-8: with root_max_notification_calls = 0 no notification or message
    makes the root call its model; the run still waits for its background agents, then
    ends partial, its answer saying how many arrived and where to look."""
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call(name, name, run_in_background=True) for name in ("a", "b")
                    ]
                },
                {"text": "launched"},
                {"text": "never asked"},
            ],
            "a": [{"tool_calls": [_reply("a says hi")], "latency_ms": 300}, {"text": "a done"}],
            "b": [{"text": "b done", "latency_ms": 300}],
        },
    )
    async with subvisor(
        home_for(tmp_path), subagent_limits=_WALL, root_max_notification_calls=0
    ) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        records = host.registry.list(root.session_id)
        events = [e.name for e in host.store.events(root.session_id)]
        session = host.store.get_session(root.session_id)
        root_turns = [m.content for m in root.loop.messages if m.role == "user"]
    assert root.loop.model_calls == 2
    assert sorted(r.status for r in records) == ["completed", "completed"]
    assert outcome.status == "partial"
    # Three arrive: a's message and both notifications; those that came while the root's
    # own turn still ran joined it (S-NOTE-2), the rest were withheld.
    joined = sum(any(s in t for t in root_turns) for s in ("a says hi", "a done", "b done"))
    withheld = re.match(r"launched\n\n\[subvisor: (\d) notifications? or messages?", outcome.text)
    assert withheld is not None and int(withheld[1]) == 3 - joined > 0
    assert "root_max_notification_calls" in outcome.text
    assert "notifications.withheld" in events
    assert session is not None and session.status == "partial"
