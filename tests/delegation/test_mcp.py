"""Borrowed MCP (S-MCP-1, S-PROF-9) against a real server from npm."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
import trio

from protocol import ResourceLimits
from supervisor import RootSession, Subvisor, SubvisorSettings
from supervisor.delegation._mcp import MAX_MCP_RESULT_BYTES, McpServerConfig
from tests.support.delegation import agent_call, home_for, write_scenario
from tests.support.mcp import everything_server, wait_until_listening
from worker import BorrowedMcpTool, McpLifecycleError


@pytest.fixture(scope="module")
def everything() -> McpServerConfig:
    return McpServerConfig(command=str(everything_server()), args=("stdio",))


def _settings(tmp_path: Path, servers: dict[str, McpServerConfig]) -> SubvisorSettings:
    return SubvisorSettings(
        home=home_for(tmp_path),
        mcp_servers=servers,
        subagent_limits=ResourceLimits(idle_timeout_s=60),
    )


async def test_a_background_child_borrows_the_parents_mcp_session(
    tmp_path: Path, everything: McpServerConfig
) -> None:
    """S-MCP-1: the child's calls cross its pipe and run on the parent's session."""
    add = {"name": "mcp__everything__get-sum", "input": {"a": 2, "b": 3}}
    echo = {"name": "mcp__everything__echo", "input": {"message": "through the pipe"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("adder", "add", subagent_type="Explore", run_in_background=True)
                    ]
                },
                {"text": "waiting"},
                {"text": "root saw: {{tool_result}}"},
            ],
            "adder": [{"tool_calls": [add, echo]}, {"text": "child: {{tool_result}}"}],
        },
    )
    broken = McpServerConfig(command=str(tmp_path / "no-such-server"))
    async with Subvisor(_settings(tmp_path, {"everything": everything, "broken": broken})) as host:
        assert host.mcp.connected == ("everything",)
        assert "not found" in host.mcp.failures["broken"]
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        [run] = host.runs.values()
        notification = next(
            m.content for m in root.loop.messages if "<task-notification>" in m.content
        )
    assert record.status == "completed"
    assert {spec.name for spec in run.launch.mcp_tools} >= {
        "mcp__everything__echo",
        "mcp__everything__get-sum",
    }
    assert "The sum of 2 and 3 is 5." in notification
    assert "Echo: through the pipe" in notification


async def test_root_calls_mcp_tools_directly_and_progress_reaches_the_child(
    tmp_path: Path, everything: McpServerConfig
) -> None:
    slow = {
        "name": "mcp__everything__trigger-long-running-operation",
        "input": {"duration": 1, "steps": 3},
    }
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        {"name": "mcp__everything__echo", "input": {"message": "root"}},
                        agent_call("slow", "x"),
                    ]
                },
                {"text": "{{tool_result}}"},
            ],
            "slow": [{"tool_calls": [slow]}, {"text": "slow done"}],
        },
    )
    async with Subvisor(_settings(tmp_path, {"everything": everything})) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
        progress = [
            e for e in host.store.events(record.child_session_id or "") if e.name == "mcp.progress"
        ]
    assert "Echo: root" in outcome.text and "slow done" in outcome.text
    assert len(progress) >= 2


async def test_a_required_server_that_is_not_connected_fails_the_launch(
    tmp_path: Path, everything: McpServerConfig
) -> None:
    """S-PROF-9."""
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "needs.md").write_text(
        "---\nname: needs\ndescription: Needs github\nmcpServers: [github]\n---\nGo.\n"
    )
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("n", "x", subagent_type="needs")]},
                {"text": "{{tool_result}}"},
            ]
        },
    )
    async with Subvisor(_settings(tmp_path, {"everything": everything})) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        outcome = await root.run("go")
    assert "Required MCP server is not connected: github" in outcome.text


async def test_a_server_dying_mid_call_is_an_error_not_a_hang(
    tmp_path: Path, everything: McpServerConfig
) -> None:
    async with Subvisor(_settings(tmp_path, {"everything": everything})) as host:
        server = next(
            p
            for p in psutil.Process(os.getpid()).children(recursive=True)
            if "mcp-server-everything" in " ".join(p.cmdline())
        )
        async with trio.open_nursery() as nursery:

            async def kill_soon() -> None:
                await trio.sleep(0.5)
                os.kill(server.pid, signal.SIGKILL)

            nursery.start_soon(kill_soon)
            with trio.fail_after(30):
                result = await host.mcp.call(
                    "mcp__everything__trigger-long-running-operation", {"duration": 20, "steps": 5}
                )
    assert result.is_error and "everything" in result.text


async def test_borrowed_tools_cannot_manage_the_connection() -> None:
    """S-MCP-1: lifecycle calls raise; close does nothing."""
    from protocol import ToolSpec

    tool = BorrowedMcpTool(link=None, spec=ToolSpec(name="mcp__x__y"))  # type: ignore[arg-type]
    with pytest.raises(McpLifecycleError):
        await tool.connect()
    with pytest.raises(McpLifecycleError):
        await tool.disconnect()
    await tool.close()


async def test_issue_acceptance_borrowed_mcp_approval_steer_notification(
    tmp_path: Path, everything: McpServerConfig
) -> None:
    """A background Explore child borrows get-sum and echo, is denied a Bash approval by the
    root's rule handler, is steered mid-turn, and the root gets one notification with the echo;
    the parent's event log shows the mirrored tool calls and permission events (S-APR-2)."""
    from protocol import ToolCall
    from supervisor.policy._approvals import fixed_approval_handler

    add = {"name": "mcp__everything__get-sum", "input": {"a": 20, "b": 22}}
    echo = {"name": "mcp__everything__echo", "input": {"message": "borrowed echo"}}
    slow = {
        "name": "mcp__everything__trigger-long-running-operation",
        "input": {"duration": 1, "steps": 2},
    }
    bash = {"name": "Bash", "input": {"command": "git push origin main"}}
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call(
                            "survey", "survey", subagent_type="Explore", run_in_background=True
                        )
                    ]
                },
                {"text": "waiting"},
                {"text": "final: {{tool_result}}"},
            ],
            "survey": [
                {"tool_calls": [bash]},
                {"tool_calls": [add, echo, slow]},
                {"text": "child: {{tool_result}}"},
            ],
        },
    )
    settings = SubvisorSettings(
        home=home_for(tmp_path),
        mcp_servers={"everything": everything},
        permission={"*": "allow", "bash": {"*": "allow", "git push *": "ask"}},
        subagent_limits=ResourceLimits(idle_timeout_s=60),
    )
    async with Subvisor(settings, approval_handler=fixed_approval_handler("deny")) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(root.run, "go")
            while not host.runs:  # noqa: ASYNC110 (the run does not exist yet)
                await trio.sleep(0.01)
            [run] = host.runs.values()
            await run.ready.wait()
            await trio.sleep(0.3)  # inside the slow MCP call: the turn is active
            sent = await root.loop._tools.call(
                ToolCall(id="s", name="SendMessage", input={"to": run.task_id, "message": "hurry"})
            )
        child_log = host.store.messages(run.launch.child_session_id)
        parent_events = host.store.events(root.session_id)
        notifications = [
            m.content for m in root.loop.messages if "<task-notification>" in m.content
        ]
    assert sent.text.startswith("delivered")
    assert any("hurry" in m.content and "Address this" in m.content for m in child_log)
    assert any("was not approved" in m.content for m in child_log if m.role == "tool")
    assert len(notifications) == 1
    assert "Echo: borrowed echo" in notifications[0]
    assert "The sum of 20 and 22 is 42." in notifications[0]
    mirrored = {e.data["name"] for e in parent_events if e.data.get("source") == "subagent"}
    assert {"mcp__everything__get-sum", "mcp__everything__echo", "Bash"} <= mirrored
    permission = [e for e in parent_events if e.name.startswith("Permission")]
    assert [e.name for e in permission] == ["PermissionRequested", "PermissionDenied"]
    assert all(
        e.data["agentId"] == run.task_id and e.data["origin"] == "subagent" for e in permission
    )


