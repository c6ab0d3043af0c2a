"""A real subagent whose Bash attacks: the harness of ``tests/security`` (S-SEC-1..9).

``bash_attack`` runs a scripted root that delegates to one subagent; that
subagent's only turn runs the given Bash commands in its real, sandboxed
worker, and the tool results come back in call order. Every test in
``tests/security`` asserts what the attack achieved, never how it was stopped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol import ChatMessage
from supervisor import RootSession, Subvisor
from supervisor.policy._sandbox import SandboxSettings
from supervisor.state._task_record import TaskRecord
from tests.support.cli import run_cli
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario


def _project(tmp_path: Path) -> Path:
    """The default working directory: beside subvisor's home, never holding it."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return project


def bash(command: str, timeout_ms: int | None = None) -> dict[str, Any]:
    """One Bash call of a scripted turn."""
    call: dict[str, Any] = {"name": "Bash", "input": {"command": command}}
    if timeout_ms is not None:
        call["input"]["timeout"] = timeout_ms
    return call


@dataclass
class Attack:
    """What one attacking subagent got back."""

    results: list[ChatMessage]
    record: TaskRecord
    answer: str

    def output(self, index: int = 0) -> str:
        """The text of the ``index``-th tool result."""
        return self.results[index].content


async def bash_attack(
    tmp_path: Path,
    commands: Sequence[str],
    *,
    cwd: Path | None = None,
    subagent_type: str = "Explore",
    mode: str | None = None,
    network: str | None = None,
    home: Path | None = None,
    **settings: Any,
) -> Attack:
    """Run ``commands`` as one turn of Bash calls in a real ``subagent_type`` worker.

    ``mode``/``network`` force the sandbox as ``subvisor run --sandbox/--network``
    do (over ``sandbox``, where given); other keyword arguments go to
    ``SubvisorSettings``.
    """
    cwd = cwd or _project(tmp_path)
    model = write_scenario(
        tmp_path / "attack.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("attack", "attack", subagent_type=subagent_type)]},
                {"text": "done:\n{{tool_result}}"},
            ],
            "attack": [
                {"tool_calls": [bash(c) for c in commands]},
                {"text": "{{tool_result}}"},
            ],
        },
    )
    if mode is not None or network is not None:
        # Over the ``sandbox`` settings given, if any (``allow_unix_sockets``).
        base = settings.get("sandbox", SandboxSettings())
        settings["sandbox"] = base.model_copy(update={"force_mode": mode, "force_network": network})
    async with subvisor(home or home_for(tmp_path), **settings) as host:
        root = RootSession(host, model=model, cwd=cwd)
        outcome = await root.run("attack")
        [record] = host.registry.list(root.session_id)
        results = tool_results(host, record)
    return Attack(results=results, record=record, answer=outcome.text)


def tool_results(host: Subvisor, record: TaskRecord) -> list[ChatMessage]:
    """The tool results in the session of ``record``'s subagent, in order."""
    assert record.child_session_id is not None
    return [m for m in host.store.messages(record.child_session_id) if m.role == "tool"]


async def children_said(host: Subvisor, session_id: str, *, ended: str) -> dict[str, str]:
    """Each subagent of ``session_id``, by description: its tool results' text, joined.

    Read once the subagent described ``ended`` has ended (a background one may outlive
    the root's turn).
    """
    records = {r.description: r for r in host.registry.list(session_id)}
    await host.registry.wait(records[ended].task_id)
    return {
        name: "".join(m.content for m in tool_results(host, record))
        for name, record in records.items()
    }


def cli_bash_attack(
    tmp_path: Path,
    commands: Sequence[str],
    *,
    home: Path,
    mode: str,
    network: str,
    subagent_type: str = "general-purpose",
    cwd: Path | None = None,
) -> str:
    """Run ``commands`` in a subagent of a real ``subvisor run`` process; the root's answer.

    The supervisor is then a process of its own with its own environment (a
    key in it is in ``/proc/PID/environ``), as a user would run it.
    """
    model = write_scenario(
        tmp_path / "cli-attack.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("attack", "attack", subagent_type=subagent_type)]},
                {"text": "done:\n{{tool_result}}"},
            ],
            "attack": [
                {"tool_calls": [bash(c) for c in commands]},
                {"text": "{{tool_result}}"},
            ],
        },
    )
    done = run_cli(
        home,
        "run", "--model", model, "--json", "--sandbox", mode, "--network", network,
        "--cwd", str(cwd or _project(tmp_path)), "attack",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer: str = json.loads(done.stdout)["answer"]
    return answer
