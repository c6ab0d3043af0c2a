"""``subvisor mcp`` driven by the ``mcp`` SDK's own client, over stdio and streamable HTTP.

Every test runs the real command in its own process, with real workers and the
scripted model; the client is the SDK's ``Client``, as another harness's would be.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.cli import CHECKOUT, cli_env, run_cli
from tests.support.delegation import home_for, write_scenario
from tests.support.mcp import inspector_cli
from tests.support.mcp_serve import http_server, mcp_args, stdio_server_params

TOOLS = ["Agent", "SendMessage", "TaskList", "TaskOutput", "TaskStop"]

SCENARIO: dict[str, list[dict[str, Any]]] = {
    "list files": [
        {"tool_calls": [{"name": "LS", "input": {"path": "."}}]},
        {"text": "listed: {{tool_result}}"},
    ],
    "crasher": [{"fault": "segfault"}],
    "slow": [{"text": "slow done", "latency_ms": 300}],
    "stuck": [{"text": "never", "latency_ms": 600_000}],
    "shell": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "echo approved-run"}}]},
        {"text": "shell said: {{tool_result}}"},
    ],
    "asker": [
        {
            "tool_calls": [
                {
                    "name": "AskUserQuestion",
                    "input": {"question": "Which colour?", "options": ["red", "blue"]},
                }
            ]
        },
        {"text": "got: {{tool_result}}"},
    ],
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# demo project\n")
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = home_for(tmp_path)
    home.mkdir(exist_ok=True)
    return home


@pytest.fixture
def model(tmp_path: Path) -> str:
    return write_scenario(tmp_path / "scenario.yaml", SCENARIO)


def _ask_bash(home: Path) -> None:
    """Config where every Bash call asks (and everything else is allowed)."""
    (home / "config.toml").write_text('[permission]\n"*" = "allow"\nbash = "ask"\n')


def _agent(description: str, *, background: bool = False, kind: str = "Explore") -> dict[str, Any]:
    return {
        "description": description,
        "prompt": f"do {description}",
        "subagent_type": kind,
        "run_in_background": background,
    }


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def _resource(result: types.ReadResourceResult) -> Any:
    contents = result.contents[0]
    assert isinstance(contents, types.TextResourceContents)
    assert contents.mime_type == "application/json"
    return json.loads(contents.text)


def _agent_id(text: str) -> str:
    found = re.search(r"agentId: (agent_[0-9a-f]+)", text)
    assert found, text
    return found[1]


class Recorder:
    """What a client was sent: log messages and progress steps."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.progress: list[tuple[float, str | None]] = []
        self.logged = trio.Event()

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.logged.set()
        self.logged = trio.Event()

    async def step(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, message))


@asynccontextmanager
async def stdio_client(
    home: Path, model: str, project: Path, *flags: str, **options: Any
) -> AsyncIterator[Client]:
    async with Client(stdio_server_params(home, model, project, *flags), **options) as client:
        yield client


