"""Workflows run in the current directory unless told otherwise: here, each test's own."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _in_a_project_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not the repository: a writer actor may write its project, and subvisor
    # refuses workspace-write where the project holds subvisor's own code.
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
