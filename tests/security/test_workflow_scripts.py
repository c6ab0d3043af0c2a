"""A hostile workflow script: model-written code in its script worker (issue 18, S-SEC-1..7).

The root model writes the script, so the script is as untrusted as any
subagent: it runs in a sandboxed worker of its own, never in the supervisor.
Each attack is the script's own code; the test asserts what it achieved (and
that the run reports why), never how it was stopped.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from supervisor import RootSession
from supervisor.workflow import workflow_tools
from tests.support.delegation import home_for, subvisor, write_scenario
from worker import landlock_abi

SECRET = "sk-test-NEVER-IN-A-SCRIPT"

HOSTILE = textwrap.dedent(
    """
    import os, signal, sys, tempfile
    from supervisor.workflow import workflow

    @workflow
    async def hostile(ctx, supervisor_pid: int, outside: str):
        report = {}

        def attempt(name, fn):
            try:
                report[name] = f"done: {fn()!r}"
            except BaseException as exc:
                report[name] = f"refused: {type(exc).__name__}: {exc}"

        attempt("read_environ", lambda: open(f"/proc/{supervisor_pid}/environ", "rb").read())
        attempt("write_outside", lambda: open(outside, "w").write("owned"))
        attempt("signal", lambda: os.kill(supervisor_pid, signal.SIGTERM))
        attempt("import_alias", lambda: __import__("supervisor.delegation"))
        report["own_environ"] = dict(os.environ)

        # Past the alias: drop it, import the real package, start a Subvisor.
        for name in [m for m in sys.modules if m.split(".")[0] == "supervisor"]:
            del sys.modules[name]
        try:
            from supervisor import Subvisor, SubvisorSettings
            async with Subvisor(SubvisorSettings(home=tempfile.mkdtemp())):
                report["start_subvisor"] = "done: a supervisor runs inside the script worker"
        except BaseException as exc:
            report["start_subvisor"] = f"refused: {type(exc).__name__}: {exc}"
        return report
    """
)

KILLER = textwrap.dedent(
    """
    import os, signal
    from supervisor.workflow import workflow

    @workflow
    async def killer(ctx, supervisor_pid: int):
        os.kill(supervisor_pid, signal.SIGKILL)
        return "the supervisor is dead"
    """
)


@pytest.mark.machine_may_lack("Landlock ABI 6 (signal scoping)", when=landlock_abi() < 6)
async def test_a_hostile_workflow_script_is_contained_and_the_run_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script cannot read the supervisor's environment, holds no key, cannot write
    outside its sandbox, cannot signal the supervisor, cannot import or start a Subvisor
    (S-SEC-1, S-SEC-2, S-SEC-7); an unguarded attack fails its run with the reason."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    outside = tmp_path / "outside.txt"
    pid = os.getpid()
    model = write_scenario(
        tmp_path / "scenario.yaml",
        {
            "root": [
                {
                    "tool_calls": [
                        {
                            "name": "CreateWorkflow",
                            "input": {
                                "script": HOSTILE,
                                "description": "hostile",
                                "inputs": {"supervisor_pid": pid, "outside": str(outside)},
                            },
                        },
                        {
                            "name": "CreateWorkflow",
                            "input": {
                                "script": KILLER,
                                "description": "killer",
                                "inputs": {"supervisor_pid": pid},
                            },
                        },
                    ]
                },
                {"text": "started"},
                {"text": "noted"},
                {"text": "noted again"},
            ]
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=tmp_path, extra_tools=workflow_tools(host))
        await root.run("attack")
        runs = {r.description: r for r in host.registry.list(root.session_id)}
    hostile, killer = runs["hostile"], runs["killer"]
    assert hostile.status == "completed" and hostile.result is not None
    report = json.loads(hostile.result.split("\n\nworkflow run")[0])
    for attack in ("read_environ", "write_outside", "signal", "import_alias", "start_subvisor"):
        assert report[attack].startswith("refused: "), (attack, report[attack])
    assert "'supervisor' is not a package" in report["import_alias"]
    assert SECRET not in hostile.result
    assert not any("KEY" in name for name in report["own_environ"])
    assert not outside.exists()
    # The unguarded attack: its run failed, and says why.
    assert killer.status == "failed" and killer.error is not None
    assert "PermissionError" in killer.error and "Operation not permitted" in killer.error
    assert killer.notified and hostile.notified