async def test_stdio_lists_tools_and_returns_a_foreground_result_with_progress(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-1, S-TOOL-6: the five tools; a foreground Agent's result, progress on the way."""
    seen = Recorder()
    async with stdio_client(home, model, project) as client:
        assert client.session.initialize_result is not None  # the handshake era
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == TOOLS
        agent = listed.tools[0]
        assert "general-purpose" in (agent.description or "")
        assert "Explore" in (agent.description or "")
        assert set(agent.input_schema["properties"]) >= {
            "description",
            "prompt",
            "subagent_type",
            "run_in_background",
        }
        result = await client.call_tool("Agent", _agent("list files"), progress_callback=seen.step)
    text = _text(result)
    assert not result.is_error, text
    assert text.startswith("listed: ")
    assert "README.md" in text  # a real LS, in a real worker
    agent_id = _agent_id(text)
    assert "<usage>total_tokens:" in text and "tool_uses: 1" in text
    steps = [message for _, message in seen.progress]
    assert steps[0] == f"{agent_id} launched"
    assert f"{agent_id} tool call LS done" in steps
    assert steps[-1] == f"{agent_id} completed"
    assert [p for p, _ in seen.progress] == sorted({p for p, _ in seen.progress})


async def test_the_agent_tool_lists_only_profiles_the_task_rules_allow(
    home: Path, model: str, project: Path
) -> None:
    """S-TOOL-4 over MCP: a profile whose `task` permission is deny is neither listed nor run."""
    (home / "config.toml").write_text(
        '[permission]\n"*" = "allow"\ntask = { "*" = "allow", "Explore" = "deny" }\n'
    )
    async with stdio_client(home, model, project) as client:
        agent = (await client.list_tools()).tools[0]
        refused = await client.call_tool("Agent", _agent("list files"))
    assert "general-purpose" in (agent.description or "")
    assert "- Explore" not in (agent.description or "")
    assert refused.is_error and "denied by the task permission" in _text(refused)


async def test_background_agent_is_announced_by_notification_and_task_output(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-2: run_in_background returns the agentId at once; its end is a logging
    notification with the S-NOTE-1 text, and TaskOutput returns that same text."""
    seen = Recorder()
    async with stdio_client(home, model, project, logging_callback=seen.log) as client:
        launched = _text(await client.call_tool("Agent", _agent("slow", background=True)))
        assert launched.startswith("async_launched")
        agent_id = _agent_id(launched)
        with trio.fail_after(60):
            while not any(agent_id in str(log.data) for log in seen.logs):
                await seen.logged.wait()
        output = _text(await client.call_tool("TaskOutput", {"task_id": agent_id}))
        listed = _text(await client.call_tool("TaskList", {}))
    notification = next(log for log in seen.logs if agent_id in str(log.data))
    assert notification.logger == "subvisor" and notification.level == "info"
    assert str(notification.data).startswith("<task-notification>")
    assert "<status>completed</status>" in str(notification.data)
    assert "slow done" in str(notification.data)
    assert output == notification.data
    assert f"{agent_id} [local_agent] completed (background): slow" in listed


async def test_a_segfaulting_subagent_is_reported_failed_and_the_server_lives_on(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-1: a crashed worker is one failed call; the next call is served as usual."""
    async with stdio_client(home, model, project) as client:
        crashed = await client.call_tool("Agent", _agent("crasher"))
        after = await client.call_tool("Agent", _agent("list files"))
    assert crashed.is_error
    assert "failed" in _text(crashed) and "SIGSEGV" in _text(crashed)
    assert not after.is_error and _text(after).startswith("listed: ")


# The handshake era's resources/subscribe, which the SDK marks as gone from the next era.
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_cancelling_the_request_stops_the_subagent(
    home: Path, model: str, project: Path
) -> None:
    """S-RUN-3 over MCP: the client's notifications/cancelled kills its foreground agent;
    a subscriber to its transcript hears of it."""
    launched: list[str] = []
    running = trio.Event()
    updated: list[str] = []
    changed = trio.Event()

    async def step(progress: float, total: float | None, message: str | None) -> None:
        if message and message.endswith(" launched"):
            launched.append(message.split()[0])
        if message and "running" in message:
            running.set()

    async def on_message(message: Any) -> None:
        nonlocal changed
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            changed.set()
            changed = trio.Event()

    async with stdio_client(home, model, project, message_handler=on_message) as client:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await client.call_tool("Agent", _agent("stuck"), progress_callback=step)

            nursery.start_soon(call)
            with trio.fail_after(60):
                await running.wait()
            uri = f"subvisor://agents/{launched[0]}/transcript"
            await client.subscribe_resource(uri)
            nursery.cancel_scope.cancel()
        with trio.fail_after(60):
            while _resource(await client.read_resource(uri))["status"] != "killed":
                await changed.wait()
        listed = _text(await client.call_tool("TaskList", {}))
    assert "[local_agent] killed: stuck" in listed
    assert uri in updated


def _answering(decision: str) -> tuple[list[types.ElicitRequestFormParams], Callable[..., Any]]:
    asked: list[types.ElicitRequestFormParams] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params)
        return types.ElicitResult(action="accept", content={"decision": decision})

    return asked, elicit


@pytest.mark.parametrize("decision", ["allow_once", "deny"])
async def test_an_ask_is_elicited_from_the_client(
    home: Path, model: str, project: Path, decision: str
) -> None:
    """S-SRV-3: a subagent's Bash ask becomes an elicitation naming who asks, the tool and
    its input; the client's answer decides."""
    _ask_bash(home)
    asked, elicit = _answering(decision)
    async with stdio_client(home, model, project, elicitation_callback=elicit) as client:
        result = _text(await client.call_tool("Agent", _agent("shell", kind="general-purpose")))
    agent_id = _agent_id(result)
    assert len(asked) == 1
    assert f"subagent {agent_id} (shell) wants to run Bash" in asked[0].message
    assert "echo approved-run" in asked[0].message
    assert asked[0].requested_schema["properties"]["decision"]["enum"] == [
        "allow_once",
        "allow_always",
        "deny",
    ]
    if decision == "allow_once":
        assert "shell said: approved-run" in result
    else:
        assert "was not approved" in result and "approved-run\n" not in result


async def test_an_unanswered_ask_times_out_as_a_deny(home: Path, model: str, project: Path) -> None:
    """S-SRV-3: nothing waits forever; the client is told why the ask was denied."""
    _ask_bash(home)
    seen = Recorder()

    async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with stdio_client(
        home,
        model,
        project,
        "--ask-timeout",
        "1",
        elicitation_callback=never,
        logging_callback=seen.log,
    ) as client:
        result = _text(await client.call_tool("Agent", _agent("shell", kind="general-purpose")))
    assert "was not approved" in result
    warnings = [str(log.data) for log in seen.logs if log.level == "warning"]
    assert any("nobody answered within 1 s" in w and "Bash" in w for w in warnings), warnings


async def test_without_elicitation_the_configured_answer_decides(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-3: a client that cannot elicit gets --approve (allow here), never a hang."""
    _ask_bash(home)
    async with stdio_client(home, model, project, "--approve", "allow") as client:
        allowed = _text(await client.call_tool("Agent", _agent("shell", kind="general-purpose")))
    assert "shell said: approved-run" in allowed


async def test_a_question_is_elicited_with_its_options(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-3: AskUserQuestion reaches the client as a form with the options."""
    asked: list[types.ElicitRequestFormParams] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async with stdio_client(home, model, project, elicitation_callback=elicit) as client:
        result = _text(await client.call_tool("Agent", _agent("asker")))
    assert "asks: Which colour?" in asked[0].message
    assert asked[0].requested_schema["properties"]["answer"]["enum"] == ["red", "blue"]
    assert "got: The user answered: blue" in result


async def test_transcripts_and_usage_are_resources_of_their_own_session(
    home: Path, model: str, project: Path
) -> None:
    """Transcripts as subvisor://agents/{id}/transcript, the usage roll-up as subvisor://usage."""
    async with stdio_client(home, model, project) as client:
        agent_id = _agent_id(_text(await client.call_tool("Agent", _agent("list files"))))
        uris = [str(resource.uri) for resource in (await client.list_resources()).resources]
        transcript = await client.read_resource(f"subvisor://agents/{agent_id}/transcript")
        usage = await client.read_resource("subvisor://usage")
        with pytest.raises(MCPError, match="no resource"):
            await client.read_resource("subvisor://agents/agent_0000/transcript")
    assert uris == ["subvisor://usage", f"subvisor://agents/{agent_id}/transcript"]
    body = _resource(transcript)
    assert body["agentId"] == agent_id and body["status"] == "completed"
    assert [m["role"] for m in body["messages"]][:2] == ["user", "assistant"]
    assert body["messages"][1]["tool_calls"][0]["name"] == "LS"
    totals = _resource(usage)
    assert totals["subagents"]["tool_calls"] == 1


async def test_http_clients_each_get_their_own_session(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-5: over streamable HTTP, one client cannot see, read or stop another's agents."""
    async with (
        http_server(home, model, project) as url,
        Client(url) as first,
        Client(url) as second,
    ):
        launched = _text(await first.call_tool("Agent", _agent("stuck", background=True)))
        agent_id = _agent_id(launched)
        for tool in ("TaskStop", "TaskOutput"):
            refused = await second.call_tool(tool, {"task_id": agent_id})
            assert refused.is_error
            assert f"no agent {agent_id!r} was launched in this session" in _text(refused)
        steered = await second.call_tool("SendMessage", {"to": agent_id, "message": "hi"})
        resumed = await second.call_tool("Agent", {**_agent("stuck"), "task_id": agent_id})
        assert steered.is_error and resumed.is_error
        assert _text(await second.call_tool("TaskList", {})) == "No tasks in this session."
        with pytest.raises(MCPError, match="no resource"):
            await second.read_resource(f"subvisor://agents/{agent_id}/transcript")
        # Its own client still owns it.
        assert "status: running" in _text(
            await first.call_tool("TaskOutput", {"task_id": agent_id})
        )
        stopped = _text(await first.call_tool("TaskStop", {"task_id": agent_id}))
        assert stopped == f"task {agent_id} killed"
        foreground = await second.call_tool("Agent", _agent("list files"))
        assert _text(foreground).startswith("listed: ")


async def test_http_with_a_token_refuses_a_client_without_it(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-1: with SUBVISOR_MCP_TOKEN set, every request needs `Authorization: Bearer`."""
    token = {"SUBVISOR_MCP_TOKEN": "s3cret-token"}
    async with http_server(home, model, project, env=token) as url:
        with pytest.raises(Exception):  # noqa: B017 - the SDK's transport error for a 401
            async with Client(url) as client:
                await client.list_tools()
        authorized = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-token"})
        async with (
            authorized,
            Client(streamable_http_client(url, http_client=authorized)) as client,
        ):
            assert [t.name for t in (await client.list_tools()).tools] == TOOLS


#: Run in a subagent's Bash: an MCP initialize posted to the URL in the file; prints the status.
_CALL_BACK = """
import json, sys, httpx2
url = open(sys.argv[1]).read().strip()
hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "from-below", "version": "0"}}}
reply = httpx2.post(url, json=hello, headers={"Accept": "application/json, text/event-stream"})
print("status", reply.status_code, reply.text[:300].replace(chr(10), " "))
"""


async def test_s_sec_2_a_subagent_with_network_cannot_drive_the_loopback_http_server(
    tmp_path: Path,
) -> None:
    """S-SEC-2 / S-SRV-5: a read-only subagent allowed the network reaches the loopback
    server's port but is refused (403, naming the worker tree) before the MCP server
    sees it: it cannot launch a wider subagent. The client that asked for it is served."""
    home, project = home_for(tmp_path), tmp_path / "project"
    project.mkdir()
    url_file, script = tmp_path / "url", tmp_path / "call_back.py"
    script.write_text(_CALL_BACK)
    command = f"{sys.executable} {script} {url_file}"
    model = write_scenario(
        tmp_path / "below.yaml",
        {
            "below": [
                {"tool_calls": [{"name": "Bash", "input": {"command": command}}]},
                {"text": "below said: {{tool_result}}"},
            ]
        },
    )
    async with (
        http_server(home, model, project, "--network", "allow") as url,
        Client(url) as client,
    ):
        url_file.write_text(url)
        answer = _text(
            await client.call_tool(
                "Agent", {"description": "below", "prompt": "p", "subagent_type": "Explore"}
            )
        )
    assert "status 403" in answer and "inside a subvisor worker tree" in answer, answer


_FETCHER = """
import sys
from pathlib import Path

import httpx2
from mcp.server.mcpserver import MCPServer

server = MCPServer("fetcher")


@server.tool()
def post(body: str) -> str:
    \"\"\"POST ``body`` (JSON) to the URL in the file named on the command line.\"\"\"
    url = Path(sys.argv[1]).read_text()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    reply = httpx2.post(url, content=body, headers=headers)
    return f"status {reply.status_code} {reply.text[:300]}"


server.run("stdio")
"""


async def test_s_sec_2_an_mcp_server_it_lends_cannot_drive_the_loopback_http_server(
    tmp_path: Path,
) -> None:
    """S-SEC-2: the MCP servers the HTTP server lends to its agents run outside every worker
    tree. A subagent that has one POST to the server's own URL (a confused deputy) is
    refused, naming the process the server started; it cannot launch an agent of its own."""
    home, project = home_for(tmp_path), tmp_path / "project"
    home.mkdir()
    project.mkdir()
    url_file, script = tmp_path / "url", tmp_path / "fetcher.py"
    script.write_text(_FETCHER)
    (home / "config.toml").write_text(
        f'[permission]\n"*" = "allow"\n[mcp_servers.fetcher]\ncommand = "{sys.executable}"\n'
        f'args = ["{script}", "{url_file}"]\n'
    )
    hello = json.dumps(_HELLO)
    model = write_scenario(
        tmp_path / "deputy.yaml",
        {
            "deputy": [
                {"tool_calls": [{"name": "mcp__fetcher__post", "input": {"body": hello}}]},
                {"text": "deputy said: {{tool_result}}"},
            ]
        },
    )
    async with http_server(home, model, project) as url, Client(url) as client:
        url_file.write_text(url)
        answer = _text(await client.call_tool("Agent", _agent("deputy", kind="general-purpose")))
    assert "status 403" in answer and "was started by this server" in answer, answer


async def test_s_sec_2_another_sessions_mcp_server_cannot_drive_the_loopback_http_server(
    tmp_path: Path,
) -> None:
    """S-SEC-2 across sessions: session A (a second `subvisor mcp --http`) lends a fetching
    MCP server to its subagent, which POSTs initialize to session B's URL. The fetcher is no
    descendant of B, but a supervisor (A, named subvisor-sup) is above it: B refuses it (403),
    so no agent of B's, with B's model and rights, can be launched from A. Control: the same
    POST from a plain process of the user's (no supervisor above it) is served (200)."""
    homes = {side: home_for(tmp_path / side) for side in "ab"}
    projects = {side: tmp_path / side / "project" for side in "ab"}
    for side in "ab":
        homes[side].mkdir(parents=True)
        projects[side].mkdir(parents=True)
    url_file, script = tmp_path / "url", tmp_path / "fetcher.py"
    script.write_text(_FETCHER)
    (homes["a"] / "config.toml").write_text(
        f'[permission]\n"*" = "allow"\n[mcp_servers.fetcher]\ncommand = "{sys.executable}"\n'
        f'args = ["{script}", "{url_file}"]\n'
    )
    (homes["b"] / "config.toml").write_text('[permission]\n"*" = "allow"\n')
    hello = json.dumps(_HELLO)
    model_a = write_scenario(
        tmp_path / "deputy.yaml",
        {
            "deputy": [
                {"tool_calls": [{"name": "mcp__fetcher__post", "input": {"body": hello}}]},
                {"text": "deputy said: {{tool_result}}"},
            ]
        },
    )
    model_b = write_scenario(tmp_path / "b.yaml", {"launched": [{"text": "B ran an agent"}]})
    async with (
        http_server(homes["b"], model_b, projects["b"]) as url_b,
        http_server(homes["a"], model_a, projects["a"]) as url_a,
        Client(url_a) as client,
    ):
        url_file.write_text(url_b)
        answer = _text(await client.call_tool("Agent", _agent("deputy", kind="general-purpose")))
        plain = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-c", _PLAIN_POST, url_b, hello],
                capture_output=True,
                text=True,
                timeout=60,
            )
        )
    assert "status 403" in answer and "started by subvisor supervisor" in answer, answer
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith("status 200"), plain.stdout


_HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "deputy", "version": "0"},
    },
}

#: The fetcher's POST, from a process of the user's: ``URL BODY``.
_PLAIN_POST = """
import sys
import httpx2
headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
reply = httpx2.post(sys.argv[1], content=sys.argv[2], headers=headers)
print(f"status {reply.status_code} {reply.text[:300]}")
"""


def test_http_beyond_loopback_needs_a_flag_and_a_token(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-1: a non-loopback address is refused without --allow-remote and a token."""
    plain = run_cli(home, *mcp_args(model, project, "--http", "0.0.0.0:0")[2:])
    assert plain.returncode == 2
    assert "not a loopback address; pass --allow-remote" in plain.stderr
    no_token = run_cli(home, *mcp_args(model, project, "--http", "0.0.0.0:0", "--allow-remote")[2:])
    assert no_token.returncode == 2
    assert "--allow-remote needs a bearer token: set SUBVISOR_MCP_TOKEN" in no_token.stderr
    bad = run_cli(home, *mcp_args(model, project, "--http", "localhost")[2:])
    assert bad.returncode == 2 and "expected HOST:PORT" in bad.stderr
    assert "Traceback" not in plain.stderr + no_token.stderr + bad.stderr


def test_stdio_without_a_model_says_what_to_do(home: Path, project: Path) -> None:
    """Bad input: one line and exit 2, never a traceback."""
    env = cli_env(home)
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "mcp", "--cwd", str(project)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no model configured: pass --model" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_mcp_inspector_cli_lists_the_tools_and_runs_an_agent(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-1 with a client nobody here wrote: the MCP Inspector's CLI, from npm."""

    def inspector(*method: str) -> Any:
        done = subprocess.run(
            [
                str(inspector_cli()),
                "--cli",
                "-e",
                f"SUBVISOR_HOME={home}",
                "-e",
                f"PYTHONPATH={CHECKOUT}",
                *method,
                "--",
                sys.executable,
                *mcp_args(model, project),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=project,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    listed = inspector("--method", "tools/list")
    assert [tool["name"] for tool in listed["tools"]] == TOOLS
    called = inspector(
        "--method",
        "tools/call",
        "--tool-name",
        "Agent",
        "--tool-arg",
        "description=list files",
        "prompt=list the project",
        "subagent_type=Explore",
    )
    assert called["isError"] is False
    text = called["content"][0]["text"]
    assert text.startswith("listed: ") and "README.md" in text
    assert "<usage>total_tokens:" in text


async def test_a_client_that_leaves_takes_its_running_agents_with_it(
    home: Path, model: str, project: Path
) -> None:
    """S-SRV-5: when the connection closes, its seat's agents are stopped, saying why."""
    async with stdio_client(home, model, project) as client:
        launched = _text(await client.call_tool("Agent", _agent("stuck", background=True)))
    agent_id = _agent_id(launched)
    ps = await trio.to_thread.run_sync(lambda: run_cli(home, "ps", "--json", cwd=project))
    assert ps.returncode == 0, ps.stderr
    (task,) = [t for t in json.loads(ps.stdout)["tasks"] if t["task_id"] == agent_id]
    assert task["status"] == "killed"
    assert task["error"] == "the MCP client disconnected"


class SamplingModel:
    """A client's own model, as its ``sampling_callback``: LS first, then quote the result."""

    def __init__(self) -> None:
        self.asked: list[types.CreateMessageRequestParams] = []

    async def __call__(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResultWithTools:
        self.asked.append(params)
        last = params.messages[-1].content
        results = [
            b for b in (last if isinstance(last, list) else [last]) if b.type == "tool_result"
        ]
        if not results:
            call = types.ToolUseContent(type="tool_use", id="c1", name="LS", input={"path": "."})
            return types.CreateMessageResultWithTools(
                role="assistant", content=[call], model="client-model", stop_reason="toolUse"
            )
        seen = results[0].content[0]
        assert isinstance(seen, types.TextContent)
        answer = types.TextContent(type="text", text=f"sampled: {seen.text}")
        return types.CreateMessageResultWithTools(
            role="assistant", content=[answer], model="client-model", stop_reason="endTurn"
        )


async def test_mcp_sampling_runs_the_subagent_on_the_clients_own_model(
    home: Path, project: Path
) -> None:
    """S-SRV-4: with --model mcp-sampling the child's every model call is the client's
    sampling request, with its instructions and tools; the child's real LS result goes
    back to the client's model, whose answer is the Agent result. No key anywhere."""
    model = SamplingModel()
    tools = types.SamplingCapability(tools=types.SamplingToolsCapability())
    async with stdio_client(
        home, "mcp-sampling", project, sampling_callback=model, sampling_capabilities=tools
    ) as client:
        result = await client.call_tool("Agent", _agent("list files"))
    text = _text(result)
    assert not result.is_error, text
    assert text.startswith("sampled: ") and "README.md" in text
    first, second = model.asked
    assert "LS" in {tool.name for tool in first.tools or ()}
    assert first.system_prompt and first.messages[0].role == "user"
    assert "do list files" in str(first.messages[0].content)
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]


async def test_mcp_sampling_without_the_clients_capability_says_what_to_do(
    home: Path, project: Path
) -> None:
    """S-SRV-4: a client that cannot sample with tools gets an error naming the fix."""
    async with stdio_client(home, "mcp-sampling", project) as client:
        result = await client.call_tool("Agent", _agent("list files"))
    text = _text(result)
    assert "does not offer sampling with tools" in text and "--model provider:model" in text
