"""Shared fixtures: a real supervisor with real worker processes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from supervisor import Supervisor, SupervisorConfig


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # "No tests collected" must not pass as success (CI and the README command).
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _private_subvisor_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test reads or writes the user's ``~/.subvisor``; a test may set its own home.

    Session-scoped so that module-scoped fixtures (a shared stress run) see it too.
    """
    home = tmp_path_factory.mktemp("subvisor-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SUBVISOR_HOME", str(home))
        yield home


@pytest.fixture
async def sup() -> AsyncIterator[Supervisor]:
    """A zygote-mode supervisor that samples memory often (caps act fast in tests)."""
    config = SupervisorConfig(sample_interval_s=0.05, kill_grace_s=1.0)
    async with Supervisor(config) as supervisor:
        yield supervisor
