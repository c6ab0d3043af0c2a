"""S-OBS-2: a child's answer is visible while it streams, coalesced, never per token."""

from __future__ import annotations

from supervisor import SubvisorSettings
from supervisor.delegation._live_text import LiveText


def test_live_text_publishes_a_prefix_at_a_bounded_rate_then_the_rest() -> None:
    published: list[tuple[str, int]] = []
    live = LiveText(lambda text, offset: published.append((text, offset)), interval_s=3600)
    pieces = [f"tok{i} " for i in range(500)]
    for piece in pieces:
        live.add(piece)
    # One event for the first piece; the interval holds back the other 499.
    assert published == [("tok0 ", 0)]
    assert live.chars == len("".join(pieces))
    # What was published of the answer so far: where a watcher joining now starts.
    assert live.text == "tok0 "
    live.finish()
    assert len(published) == 2
    assert "".join(text for text, _ in published) == "".join(pieces)
    assert published[1][1] == len(published[0][0])
    # A new answer counts from 0 again.
    assert live.chars == 0 and live.text == ""
    live.add("next")
    live.finish()
    assert published[-1] == ("next", 0)


def test_model_slots_follow_max_concurrent_subagents() -> None:
    """Every concurrent subagent and the root get a model slot unless the user set the limit."""
    assert SubvisorSettings(max_concurrent_subagents=50).gateway.max_concurrency == 51
    assert SubvisorSettings().gateway.max_concurrency >= SubvisorSettings().max_concurrent_subagents
    chosen = SubvisorSettings(max_concurrent_subagents=50, gateway={"max_concurrency": 4})
    assert chosen.gateway.max_concurrency == 4
