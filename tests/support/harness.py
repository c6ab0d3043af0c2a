"""A real agent harness (opencode, from npm) and a scripted model endpoint for it.

opencode comes from ``tests/harnesses/package.json`` at its pinned lockfile,
installed on first use (``.ci/run`` installs it up front); without node and
npm the test fails naming what to install.

``AgentCallingModel`` is an OpenAI-compatible chat endpoint on 127.0.0.1
that answers by what it is sent, not in a fixed order (a harness may send a
title request beside the real one): a request that offers a tool named
``*Agent`` of the ``subvisor`` server gets a call to it; a request whose last
message is that tool's result gets an answer quoting it; anything else a
short text. Every request is kept for the test to read.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.support.npm import npm_installed

__all__ = ["HARNESS_DIR", "AgentCallingModel", "opencode"]

HARNESS_DIR = Path(__file__).resolve().parent.parent / "harnesses"
OPENCODE = HARNESS_DIR / "node_modules" / ".bin" / "opencode"

#: What the scripted model quotes its tool result with.
QUOTE = "harness got: "


def opencode() -> Path:
    """opencode's executable; installed from the pinned lockfile the first time."""
    return npm_installed(OPENCODE, HARNESS_DIR, timeout=600)


def _answer(request: dict[str, Any], agent_input: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The assistant's delta and finish reason for one chat request."""
    messages = request.get("messages") or [{}]
    tools = [tool["function"]["name"] for tool in request.get("tools") or ()]
    agent = next((t for t in tools if "subvisor" in t and t.endswith("Agent")), None)
    last = messages[-1]
    if last.get("role") == "tool":
        content = last.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        return {"role": "assistant", "content": QUOTE + text}, "stop"
    if agent is not None:
        call = {
            "index": 0,
            "id": "call_agent",
            "type": "function",
            "function": {"name": agent, "arguments": json.dumps(agent_input)},
        }
        return {"role": "assistant", "tool_calls": [call]}, "tool_calls"
    return {"role": "assistant", "content": "a title"}, "stop"


class AgentCallingModel:
    """The scripted endpoint, serving in a thread while the ``with`` block runs."""

    def __init__(self, agent_input: dict[str, Any]) -> None:
        self.requests: list[dict[str, Any]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                model.requests.append(request)
                delta, finish = _answer(request, agent_input)
                self.send_response(200)
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                base = {"id": "c1", "created": int(time.time()), "model": "scripted"}
                if not request.get("stream"):
                    body = {
                        **base,
                        "object": "chat.completion",
                        "choices": [{"index": 0, "message": delta, "finish_reason": finish}],
                        "usage": usage,
                    }
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps(body).encode())
                    return
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for choice, extra in (
                    ({"index": 0, "delta": delta, "finish_reason": None}, {}),
                    ({"index": 0, "delta": {}, "finish_reason": finish}, {"usage": usage}),
                ):
                    chunk = {**base, "object": "chat.completion.chunk", "choices": [choice]}
                    self.wfile.write(b"data: " + json.dumps({**chunk, **extra}).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
