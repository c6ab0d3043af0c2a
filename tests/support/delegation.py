"""Helpers for delegation tests: scenario files and a Subvisor on a temporary home."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from protocol import ResourceLimits
from supervisor import Subvisor, SubvisorSettings
from supervisor.files._untrusted_yaml import dump_yaml


def write_scenario(path: Path, agents: dict[str, list[dict[str, Any]]]) -> str:
    """Write a scripted scenario and return its ``scripted:PATH`` model string."""
    path.write_text(dump_yaml({"agents": agents}, sort_keys=False))
    return f"scripted:{path}"


def agent_call(description: str, prompt: str, **extra: Any) -> dict[str, Any]:
    """One Agent tool call of a scripted turn."""
    return {"name": "Agent", "input": {"description": description, "prompt": prompt, **extra}}


@asynccontextmanager
async def subvisor(home: Path, **settings: Any) -> AsyncIterator[Subvisor]:
    """A Subvisor whose state lives under ``home``, with a short idle watchdog."""
    settings.setdefault("subagent_limits", ResourceLimits(memory_mb=1024, idle_timeout_s=30))
    async with Subvisor(SubvisorSettings(home=home, **settings)) as host:
        yield host


#: A scripted tool call that reads the project's README (see ``readme_project``).
READ_README: dict[str, Any] = {"name": "Read", "input": {"file_path": "README.md"}}


def readme_project(tmp_path: Path) -> Path:
    """A one-file project under ``tmp_path``: what ``READ_README`` reads."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# demo project\n")
    return root


def home_for(tmp_path: Path) -> Path:
    """A test's subvisor home, beside ``tmp_path`` rather than in it.

    Tests run their agents in ``tmp_path``; a workspace-write launch in a
    directory that holds subvisor's home is refused (S-SEC-3).
    """
    return tmp_path.parent / f"{tmp_path.name}.home"
