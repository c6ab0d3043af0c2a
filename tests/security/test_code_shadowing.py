"""S-SEC-1 / S-SEC-3: the supervisor's own processes load no code a subagent could write.

``subvisor run`` runs in the project, which a workspace-write subagent may
write. The supervisor starts processes of its own while the run goes on:
gateway processes (they receive the keys), the zygote again if it dies,
exec'd workers. Started as ``python -m PACKAGE.MODULE``, Python would look
for ``PACKAGE`` in the current directory first, so a ``supervisor/`` or
``worker/`` package a subagent wrote there would run, unsandboxed, in place
of subvisor's own. Where subvisor itself is installed inside the project (a
project's virtualenv), a ``.pth`` file would too: the worker gets that code
read-only, and workspace-write is refused where the project is inside it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import sysconfig
from pathlib import Path, PurePosixPath

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import supervisor
from protocol import KERNEL_ECHO, EchoParams
from protocol._chat import ChatMessage, ModelRequest
from supervisor import RootSession, Supervisor, SupervisorConfig
from supervisor.kernel._own_code import _within, own_code_below
from supervisor.providers import GatewayConfig, ModelGateway
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer

#: The directory holding the ``supervisor`` package this test imports.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.realpath(supervisor.__file__)))
_MODULES = (
    "supervisor/__init__.py",
    "supervisor/providers/__init__.py",
    "supervisor/providers/_gateway_process.py",
    "worker/__init__.py",
    "worker/__main__.py",
    "worker/zygote.py",
)


def _plant(project: Path, marker: Path) -> None:
    for module in _MODULES:
        path = project / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"import os\nopen({str(marker)!r} + '-' + str(os.getpid()), 'w').write({module!r})\n"
        )


async def test_s_sec_1_a_gateway_process_runs_subvisors_code_not_the_projects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-1: started from a project holding a look-alike `supervisor` package, a gateway
    process (which holds the keys) runs subvisor's own module: the call streams through it
    and nothing of the project's package ran."""
    project, marker = tmp_path / "project", tmp_path / "RAN"
    _plant(project, marker)
    monkeypatch.chdir(project)
    with ProviderServer() as server:
        server.enqueue(
            CannedResponse.sse(
                [
                    (None, {"choices": [{"index": 0, "delta": {"content": "own code"}}]}),
                    (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                    (None, "[DONE]"),
                ]
            )
        )
        config = GatewayConfig.model_validate(
            {
                "processes": 1,
                "pool_after": 1,
                "providers": {"openai": {"base_url": server.base_url + "/v1", "api_key": "sk-x"}},
            }
        )
        async with ModelGateway(config, rng=random.Random(1)) as gateway:
            assert gateway.pool is not None
            gateway.pool.start_soon()
            with trio.fail_after(60):
                await gateway.pool.wait_started()
            assert gateway.pool.ready
            hello = (ChatMessage(role="user", content="hi"),)
            result = await gateway.call(ModelRequest(model="openai:m", messages=hello))
    assert result.text == "own code"
    assert not [path.name for path in os.scandir(tmp_path) if path.name.startswith("RAN-")]


@pytest.mark.parametrize("mode", ["zygote", "exec"])
async def test_s_sec_3_workers_and_the_zygote_run_subvisors_code_not_the_projects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """S-SEC-3: started from a project holding a look-alike `worker` package, the zygote and
    an exec'd worker run subvisor's own: a worker answers, and nothing of the project's ran."""
    project, marker = tmp_path / "project", tmp_path / "RAN"
    _plant(project, marker)
    monkeypatch.chdir(project)
    async with Supervisor(SupervisorConfig(max_workers=2)) as sup:
        handle = await sup.spawn(mode=mode)  # type: ignore[arg-type]
        echoed = await handle.request(KERNEL_ECHO, EchoParams(value="own code"))
    assert echoed.value == "own code"
    assert not [path.name for path in os.scandir(tmp_path) if path.name.startswith("RAN-")]


def test_s_sec_3_subvisors_code_below_a_writable_root_is_read_only_for_the_worker(
    tmp_path: Path,
) -> None:
    """S-SEC-3: a worker whose writable root holds subvisor's environment (its virtualenv,
    here this test run's) gets that environment read-only, as the worker itself reports.
    (Run as the `subvisor` script runs: the test runner puts the checkout on the path.)"""
    environment = str(Path(sys.prefix).resolve())
    script = f"""
import trio
from protocol import SandboxPolicy
from supervisor import Supervisor, SupervisorConfig

async def main():
    root = {os.path.dirname(environment)!r}
    policy = SandboxPolicy(mode="workspace-write", writable_roots=(root,))
    async with Supervisor(SupervisorConfig(max_workers=1)) as sup:
        handle = await sup.spawn(sandbox=policy)
        print("\\n".join(handle.sandbox.read_only))
        await handle.shutdown()

trio.run(main)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert environment in done.stdout.splitlines(), done.stdout


async def test_s_sec_3_workspace_write_is_refused_where_the_project_is_subvisors_code(
    tmp_path: Path,
) -> None:
    """S-SEC-3: run from inside subvisor's own environment (its virtualenv, here this test
    run's), which cannot be kept read-only while the project is writable, a workspace-write
    launch fails saying why and what to do, and runs nothing; a read-only one there runs."""
    project = Path(sys.prefix)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("w", "w", subagent_type="general-purpose")]},
                {"tool_calls": [agent_call("r", "r", subagent_type="Explore")]},
                {"text": "{{tool_result}}"},
            ],
            "w": [{"text": "should not run"}],
            "r": [{"text": "read-only ran"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        refused, ran = (m.content for m in host.store.messages(root.session_id) if m.role == "tool")
    assert "workspace-write refused" in refused and "subvisor's own code" in refused, refused
    assert "install subvisor outside the project" in refused
    assert "should not run" not in refused
    assert "read-only ran" in ran, ran


async def test_s_sec_1_an_installed_subvisors_processes_do_not_import_from_its_checkout() -> None:
    """S-SEC-1: with subvisor installed (here editable, from this checkout), the zygote is
    not told to import from the checkout, where a top-level module a subagent wrote (say
    `trio.py`, in a project that is the checkout) would come first."""
    checkout = _CHECKOUT
    async with Supervisor(SupervisorConfig(max_workers=1)) as sup:
        handle = await sup.spawn()
        pid = sup.zygote_pid
        assert pid is not None
        environ = await trio.Path(f"/proc/{pid}/environ").read_bytes()
        await handle.shutdown()
    variables = dict(item.partition(b"=")[::2] for item in environ.split(b"\0") if item)
    assert checkout.encode() not in variables.get(b"PYTHONPATH", b"").split(b":"), variables


_NAMES = st.lists(st.sampled_from(["a", "ab", "b", ".venv", ".venv-x", "lib"]), max_size=4)


@given(path=_NAMES, folder=_NAMES)
def test_s_sec_3_a_root_is_within_a_place_exactly_when_its_path_parts_are(
    path: list[str], folder: list[str]
) -> None:
    """S-SEC-3: the spawn-time check of a writable root against subvisor's own code compares
    whole path components, as ``PurePath.is_relative_to`` does: ``/x/.venv-x`` is not inside
    ``/x/.venv``, and ``/`` holds everything."""
    a, b = "/" + "/".join(path), "/" + "/".join(folder)
    assert _within(a, b) == PurePosixPath(a).is_relative_to(b)


def test_s_sec_3_a_root_is_judged_by_where_it_resolves(tmp_path: Path) -> None:
    """S-SEC-3: a writable root that is a symlink into subvisor's environment is refused
    (it names the place that holds it); a sibling whose name only starts like the
    environment's is not, and a folder holding the standard library gets it read-only."""
    environment = str(Path(sys.prefix).resolve())
    link = tmp_path / "innocent"
    link.symlink_to(environment)
    below, holder = own_code_below([str(link)])
    assert below == () and holder is not None and _within(environment, holder), holder
    sibling = tmp_path / (Path(environment).name + "-sibling")
    sibling.mkdir()
    assert own_code_below([str(sibling)]) == ((), None)
    stdlib = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
    below, holder = own_code_below([os.path.dirname(stdlib)])
    assert holder is None and stdlib in below, (below, holder)
