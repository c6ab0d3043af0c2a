"""A subagent whose answer streams from a real local provider, held where a test says.

The root is scripted; the `streamer` profile's model is ``local:m``, a
``tests.support.provider_server`` that the home's config names, so a test
sees the answer's coalesced ``text.streamed`` events while the stream is held.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tests.support.delegation import agent_call, home_for, readme_project, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer

__all__ = ["ANSWER", "held_answer", "streaming_setup"]

ANSWER = ("Hello ", "streamed ", "world, in three pieces.")


def _chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def held_answer(*holds: tuple[int, threading.Event]) -> CannedResponse:
    """The subagent's answer, ``ANSWER``, as an OpenAI stream of five chunks (a role and
    the first piece, two more pieces, the stop, ``[DONE]``), held as ``holds`` say."""
    events = [_chunk({"role": "assistant", "content": ANSWER[0]})]
    events += [_chunk({"content": piece}) for piece in ANSWER[1:]]
    events.append(_chunk({}, "stop"))
    canned = CannedResponse.sse([*((None, e) for e in events), (None, "[DONE]")])
    return CannedResponse(headers=canned.headers, chunks=canned.chunks, holds=holds)


def streaming_setup(
    tmp_path: Path, server: ProviderServer, *, agents: int = 1
) -> tuple[Path, Path, str]:
    """Home (the provider configured), project (a `streamer` profile on it), and the
    root's model: it launches ``agents`` streamers ("stream 0", ...), in the background
    when more than one."""
    home = home_for(tmp_path)
    home.mkdir()
    (home / "config.toml").write_text(
        f'[gateway.providers.local]\napi = "openai"\nbase_url = "{server.base_url}/v1"\n'
        'api_key = "sk-test"\n'
    )
    project = readme_project(tmp_path)
    profiles = project / ".subvisor" / "agents"
    profiles.mkdir(parents=True)
    (profiles / "streamer.md").write_text(
        "---\nname: streamer\ndescription: Streams\nmodel: local:m\ntools: []\n---\nAnswer.\n"
    )
    calls = [
        agent_call(f"stream {n}", "say it", subagent_type="streamer", run_in_background=agents > 1)
        for n in range(agents)
    ]
    turns = [{"tool_calls": calls}, {"text": "relayed: {{tool_result}}"}]
    turns += [{"text": f"noted {n}"} for n in range(agents)]
    model = write_scenario(tmp_path / "root.yaml", {"root": turns})
    return home, project, model
