"""Usage accounting: per subagent, rolled up per session, stored in SQLite, shown everywhere.

Issue 6: tokens (input, output, cache), model calls, tool calls, wall and CPU time and
peak RSS per subagent; a session's total is its root's own usage plus every
subagent's, field by field, in ``subvisor ps``, ``subvisor top`` and ``run --json``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from supervisor import RootSession
from supervisor.cli._control import serve_control
from supervisor.cli._control_client import control_request
from supervisor.cli._control_ops import SessionOp
from supervisor.state._store import SCHEMA_VERSION, SessionStore
from supervisor.state._task_record import TaskUsage
from supervisor.state._usage import UsageRollup, add_usage, sum_usage
from tests.support.cli import run_cli
from tests.support.delegation import (
    READ_README,
    agent_call,
    readme_project,
    subvisor,
    write_scenario,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return readme_project(tmp_path)


def scenario(tmp_path: Path) -> str:
    return write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        agent_call("reader", "read the readme"),
                        agent_call("twice", "read it twice"),
                        agent_call("later", "answer later", run_in_background=True),
                    ]
                },
                {"text": "root says {{tool_result}}"},
                {"text": "noted"},
            ],
            "reader": [{"tool_calls": [READ_README]}, {"text": "it is {{tool_result}}"}],
            "twice": [
                {"tool_calls": [READ_README, READ_README]},
                {"tool_calls": [READ_README]},
                {"text": "read three times"},
            ],
            "later": [{"text": "background answer"}],
        },
    )


def fields(usage: TaskUsage) -> dict[str, Any]:
    return usage.model_dump()


async def test_each_subagent_records_its_own_usage(tmp_path: Path, project: Path) -> None:
    """Tokens, model and tool calls, wall and CPU time, peak RSS: per subagent, in its record
    and in the store's session_usage of its child session."""
    async with subvisor(tmp_path / "home") as host:
        root = RootSession(host, model=scenario(tmp_path), cwd=project)
        await root.run("go")
        records = {r.description: r for r in host.registry.list(root.session_id)}
        stored = {
            name: host.store.session_usage(r.child_session_id or "") for name, r in records.items()
        }
    expected_calls = {"reader": (2, 1), "twice": (3, 3), "later": (1, 0)}
    for name, (model_calls, tool_calls) in expected_calls.items():
        usage = records[name].usage
        assert (usage.model_calls, usage.tool_calls) == (model_calls, tool_calls), name
        assert usage.input_tokens > 0 and usage.output_tokens > 0
        assert usage.duration_ms > 0 and usage.cpu_seconds > 0 and usage.peak_rss_bytes > 0
        assert stored[name] == usage  # the same numbers in SQLite


async def test_a_session_rolls_up_its_root_and_every_subagent(
    tmp_path: Path, project: Path
) -> None:
    """The stored rollup and the live control channel's: own + the field by field sum."""
    async with subvisor(tmp_path / "home") as host:
        root = RootSession(host, model=scenario(tmp_path), cwd=project)
        async with serve_control(host, root.session_id, root=root) as session:
            await root.run("go")
            reply = await trio.to_thread.run_sync(
                functools.partial(control_request, session.address, SessionOp())
            )
            live = UsageRollup.from_summary(reply["usage"])
        root_own = TaskUsage(
            input_tokens=root.loop.usage.input_tokens,
            output_tokens=root.loop.usage.output_tokens,
            model_calls=root.loop.model_calls,
            tool_calls=root.loop.tool_calls,
        )
        host.store.record_usage(root.session_id, root_own)
        stored = host.store.usage_rollup(root.session_id)
        records = host.registry.list(root.session_id)
    children = [r.usage for r in records]
    assert len(children) == 3
    assert stored.subagent_count == live.subagent_count == 3
    assert stored.own == root_own
    assert stored.subagents == live.subagents == sum_usage(children)
    assert stored.total == add_usage(root_own, sum_usage(children))
    for name in ("input_tokens", "output_tokens", "model_calls", "tool_calls", "peak_rss_bytes"):
        assert getattr(stored.total, name) == getattr(root_own, name) + sum(
            getattr(c, name) for c in children
        )
    # The live rollup counts the root as it runs: its calls so far.
    assert live.own.model_calls == root.loop.model_calls >= 2
    assert stored.summary()["total_tokens"] == stored.total.total_tokens


def test_run_json_and_ps_show_the_same_stored_rollup(tmp_path: Path, project: Path) -> None:
    """`run --json`'s usage is what `ps` reads back from SQLite afterwards: root + subagents."""
    home = tmp_path / "home"
    run = run_cli(home, "run", "--json", "--model", scenario(tmp_path), "go", cwd=project)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    usage = report["usage"]
    tasks = report["tasks"]
    assert usage["subagent_count"] == len(tasks) == 3
    for name in ("input_tokens", "output_tokens", "model_calls", "tool_calls", "cpu_seconds"):
        children = sum(t["usage"][name] for t in tasks)
        assert usage["subagents"][name] == pytest.approx(children)
        assert usage["total"][name] == pytest.approx(usage["root"][name] + children)
    # Two turns, or three when the background answer arrives after the first answer.
    assert usage["root"]["model_calls"] in (2, 3) and usage["root"]["cpu_seconds"] > 0
    assert usage["total_tokens"] == sum(
        usage["total"][k]
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    )
    ps = run_cli(home, "ps", "--json", cwd=project)
    assert ps.returncode == 0, ps.stderr
    listed = json.loads(ps.stdout)
    assert not listed["live"] and listed["usage"] == usage
    table = run_cli(home, "ps", cwd=project)
    assert f"tokens {usage['total_tokens']} " in table.stdout
    assert "root + 3 subagents" in table.stdout


def test_a_version_1_database_gains_session_usage_on_open(tmp_path: Path) -> None:
    """Schema 2 is additive: a database written before usage accounting keeps its rows."""
    path = tmp_path / "subvisor.db"
    with SessionStore(path) as store:
        store.create_session("sess_old", parent_id=None, task_type="root")
    raw = sqlite3.connect(path)
    raw.execute("DROP TABLE session_usage")
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()
    with SessionStore(path) as store:
        assert store.get_session("sess_old") is not None
        assert store.usage_rollup("sess_old").total == TaskUsage()
        store.record_usage("sess_old", TaskUsage(input_tokens=7))
        assert store.usage_rollup("sess_old").total.input_tokens == 7
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_usage_of_an_unknown_session_is_refused(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "subvisor.db") as store, pytest.raises(LookupError, match="nope"):
        store.record_usage("nope", TaskUsage())