async def test_streamable_http_servers_are_borrowed_too(tmp_path: Path) -> None:
    """S-MCP-1 over streamable HTTP: a server on loopback, reached by URL."""
    import socket
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(  # noqa: ASYNC220 (starting the test's server, once)
        [str(everything_server()), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        with trio.fail_after(20):
            await wait_until_listening(port)
        config = McpServerConfig(url=url)
        async with Subvisor(_settings(tmp_path, {"web": config})) as host:
            assert host.mcp.connected == ("web",)
            result = await host.mcp.call("mcp__web__echo", {"message": "over http"})
    finally:
        server.kill()
        server.wait()
    assert result.text == "Echo: over http" and not result.is_error


async def test_a_borrowed_tools_huge_answer_reaches_the_child_cut_to_size(tmp_path: Path) -> None:
    """S-MCP-1: a real server answering 9 MiB (over a worker frame's 8 MiB) gives the
    child the head of it with a marker, and the child lives to finish its run; a small
    answer of the same tool arrives whole."""
    server = McpServerConfig(
        command=sys.executable,
        args=(str(Path(__file__).parents[1] / "mcp_servers" / "large_output.py"),),
    )
    calls = [
        {"name": "mcp__large__blob", "input": {"size": 9 * 1024 * 1024}},
        {"name": "mcp__large__blob", "input": {"size": 250}},
    ]
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("reader", "read it")]},
                {"text": "done"},
            ],
            "reader": [{"tool_calls": calls}, {"text": "read both"}],
        },
    )
    async with Subvisor(_settings(tmp_path, {"large": server})) as host:
        root = RootSession(host, model=model, cwd=tmp_path)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        [run] = host.runs.values()
        results = [
            message
            for _, message in host.store.messages_after(run.launch.child_session_id, after_seq=0)
            if message.role == "tool"
        ]
    assert record.status == "completed", record.error
    big, small = results
    assert not big.is_error and len(big.content.encode()) <= MAX_MCP_RESULT_BYTES
    assert big.content.startswith("x" * 99 + "\n") and "ask the tool for less" in big.content
    assert small.content == ("x" * 99 + "\n") * 2 + "x" * 50
