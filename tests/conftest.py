"""Shared fixtures: a real supervisor with real worker processes; the suite's own rules.

Rules that hold for every way of running the suite (``.ci/run`` and the
README's ``python -m pytest`` alike):

- No silent green: a test may skip only where the machine truly cannot run
  it, and says what it lacks with ``@pytest.mark.machine_may_lack(what)``
  (``when=`` skips it where that is true; without it the test calls
  ``pytest.skip`` itself once it finds the machine lacking). Any other skip
  is reported as a failure, and so is a module that skips at collection.
  The run ends with a summary of the skips it allowed.
- "No tests collected" fails.
- Hypothesis runs without its per-example deadline (profiles below).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from supervisor import Supervisor, SupervisorConfig
from tests.support.environment import environ_restored

# Hypothesis's 200 ms deadline per example, and its "too slow" health check,
# time the machine, not the code: this suite runs beside real worker
# processes and, in CI and on shared machines, beside other load, where they
# made ~80 property tests flaky. No test here is about speed (none may use a
# wall-clock threshold), so both are off. Locally ("suite") examples stay
# random and failures are kept in .hypothesis/ to be replayed; CI ("ci",
# chosen by .ci/run with --hypothesis-profile=ci) is derandomized, so a run
# is reproducible from its commit alone and a red run is red again.
settings.register_profile(
    "suite", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("ci", settings.get_profile("suite"), derandomize=True, database=None)
settings.load_profile("suite")

MACHINE_MAY_LACK = "machine_may_lack"


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in item.iter_markers(MACHINE_MAY_LACK):
            if len(marker.args) != 1 or not isinstance(marker.args[0], str) or not marker.args[0]:
                raise pytest.UsageError(
                    f"{item.nodeid}: machine_may_lack needs one string: what the machine may lack"
                )
        marker = item.get_closest_marker(MACHINE_MAY_LACK)
        if marker is not None and marker.kwargs.get("when", False):
            item.add_marker(pytest.mark.skip(reason=f"this machine lacks {marker.args[0]}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    allowed = item.get_closest_marker(MACHINE_MAY_LACK) is not None
    if report.skipped and not hasattr(report, "wasxfail") and not allowed:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped ({_skip_reason(report)}), but a test may skip only where the machine "
            f"truly cannot run it: install what it needs, or mark the test "
            f"@pytest.mark.machine_may_lack(what)"
        )
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped:
        # A module that skips at import carries no marker that could allow it.
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid} skipped at collection ({_skip_reason(report)}): a module may "
            f"not skip; mark its tests @pytest.mark.machine_may_lack(what, when=...) instead"
        )
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.when != "collect"]
    terminalreporter.section("skip summary", sep="-")
    if not skipped:
        terminalreporter.line("no test skipped")
        return
    terminalreporter.line(f"{len(skipped)} skipped, each where this machine lacks what it needs:")
    for report in skipped:
        terminalreporter.line(f"  {report.nodeid}: {_skip_reason(report)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # "No tests collected" must not pass as success (CI and the README command).
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _private_subvisor_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """No test reads or writes the user's ``~/.subvisor`` (nor ``$HOME``); a test may set its
    own home.

    Session-scoped so that module-scoped fixtures (a shared stress run) see it too.
    """
    home = tmp_path_factory.mktemp("subvisor-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SUBVISOR_HOME", str(home))
        patch.setenv("HOME", str(tmp_path_factory.mktemp("user-home")))
        yield home


@pytest.fixture(autouse=True)
def _private_user_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test has a ``$HOME`` of its own, so ``~/.subvisor`` too: there every run lists
    its home, and hides every home listed (``state._paths.register_home``). Shared, the
    list would grow by each test's home, and each later test hide them all."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("user-home")))


@pytest.fixture(autouse=True)
def _no_environment_left_behind() -> Iterator[None]:
    """What a test, or a library it runs, sets in this process's environment is undone
    after it. Ray's ``ray.init`` sets ``PYTHONBREAKPOINT`` and its ``ray.shutdown`` leaves
    it: every ``subvisor`` child of a later test inherited it (and was started cold, its
    environment not the warm interpreter's: tests/support/cli.py)."""
    with environ_restored():
        yield


@pytest.fixture
async def sup() -> AsyncIterator[Supervisor]:
    """A zygote-mode supervisor that samples memory often (caps act fast in tests)."""
    config = SupervisorConfig(sample_interval_s=0.05, kill_grace_s=1.0)
    async with Supervisor(config) as supervisor:
        yield supervisor


@pytest.fixture(autouse=True)
def _no_supervisor_mark_left() -> Iterator[None]:
    """A test leaves this process unnamed ``subvisor-sup`` (S-SEC-2): while it bears the
    name, every process it starts is refused by every control channel and ``mcp --http``,
    so a supervisor left open would fail later tests elsewhere, not this one."""
    from supervisor.kernel import _supervisor_mark

    yield
    left = _supervisor_mark._marks
    while _supervisor_mark._marks:
        _supervisor_mark.unmark_supervisor()
    assert left == 0, (
        f"this test left {left} supervisor mark(s): a Supervisor or Subvisor not closed"
    )
