"""Permission rules on borrowed MCP tools hold at the call, not only in the worker.

A borrowed MCP tool runs in the supervisor, outside every sandbox, with the
user's credentials: its rules (deny, ask) are the only barrier. A real
subagent borrows the tools of a real stdio server (``tests/mcp_servers/flood.py``)
whose every incoming message is logged, so each test sees what the server was
asked to run. The hostile worker is a real worker whose ``permission.check``
never reaches the supervisor's rules (it is answered "allowed" in flight, as
for a worker that skips the check and sends ``mcp.call_tool`` directly).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol import PermissionCheckRequest, PermissionVerdict, WorkerRequest
from supervisor import RootSession, Subvisor, SubvisorSettings
from supervisor.delegation._agent_requests import AgentRequestPolicy, AgentRequestServer
from supervisor.delegation._mcp import McpServerConfig
from supervisor.kernel import WorkerHandle
from supervisor.policy._approvals import ApprovalDecision, ApprovalRequest
from tests.support.delegation import agent_call, write_scenario
from tests.support.mcp import FLOOD, mcp_settings

RULES = {"*": "allow", "mcp__flood__blob": "deny", "mcp__flood__where": "ask"}
BLOB = {"name": "mcp__flood__blob", "input": {"size": 10}}
WHERE = {"name": "mcp__flood__where", "input": {}}


def _logged_flood(log: Path) -> McpServerConfig:
    """The flood server behind a ``tee`` that appends every message it gets to ``log``."""
    script = 'tee -a "$0" | exec "$1" "$2"'
    args = ("-c", script, str(log), sys.executable, str(FLOOD))
    return McpServerConfig(command="/bin/sh", args=args)


def _tools_run(log: Path) -> list[str]:
    """The names of the tools the server was asked to run, in order."""
    messages = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [m["params"]["name"] for m in messages if m.get("method") == "tools/call"]


async def _borrow(
    tmp_path: Path, calls: list[dict[str, Any]], answer: ApprovalDecision
) -> tuple[list[str], list[ApprovalRequest], list[str]]:
    """Run one subagent whose turn makes ``calls``; its tool results, the asks, the tools run."""
    log = tmp_path / "flood.log"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("borrow", "borrow")]}, {"text": "done"}],
            "borrow": [{"tool_calls": calls}, {"text": "child done"}],
        },
    )
    asked: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return answer

    project = tmp_path / "project"
    project.mkdir()
    settings: SubvisorSettings = mcp_settings(tmp_path, {"flood": _logged_flood(log)})
    settings = settings.model_copy(update={"permission": RULES})
    async with Subvisor(settings, approval_handler=approve) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        [run] = host.runs.values()
        results = [
            m.content for m in host.store.messages(run.launch.child_session_id) if m.role == "tool"
        ]
    return results, asked, _tools_run(log)


async def test_s_sec_1_s_mcp_1_a_worker_that_skips_the_check_runs_no_denied_mcp_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-1, S-MCP-1: a worker whose permission.check never reaches the rules calls a
    borrowed tool its rules deny, and one they ask about: the denied call is refused and
    the server never runs it; the other is put to the user at the call, once, and,
    refused there, never runs either."""
    serve = AgentRequestServer.serve

    async def skipping(
        self: AgentRequestServer,
        policy: AgentRequestPolicy,
        handle: WorkerHandle,
        request: WorkerRequest,
    ) -> Any:
        if isinstance(request, PermissionCheckRequest) and request.params.tool.startswith("mcp__"):
            return PermissionVerdict(allowed=True)
        return await serve(self, policy, handle, request)

    monkeypatch.setattr(AgentRequestServer, "serve", skipping)
    results, asked, run = await _borrow(tmp_path, [BLOB, WHERE], "deny")
    assert run == []
    assert [a.tool for a in asked] == ["mcp__flood__where"]
    assert len(results) == 2
    assert "xxxxxxxxxx" not in results[0] and "mcp__flood__blob" in results[0]
    assert "cwd" not in results[1] and "not approved" in results[1]


async def test_s_mcp_1_an_honest_worker_is_asked_once_per_borrowed_call(
    tmp_path: Path,
) -> None:
    """S-MCP-1 (control): an honest worker's check of a borrowed tool with an ask rule puts
    it to the user once; allowed, the call runs once without a second ask, and the denied
    tool is refused before the server sees it."""
    results, asked, run = await _borrow(tmp_path, [WHERE, BLOB], "allow")
    assert [a.tool for a in asked] == ["mcp__flood__where"]
    assert run == ["where"]
    assert '"cwd"' in results[0]
    assert "xxxxxxxxxx" not in results[1]


async def test_s_mcp_1_s_prof_5_a_borrowed_tool_its_rules_always_deny_is_not_listed(
    tmp_path: Path,
) -> None:
    """S-MCP-1, S-PROF-5: a borrowed tool whose deny rule refuses every call is not offered
    to the subagent (its model never learns the name, nor wastes a turn on it); one whose
    rule is ask, or that no rule denies, still is. The denied tool, called anyway, is
    refused and never reaches the server."""
    log = tmp_path / "flood.log"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [{"tool_calls": [agent_call("borrow", "borrow")]}, {"text": "done"}],
            "borrow": [{"tool_calls": [BLOB]}, {"text": "child done"}],
        },
    )
    project = tmp_path / "project"
    project.mkdir()
    settings: SubvisorSettings = mcp_settings(tmp_path, {"flood": _logged_flood(log)})
    settings = settings.model_copy(update={"permission": RULES})
    async with Subvisor(settings) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        [run] = host.runs.values()
        offered = {spec.name for spec in run.tool_specs}
        results = [
            m.content for m in host.store.messages(run.launch.child_session_id) if m.role == "tool"
        ]
    assert "mcp__flood__blob" not in offered
    assert {"mcp__flood__where", "mcp__flood__echo"} <= offered
    assert "xxxxxxxxxx" not in results[0]
    assert _tools_run(log) == []


ACTOR_SCRIPT = """
from supervisor.workflow import agent, workflow

@workflow
async def borrow(ctx):
    return await agent("borrower", model="openai:gpt-test").ask("look around")
"""


async def test_s_mcp_1_s_prof_5_an_actor_is_not_offered_a_borrowed_tool_always_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-MCP-1, S-PROF-5: as for a subagent, a workflow actor's model is not offered a
    borrowed tool its rules deny whatever the input (read at the provider); the ask and
    no-rule tools still are."""
    from supervisor.workflow import workflow_tools
    from tests.support.provider_server import CannedResponse, ProviderServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    create = {"name": "CreateWorkflow", "input": {"script": ACTOR_SCRIPT, "description": "b"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {"root": [{"tool_calls": [create]}, {"text": "started"}, {"text": "done"}]},
    )
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    settings = mcp_settings(tmp_path, {"flood": _logged_flood(tmp_path / "flood.log")})
    with ProviderServer() as server:
        server.enqueue(CannedResponse.json(answer))
        gateway = {"providers": {"openai": {"base_url": server.base_url, "streaming": False}}}
        settings = settings.model_copy(
            update={
                "permission": RULES,
                "model": "openai:gpt-test",
                "gateway": settings.gateway.model_validate(gateway),
            }
        )
        async with Subvisor(settings) as host:
            root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
            await root.run("go")
        [sent] = [request.json() for request in server.requests]
    offered = {tool["function"]["name"] for tool in sent["tools"]}
    assert "mcp__flood__blob" not in offered
    assert {"mcp__flood__where", "mcp__flood__echo"} <= offered
