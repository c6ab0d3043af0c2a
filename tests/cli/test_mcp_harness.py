"""A real agent harness drives ``subvisor mcp``: opencode, from npm, on a scripted model.

opencode runs headless (``opencode run``) in a project whose ``opencode.json``
names subvisor as a local MCP server, exactly as the README tells a user to;
its model is a scripted OpenAI-compatible endpoint on 127.0.0.1 that calls
subvisor's Agent tool and then quotes what came back. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import cli_env
from tests.support.delegation import home_for, write_scenario
from tests.support.harness import QUOTE, AgentCallingModel, opencode
from tests.support.mcp_serve import mcp_args


def test_opencode_calls_subvisors_agent_tool_and_reads_the_answer(tmp_path: Path) -> None:
    """S-SRV-1: opencode lists subvisor's tools as subvisor_*, calls Agent, gets S-TOOL-6 text."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# demo project\n")
    home = home_for(tmp_path)
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "list files": [
                {"tool_calls": [{"name": "LS", "input": {"path": "."}}]},
                {"text": "listed: {{tool_result}}"},
            ]
        },
    )
    server_env = cli_env(home)
    call = {"description": "list files", "prompt": "list the project", "subagent_type": "Explore"}
    with AgentCallingModel(call) as endpoint:
        (project / "opencode.json").write_text(
            json.dumps(
                {
                    "$schema": "https://opencode.ai/config.json",
                    "provider": {
                        "scripted": {
                            "npm": "@ai-sdk/openai-compatible",
                            "name": "scripted",
                            "options": {"baseURL": endpoint.base_url, "apiKey": "unused"},
                            "models": {"m": {"name": "m", "tool_call": True}},
                        }
                    },
                    "mcp": {
                        "subvisor": {
                            "type": "local",
                            "command": [sys.executable, *mcp_args(model, project)],
                            "environment": {
                                "SUBVISOR_HOME": server_env["SUBVISOR_HOME"],
                                "PYTHONPATH": server_env["PYTHONPATH"],
                            },
                        }
                    },
                }
            )
        )
        # opencode's own state goes under tmp_path, not the user's home.
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("OPENCODE")},
            # opencode finds its project by $PWD, not by its working directory.
            "PWD": str(project),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
            "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
            "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
        }
        done = subprocess.run(
            [str(opencode()), "run", "--model", "scripted/m", "--format", "json", "list the files"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        offered = [
            [tool["function"]["name"] for tool in request.get("tools") or ()]
            for request in endpoint.requests
        ]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any(
        {"subvisor_Agent", "subvisor_SendMessage", "subvisor_TaskOutput"} <= set(tools)
        for tools in offered
    ), offered
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    texts = [e["part"]["text"] for e in events if e.get("type") == "text"]
    answer = next(text for text in texts if text.startswith(QUOTE))
    assert answer.startswith(QUOTE + "listed: ")
    assert "README.md" in answer  # a real LS in a real subvisor worker
    assert "agentId: agent_" in answer and "<usage>" in answer
