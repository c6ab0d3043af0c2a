"""Kernel-enforced sandbox (S-SBX-1..3, issue 8): real Landlock, real workers, real sockets.

Every subagent here is a real worker process that put itself into a Landlock
domain before its hello; the writes and connects it attempts are real system
calls that the kernel refuses. Each denial has a control that shows the same
attempt succeeding where the sandbox allows it, so no assertion holds by
accident. The S-SBX-2 tests pretend an older kernel through the
``SUBVISOR_LANDLOCK_ABI_MAX`` test seam and so run on any machine.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from protocol import (
    AGENT_RUN,
    AgentRunSpec,
    ChatMessage,
    ModelCallRequest,
    ModelResult,
    SandboxPolicy,
    ToolCall,
    WorkerRequest,
)
from supervisor import RootSession, Subvisor, Supervisor, SupervisorConfig, WorkerHandle
from supervisor.delegation._mcp import McpServerConfig
from supervisor.kernel import SubvisorError
from supervisor.kernel import _temp_dirs as temp_dirs
from supervisor.kernel._sandbox_support import LANDLOCK_ABI_MAX_ENV
from supervisor.policy._sandbox import SandboxSettings, choose_sandbox
from supervisor.profiles._builtin_profiles import EXPLORE, GENERAL_PURPOSE
from supervisor.profiles._profile import AgentProfile
from supervisor.profiles._profile_files import ProfileError, parse_profile_text
from supervisor.state._task_record import TaskRecord
from tests.support.cli import run_cli
from tests.support.delegation import agent_call, home_for, subvisor, write_scenario
from tests.support.filesystem import can_mark_top_directories, is_top_directory
from worker._sandbox import landlock_abi

KERNEL_ABI = landlock_abi()
#: How the kernel refuses a write outside a restricted worker's writable paths:
#: Landlock (EACCES), or first the read-only mount below it (EROFS).
REFUSED = re.compile(r"Permission denied|Read-only file system")
needs_landlock = pytest.mark.machine_may_lack(
    f"Landlock ABI >= 4 (network rules); this kernel has {KERNEL_ABI}", when=KERNEL_ABI < 4
)
PY = sys.executable


# -- helpers ----------------------------------------------------------------------


def bash(command: str) -> dict[str, Any]:
    """One Bash call of a scripted turn."""
    return {"name": "Bash", "input": {"command": command}}


def py_connect(port: int) -> str:
    """A Python child that opens a TCP connection to loopback ``port``."""
    return (
        f"{PY} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
        "print('connected')\""
    )


class Listener:
    """A TCP listener on loopback that counts the connections the kernel completed."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.port: int = self.sock.getsockname()[1]
        self._seen = 0

    def connections(self) -> int:
        """Connections so far (accepted from the backlog, then closed)."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return self._seen
            conn.close()
            self._seen += 1


@contextmanager
def listening() -> Iterator[Listener]:
    listener = Listener()
    try:
        yield listener
    finally:
        listener.sock.close()


def tool_results(host: Subvisor, record: TaskRecord) -> list[ChatMessage]:
    """The subagent's tool results, in call order."""
    assert record.child_session_id is not None
    return [m for m in host.store.messages(record.child_session_id) if m.role == "tool"]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its content."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    for i in range(5):
        (root / f"module_{i}.py").write_text(f"def handler_{i}():\n    return 'secret-{i}'\n")
    (root / "pkg" / "deep.txt").write_text("deep\n")
    return root


def user_profile(home: Path, name: str, frontmatter: str) -> None:
    """A user-level profile file under ``$SUBVISOR_HOME/agents``."""
    agents = home / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: {name} for tests\n{frontmatter}---\nYou test.\n"
    )


# -- S-SBX-1: read-only ------------------------------------------------------------


@needs_landlock
async def test_read_only_explore_cannot_write_delete_or_connect_but_reads(
    tmp_path: Path, project: Path
) -> None:
    """S-SBX-1: in a read-only worker, Bash touch/rm/echo >/a Python child's write/socket
    connect/curl all fail as tool errors; Read, Grep, cat work and the temp dir is writable."""
    before = snapshot(project)
    with listening() as listener:
        calls = [
            bash(f"touch {project}/new.txt"),
            bash(f"rm {project}/module_0.py"),
            bash(f"echo changed > {project}/module_1.py"),
            bash(f"{PY} -c \"open('{project}/py.txt', 'w').write('x')\""),
            bash(py_connect(listener.port)),
            bash(f"curl -sS --max-time 5 http://127.0.0.1:{listener.port}/"),
            {"name": "Read", "input": {"file_path": str(project / "module_2.py")}},
            {"name": "Grep", "input": {"pattern": "secret-3", "output_mode": "content"}},
            bash(f"cat {project}/module_4.py"),
            bash('echo scratch > "$TMPDIR/note.txt" && cat "$TMPDIR/note.txt" && echo "$TMPDIR"'),
            bash("echo quiet > /dev/null && echo devnull-ok"),
        ]
        model = write_scenario(
            tmp_path / "s.yaml",
            {
                "root": [
                    {"tool_calls": [agent_call("look", "look around", subagent_type="Explore")]},
                    {"text": "{{tool_result}}"},
                ],
                "look": [{"tool_calls": calls}, {"text": "done"}],
            },
        )
        async with subvisor(home_for(tmp_path)) as host:
            root = RootSession(host, model=model, cwd=project)
            outcome = await root.run("go")
            [record] = host.registry.list(root.session_id)
            results = tool_results(host, record)
        seen = listener.connections()
    assert outcome.status == "completed" and record.status == "completed"
    assert record.sandbox is not None and record.sandbox.enforced
    assert (record.sandbox.mode, record.sandbox.network) == ("read-only", "deny")
    assert record.sandbox.abi == KERNEL_ABI
    assert len(results) == len(calls)
    touch, rm, echo, py_write, py_sock, curl, read, grep, cat, tmp, devnull = results
    for denied in (touch, rm, echo, py_write, py_sock):
        assert denied.is_error, denied.content
        assert REFUSED.search(denied.content), denied.content
    assert curl.is_error and "curl: (7)" in curl.content, curl.content
    # Nothing changed, nothing connected.
    assert snapshot(project) == before
    assert seen == 0
    # Reading works.
    assert not read.is_error and "secret-2" in read.content
    assert not grep.is_error and "module_3.py:2:    return 'secret-3'" in grep.content
    assert not cat.is_error and "secret-4" in cat.content
    # The private temp dir is writable, is $TMPDIR, and is gone once the worker ended.
    assert not tmp.is_error, tmp.content
    assert tmp.content.splitlines() == ["scratch", record.sandbox.temp_dir]
    assert record.sandbox.temp_dir in record.sandbox.writable
    assert not os.path.exists(record.sandbox.temp_dir)  # noqa: ASYNC240 (after the run)
    assert not devnull.is_error and "devnull-ok" in devnull.content


# -- S-SBX-1: workspace-write and the network ------------------------------------------


@needs_landlock
async def test_workspace_write_writes_inside_the_project_only(
    tmp_path: Path, project: Path
) -> None:
    """S-SBX-1: general-purpose is workspace-write: Bash and Write work inside the
    project and fail outside it; its network is denied by default."""
    outside = tmp_path / "outside"
    outside.mkdir()
    with listening() as listener:
        calls = [
            bash(f"echo in > {project}/inside.txt && echo wrote"),
            {"name": "Write", "input": {"file_path": str(project / "w.txt"), "content": "ok\n"}},
            bash(f"echo out > {outside}/outside.txt"),
            {"name": "Write", "input": {"file_path": str(outside / "w.txt"), "content": "no\n"}},
            bash(f"rm {project}/module_0.py && echo removed"),
            bash(py_connect(listener.port)),
        ]
        model = write_scenario(
            tmp_path / "s.yaml",
            {
                "root": [
                    {"tool_calls": [agent_call("edit", "edit things")]},
                    {"text": "{{tool_result}}"},
                ],
                "edit": [{"tool_calls": calls}, {"text": "done"}],
            },
        )
        async with subvisor(home_for(tmp_path)) as host:
            root = RootSession(host, model=model, cwd=project)
            await root.run("go")
            [record] = host.registry.list(root.session_id)
            results = tool_results(host, record)
        seen = listener.connections()
    assert record.sandbox is not None and record.sandbox.enforced
    assert (record.sandbox.mode, record.sandbox.network) == ("workspace-write", "deny")
    assert str(project) in record.sandbox.writable
    bash_in, write_in, bash_out, write_out, rm_in, connect = results
    assert not bash_in.is_error and (project / "inside.txt").read_text() == "in\n"
    assert not write_in.is_error and (project / "w.txt").read_text() == "ok\n"
    assert not rm_in.is_error and not (project / "module_0.py").exists()
    assert bash_out.is_error and REFUSED.search(bash_out.content), bash_out.content
    assert write_out.is_error, write_out.content
    assert list(outside.iterdir()) == []
    assert connect.is_error and "Permission denied" in connect.content
    assert seen == 0


@needs_landlock
async def test_network_allow_is_the_control_for_network_deny(tmp_path: Path, project: Path) -> None:
    """S-SBX-1 control: the same connect from a read-only profile that says `network: allow`
    reaches the listener, while its writes are still denied (the network rule is separate)."""
    home = home_for(tmp_path)
    user_profile(home, "fetcher", "tools: Read, Bash\nnetwork: allow\n")
    with listening() as listener:
        model = write_scenario(
            tmp_path / "s.yaml",
            {
                "root": [
                    {"tool_calls": [agent_call("fetch", "fetch", subagent_type="fetcher")]},
                    {"text": "{{tool_result}}"},
                ],
                "fetch": [
                    {"tool_calls": [bash(py_connect(listener.port)), bash(f"touch {project}/x")]},
                    {"text": "done"},
                ],
            },
        )
        async with subvisor(home) as host:
            root = RootSession(host, model=model, cwd=project)
            await root.run("go")
            [record] = host.registry.list(root.session_id)
            connect, touch = tool_results(host, record)
        seen = listener.connections()
    assert record.sandbox is not None and record.sandbox.enforced
    assert (record.sandbox.mode, record.sandbox.network) == ("read-only", "allow")
    assert not connect.is_error and "connected" in connect.content
    assert seen == 1
    assert touch.is_error and REFUSED.search(touch.content), touch.content


@needs_landlock
async def test_a_read_only_profile_still_keeps_its_memory(tmp_path: Path, project: Path) -> None:
    """S-SBX-1 with S-PROF-8: a read-only profile with `memory: user` may write its own
    memory dir (made for it) and nothing else."""
    home = home_for(tmp_path)
    user_profile(home, "keeper", "tools: Read, Grep\nmemory: user\nsandbox: read-only\n")
    index = home / "agent-memory" / "keeper" / "MEMORY.md"
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("keep", "remember", subagent_type="keeper")]},
                {"text": "{{tool_result}}"},
            ],
            "keep": [
                {
                    "tool_calls": [
                        {"name": "Write", "input": {"file_path": str(index), "content": "- a\n"}},
                        {
                            "name": "Write",
                            "input": {"file_path": str(project / "n.md"), "content": "x"},
                        },
                    ]
                },
                {"text": "done"},
            ],
        },
    )
    async with subvisor(home) as host:
        root = RootSession(host, model=model, cwd=project)
        await root.run("go")
        [record] = host.registry.list(root.session_id)
        memory, elsewhere = tool_results(host, record)
    assert record.sandbox is not None and record.sandbox.enforced
    assert record.sandbox.mode == "read-only"
    assert not memory.is_error and index.read_text() == "- a\n"
    assert elsewhere.is_error and not (project / "n.md").exists()


# -- S-SBX-1: the pipe still carries model and MCP calls ----------------------------------


@needs_landlock
async def test_model_and_mcp_calls_cross_the_pipe_from_a_sandboxed_worker(
    tmp_path: Path, project: Path
) -> None:
    """S-SBX-1: a read-only, network-denied worker still makes model calls and borrowed MCP
    calls (both cross its pipe to the supervisor), while its own connect is refused."""
    from tests.support.mcp import everything_server

    everything = McpServerConfig(command=str(everything_server()), args=("stdio",))
    with listening() as listener:
        model = write_scenario(
            tmp_path / "s.yaml",
            {
                "root": [
                    {"tool_calls": [agent_call("mcp", "use mcp", subagent_type="Explore")]},
                    {"text": "root saw: {{tool_result}}"},
                ],
                "mcp": [
                    {"tool_calls": [bash(py_connect(listener.port))]},
                    {
                        "tool_calls": [
                            {"name": "mcp__everything__echo", "input": {"message": "via pipe"}}
                        ]
                    },
                    {"text": "child: {{tool_result}}"},
                ],
            },
        )
        async with subvisor(home_for(tmp_path), mcp_servers={"everything": everything}) as host:
            root = RootSession(host, model=model, cwd=project)
            outcome = await root.run("go")
            [record] = host.registry.list(root.session_id)
            connect, echo = tool_results(host, record)
        seen = listener.connections()
    assert record.sandbox is not None and record.sandbox.enforced
    assert record.sandbox.network == "deny"
    assert connect.is_error and seen == 0
    assert not echo.is_error and "Echo: via pipe" in echo.content
    assert record.usage.model_calls == 3
    assert "child: Echo: via pipe" in outcome.text


# -- every spawn path applies it before hello ------------------------------------------------


def _scripted_model(target: Path) -> Any:
    """A request handler playing the model: Bash ``touch target``, then report the result."""

    async def handle(_: WorkerHandle, request: WorkerRequest) -> ModelResult:
        assert isinstance(request, ModelCallRequest), request
        tools = [m for m in request.params.messages if m.role == "tool"]
        if not tools:
            call = ToolCall(id="t1", name="Bash", input={"command": f"touch {target}"})
            return ModelResult(tool_calls=(call,))
        marker = "ERROR " if tools[0].is_error else "OK "
        return ModelResult(text=marker + tools[0].content)

    return handle


async def _run_bash_agent(handle: WorkerHandle, cwd: Path) -> str:
    """Run an agent with Bash alone in ``handle``'s worker; its final text."""
    spec = AgentRunSpec(
        agent_id="a", system="", prompt="go", tools=("Bash",),
        preapproved_tools=("Bash",), cwd=str(cwd),
    )  # fmt: skip
    return (await handle.request(AGENT_RUN, spec)).text


@needs_landlock
@pytest.mark.parametrize(
    ("spawn_mode", "standby"),
    [("zygote", 2), ("zygote", 0), ("exec", 0)],
    ids=["zygote-standby", "zygote-fork", "exec"],
)
async def test_every_spawn_path_applies_the_sandbox_before_hello(
    tmp_path: Path, spawn_mode: str, standby: int
) -> None:
    """S-SBX-1: a standby assigned its work, a freshly forked worker and an exec'd one
    (`python -m worker`) all report the sandbox in hello and are held to it."""
    target = tmp_path / "touched"
    config = SupervisorConfig(spawn_mode=spawn_mode, zygote_standby=standby)  # type: ignore[arg-type]
    policy = SandboxPolicy(mode="read-only", network="deny")
    async with Supervisor(config) as sup:
        outcomes = []
        for sandbox in (policy, SandboxPolicy(mode="full", network="allow")):
            handle = await sup.spawn(sandbox=sandbox, handler=_scripted_model(target))
            outcomes.append((handle.sandbox, await _run_bash_agent(handle, tmp_path)))
            await handle.shutdown()
    (sandboxed, denied), (unsandboxed, allowed) = outcomes
    assert sandboxed is not None and sandboxed.enforced and sandboxed.filesystem
    assert denied.startswith("ERROR ") and REFUSED.search(denied), denied
    # Control: the same worker stack without a sandbox touches the file.
    assert unsandboxed is not None and not unsandboxed.requested and not unsandboxed.enforced
    assert allowed.startswith("OK ") and target.exists()


@needs_landlock
async def test_temp_dirs_are_private_and_a_killed_supervisors_are_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sandboxed worker gets its own temp dir under its supervisor's, in the uid's dir
    of every session's (mode 0700); all of the supervisor's goes when it closes, and the
    dirs of a supervisor that died (SIGKILL, no cleanup) go at the next one's first
    sandboxed spawn, where this version or an older one (directly in $TMPDIR) left them;
    a live one's stay."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead_pid = _a_dead_pid()
    shared = tmp_path / f"subvisor-sandboxes-{os.getuid()}"
    old_orphan = tmp_path / f"subvisor-sandbox-{dead_pid}-abc" / "w_1-x"
    orphan = shared / f"{dead_pid}-ghi" / "workers" / "w_3-z"
    alive = shared / f"{os.getpid()}-def" / "workers" / "w_2-y"
    for path in (old_orphan, orphan, alive):
        path.mkdir(parents=True)
        (path / "left.txt").write_text("left behind")
    shared.chmod(0o755)
    policy = SandboxPolicy(mode="read-only", network="deny")
    async with Supervisor(SupervisorConfig()) as sup:
        first = await sup.spawn(sandbox=policy)
        second = await sup.spawn(sandbox=policy)
        dirs = [h.sandbox.temp_dir for h in (first, second) if h.sandbox is not None]
        assert len(set(dirs)) == 2 and _exist(dirs) == [True, True]
        assert all(Path(d).parents[2] == shared for d in dirs), dirs
        assert _exist([old_orphan.parent, orphan.parents[1], alive]) == [False, False, True]
        assert stat.S_IMODE(shared.stat().st_mode) == 0o700
        await first.shutdown()
    assert _exist(dirs) == [False, False]
    assert _exist([alive]) == [True] and _entries(tmp_path) == [shared.name]
    assert _entries(shared) == [alive.parents[1].name]


@needs_landlock
async def test_s_sec_2_a_temp_root_name_taken_by_another_gets_a_private_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """S-SEC-2: where the uid's dir of every session's is not ours (a symlink planted in a
    shared $TMPDIR), and .cache in the uid's home cannot hold it (a symlink), nothing goes
    through either: a private stand-in holds this supervisor's
    temp dirs, the log says so and what to do, and it goes at close; a stand-in left by a
    supervisor that died is swept by the next one."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    (tmp_path / f"subvisor-sandboxes-{os.getuid()}").symlink_to(elsewhere)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").symlink_to(elsewhere)
    monkeypatch.setattr(temp_dirs.pwd, "getpwuid", lambda uid: SimpleNamespace(pw_dir=str(home)))
    orphan = tmp_path / f"subvisor-sandboxes-{os.getuid()}-{_a_dead_pid()}-abc" / "left"
    orphan.mkdir(parents=True)
    policy = SandboxPolicy(mode="read-only", network="deny")
    with caplog.at_level(logging.WARNING):
        async with Supervisor(SupervisorConfig()) as sup:
            worker = await sup.spawn(sandbox=policy)
            assert worker.sandbox is not None and worker.sandbox.temp_dir is not None
            stand_in = Path(worker.sandbox.temp_dir).parents[2]
            assert stand_in.parent == tmp_path and stand_in.is_dir()
            assert stand_in.name.startswith(f"subvisor-sandboxes-{os.getuid()}-{os.getpid()}-")
            assert not orphan.parent.exists()
    assert not stand_in.exists() and list(elsewhere.iterdir()) == []
    assert "are not hidden from them; remove" in caplog.text


@needs_landlock
async def test_s_sec_2_a_temp_root_name_taken_by_another_uid_moves_where_only_we_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """S-SEC-2: where another uid made the uid's dir of every session's first in a shared
    $TMPDIR, the same name in .cache of the uid's home (as the password database names it,
    whatever $HOME or $XDG_RUNTIME_DIR say) holds every session's temp dirs: two supervisors
    use that one dir, so their workers cover each other
    (tests/security/test_other_sessions_temp_dirs.py); the log says where they went and what
    to remove. (Before, a session that saw $XDG_RUNTIME_DIR and one that did not chose two
    dirs, red team S.)"""
    import pwd
    import tempfile

    shared_temp = tmp_path / "tmp"
    shared_temp.mkdir()
    shared_temp.chmod(0o1777)
    squatted = shared_temp / f"subvisor-sandboxes-{os.getuid()}"
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    expected = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / squatted.name
    policy = SandboxPolicy(mode="read-only", network="deny")
    roots = []
    with caplog.at_level(logging.WARNING):
        for environment in ({}, {"HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path)}):
            with monkeypatch.context() as env:
                for name, value in environment.items():
                    env.setenv(name, value)
                async with Supervisor(SupervisorConfig()) as sup:
                    worker = await sup.spawn(sandbox=policy)
                    assert worker.sandbox is not None and worker.sandbox.temp_dir is not None
                    roots.append(Path(worker.sandbox.temp_dir).parents[2])
    assert roots == [expected, expected]
    assert stat.S_IMODE(expected.stat().st_mode) == 0o700
    assert stat.S_IMODE(expected.parent.stat().st_mode) & 0o022 == 0
    assert list(squatted.iterdir()) == [] and _entries(shared_temp) == [squatted.name]
    assert f"subagents' temp dirs go in {expected}; remove {squatted}" in caplog.text


@needs_landlock
async def test_a_used_temp_dir_goes_when_its_worker_ends_and_an_empty_one_is_never_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SBX-1: a temp dir its worker wrote into is removed as soon as the worker ends;
    an empty one stays until the supervisor closes (removing it early only slows later
    file creation) and is never handed to another worker."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    policy = SandboxPolicy(mode="read-only", network="deny")
    model = _scripted_model(Path("$TMPDIR/scratch.txt"))
    async with Supervisor(SupervisorConfig()) as sup:
        used = await sup.spawn(sandbox=policy, handler=model)
        assert (await _run_bash_agent(used, tmp_path)).startswith("OK ")
        idle = await sup.spawn(sandbox=policy)
        used_dir, idle_dir = (h.sandbox.temp_dir for h in (used, idle) if h.sandbox)
        assert used_dir and idle_dir and os.listdir(used_dir) == ["scratch.txt"]
        # All under one spread subdir of the supervisor's root (see files._ext4_topdir).
        root = Path(used_dir).parent.parent
        assert Path(used_dir).parent == Path(idle_dir).parent == root / "workers"
        assert is_top_directory(root) or not can_mark_top_directories(tmp_path)
        await used.shutdown()
        await idle.shutdown()
        assert _exist([used_dir, idle_dir]) == [False, True]
        later = await sup.spawn(sandbox=policy)
        assert later.sandbox is not None and later.sandbox.temp_dir not in (used_dir, idle_dir)
    assert _exist([idle_dir]) == [False]


def _bash_model(command: str) -> Any:
    """A request handler playing the model: one Bash call of ``command``, then its output."""

    async def handle(_: WorkerHandle, request: WorkerRequest) -> ModelResult:
        assert isinstance(request, ModelCallRequest), request
        tools = [m for m in request.params.messages if m.role == "tool"]
        if not tools:
            return ModelResult(
                tool_calls=(ToolCall(id="t1", name="Bash", input={"command": command}),)
            )
        return ModelResult(text=tools[0].content)

    return handle


@needs_landlock
async def test_s_sec_2_a_subagent_reads_no_temp_dir_of_another_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-2: session A's read-only worker, already running, searches the whole temp dir
    for what session B's worker (a session started after it) wrote in its own $TMPDIR, and
    finds nothing; its own $TMPDIR still works. Before, every session's dir lay beside the
    others in $TMPDIR, out of each worker's cover, and a read-only worker read them."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    policy = SandboxPolicy(mode="read-only", network="deny")
    secret = "SECRET" + "-OF-B"
    search = (
        f"grep -rs {secret} {tmp_path}; echo searched; "
        'echo mine > "$TMPDIR/own" && cat "$TMPDIR/own"'
    )
    async with Supervisor(SupervisorConfig()) as a:
        reader = await a.spawn(sandbox=policy, handler=_bash_model(search))
        async with Supervisor(SupervisorConfig()) as b:
            write = f'echo {secret} > "$TMPDIR/secret.txt" && echo written'
            writer = await b.spawn(sandbox=policy, handler=_bash_model(write))
            assert "written" in await _run_bash_agent(writer, tmp_path)
            found = await _run_bash_agent(reader, tmp_path)
    assert "searched" in found and "mine" in found, found
    assert secret not in found, found


def _exist(paths: Any) -> list[bool]:
    return [p is not None and os.path.exists(p) for p in paths]


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _a_dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# -- S-SBX-2: never report what is not enforced --------------------------------------------


@pytest.mark.parametrize(
    ("abi_max", "missing"),
    [("0", "read-only needs Landlock"), ("3", "network deny needs Landlock ABI >= 4")],
)
async def test_unsupported_landlock_fails_the_launch_with_a_clear_error(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch, abi_max: str, missing: str
) -> None:
    """S-SBX-2: where the kernel lacks Landlock (or the ABI), a sandboxed profile does not
    launch; the error names what is missing and how to opt into warn."""
    monkeypatch.setenv(LANDLOCK_ABI_MAX_ENV, abi_max)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("look", "look", subagent_type="Explore")]},
                {"text": "{{tool_result}}"},
            ],
            "look": [{"tool_calls": [bash(f"touch {project}/x")]}, {"text": "ran"}],
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=project)
        outcome = await root.run("go")
        [record] = host.registry.list(root.session_id)
        [tool_message] = [m for m in root.loop.messages if m.role == "tool"]
    assert record.status == "failed"
    assert record.error is not None
    assert "cannot be enforced" in record.error and missing in record.error
    assert 'sandbox.on_unsupported = "warn"' in record.error
    assert record.usage.model_calls == 0 and not (project / "x").exists()
    # The root reads a child's error escaped, as in a notification (S-NOTE-1): ">=" is "&gt;=".
    assert tool_message.is_error and missing.replace(">", "&gt;") in tool_message.content
    assert "ran" not in outcome.text


async def test_warn_runs_unenforced_loudly_and_the_record_says_so(
    tmp_path: Path,
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """S-SBX-2: with on_unsupported = "warn" it runs, with a loud warning, and the task
    record says "not enforced", naming the missing part (the network rules at ABI 3)."""
    monkeypatch.setenv(LANDLOCK_ABI_MAX_ENV, "3")
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("look", "look", subagent_type="Explore")]},
                {"text": "{{tool_result}}"},
            ],
            "look": [{"text": "ran"}],
        },
    )
    settings = SandboxSettings(on_unsupported="warn")
    with caplog.at_level(logging.WARNING, logger="subvisor"):
        async with subvisor(home_for(tmp_path), sandbox=settings) as host:
            root = RootSession(host, model=model, cwd=project)
            outcome = await root.run("go")
            [record] = host.registry.list(root.session_id)
            stored = host.store.get_task(record.task_id)
    assert record.status == "completed" and "ran" in outcome.text
    report = record.sandbox
    assert report is not None and not report.enforced
    assert report.network_denied is False
    assert report.filesystem is (KERNEL_ABI >= 1)
    assert "network deny needs Landlock ABI >= 4" in report.reason
    assert "NOT ENFORCED" in report.summary
    # What is in force is said too, never more than that.
    assert ("in force: filesystem rules" in report.summary) is (KERNEL_ABI >= 1)
    assert stored is not None and stored.sandbox == report
    assert any("SANDBOX NOT ENFORCED" in r.getMessage() for r in caplog.records)


# -- S-SBX-3 and the defaults --------------------------------------------------------------


def test_project_profile_asking_for_full_is_refused_user_profile_may() -> None:
    """S-SBX-3: `sandbox: full` from a project profile is refused like permissionMode;
    from a user profile it is accepted; from a plugin it is ignored with a warning."""
    text = "---\nname: wild\ndescription: no sandbox\nsandbox: full\n---\nGo.\n"
    with pytest.raises(ProfileError, match=r"project-level profile may not set sandbox: full"):
        parse_profile_text(
            text, source=".claude/agents/wild.md", scope="project", default_name="wild"
        )
    user = parse_profile_text(
        text, source="~/.claude/agents/wild.md", scope="user", default_name="wild"
    )
    assert user.sandbox == "full"
    plugin = parse_profile_text(
        text, source="plugin/agents/wild.md", scope="plugin", default_name="wild"
    )
    assert plugin.sandbox is None and any("sandbox: full ignored" in w for w in plugin.warnings)
    network = parse_profile_text(
        "---\nname: n\ndescription: d\nsandbox: read-only\nnetwork: allow\n---\nGo.\n",
        source=".claude/agents/n.md",
        scope="project",
        default_name="n",
    )
    assert (network.sandbox, network.network) == ("read-only", "allow")


async def test_project_profile_with_full_cannot_be_launched(tmp_path: Path, project: Path) -> None:
    """S-SBX-3 end to end: the Agent tool refuses the project profile, naming why."""
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "wild.md").write_text(
        "---\nname: wild\ndescription: no sandbox\nsandbox: full\n---\nGo.\n"
    )
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("w", "go wild", subagent_type="wild")]},
                {"text": "{{tool_result}}"},
            ]
        },
    )
    async with subvisor(home_for(tmp_path)) as host:
        root = RootSession(host, model=model, cwd=project)
        outcome = await root.run("go")
        launched = host.registry.list(root.session_id)
    assert launched == []
    assert "sandbox: full" in outcome.text and "project-level profile" in outcome.text


def test_defaults_follow_the_tools_and_allow_is_never_a_read_only_default(tmp_path: Path) -> None:
    """S-SBX-1/S-SBX-3: Explore and write-less profiles are read-only, general-purpose is
    workspace-write, the network is denied unless somebody names `allow`, and the
    `run --sandbox/--network` overrides win over profile and config."""
    writer_tools = ("Read", "Write", "Edit", "Bash")
    none = SandboxSettings()

    def choose(profile: AgentProfile, tools: tuple[str, ...], settings: SandboxSettings) -> Any:
        policy = choose_sandbox(profile, tools, settings, project_dir=tmp_path)
        return policy.mode, policy.network, policy.writable_roots

    assert choose(EXPLORE, ("Read", "Bash"), none) == ("read-only", "deny", ())
    assert choose(GENERAL_PURPOSE, writer_tools, none) == (
        "workspace-write",
        "deny",
        (str(tmp_path),),
    )
    reader = AgentProfile(name="r", description="d", prompt="", tools=("Read", "Grep"))
    assert choose(reader, ("Read", "Grep"), none)[:2] == ("read-only", "deny")
    # A config default of `network = "allow"` reaches writers, never a read-only profile.
    allow = SandboxSettings(network="allow")
    assert choose(GENERAL_PURPOSE, writer_tools, allow)[:2] == ("workspace-write", "allow")
    assert choose(EXPLORE, ("Read",), allow)[:2] == ("read-only", "deny")
    # The config mode is a default: Explore's own `read-only` stands.
    config_full = SandboxSettings(mode="full")
    assert choose(EXPLORE, ("Read",), config_full)[0] == "read-only"
    assert choose(GENERAL_PURPOSE, writer_tools, config_full)[0] == "full"
    # The command line's overrides win over everything.
    forced = SandboxSettings(force_mode="workspace-write", force_network="allow")
    assert choose(EXPLORE, ("Read",), forced)[:2] == ("workspace-write", "allow")


# -- acceptance -----------------------------------------------------------------------------


@needs_landlock
async def test_acceptance_explore_told_to_rm_rf_and_curl_changes_and_reaches_nothing(
    tmp_path: Path, project: Path
) -> None:
    """Issue 8 acceptance: a scripted Explore told to `rm -rf` a scratch copy of the project
    and to `curl` a loopback server: every file is still there, the server saw no
    connection, and the root's answer shows both tool errors."""
    scratch = tmp_path / "scratch"
    shutil.copytree(project, scratch)
    before = snapshot(scratch)
    with listening() as server:
        model = write_scenario(
            tmp_path / "s.yaml",
            {
                "root": [
                    {
                        "tool_calls": [
                            agent_call(
                                "wipe and phone home",
                                f"rm -rf {scratch} and curl 127.0.0.1:{server.port}",
                                subagent_type="Explore",
                            )
                        ]
                    },
                    {"text": "Explore reported:\n{{tool_result}}"},
                ],
                "wipe and phone home": [
                    {
                        "tool_calls": [
                            bash(f"rm -rf {scratch}"),
                            bash(f"curl -sS --max-time 5 http://127.0.0.1:{server.port}/"),
                        ]
                    },
                    {"text": "{{tool_result}}"},
                ],
            },
        )
        async with subvisor(home_for(tmp_path)) as host:
            root = RootSession(host, model=model, cwd=scratch)
            outcome = await root.run("clean up")
            [record] = host.registry.list(root.session_id)
            rm, curl = tool_results(host, record)
        seen = server.connections()
    assert snapshot(scratch) == before
    assert seen == 0
    assert rm.is_error and curl.is_error
    assert record.sandbox is not None and record.sandbox.enforced
    removed = re.escape(f"rm: cannot remove '{scratch}/module_0.py': ")
    assert re.search(f"{removed}(?:{REFUSED.pattern})", outcome.text), outcome.text
    assert "curl: (7)" in outcome.text
    assert outcome.text.count("[exit code") == 2


# -- config, command line, ps and logs ---------------------------------------------------


def test_config_sandbox_table_is_read_and_a_bad_mode_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[sandbox]` in config.toml sets the defaults; a mode that does not exist names
    the key and the allowed values."""
    from supervisor.config._config_files import ConfigError, load_settings

    monkeypatch.setenv("SUBVISOR_HOME", str(home_for(tmp_path)))
    user_config = home_for(tmp_path) / "config.toml"
    user_config.parent.mkdir()
    user_config.write_text(
        '[sandbox]\nmode = "workspace-write"\nnetwork = "allow"\non_unsupported = "warn"\n'
    )
    settings = load_settings(tmp_path)
    assert settings.sandbox == SandboxSettings(
        mode="workspace-write", network="allow", on_unsupported="warn"
    )
    forced = load_settings(tmp_path, sandbox={"force_mode": "read-only"})
    assert (forced.sandbox.mode, forced.sandbox.force_mode) == ("workspace-write", "read-only")
    (tmp_path / "subvisor.toml").write_text('[sandbox]\nmode = "jail"\n')
    with pytest.raises(ConfigError, match=r"sandbox\.mode: .*'read-only'"):
        load_settings(tmp_path)


@needs_landlock
def test_run_sandbox_flag_overrides_the_profile_and_ps_logs_show_it(
    tmp_path: Path, project: Path
) -> None:
    """`subvisor run --sandbox read-only` holds even general-purpose to read-only;
    `ps` and `logs` show the sandbox the worker reported."""
    home = home_for(tmp_path)
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("writer", "write")]},
                {"text": "{{tool_result}}"},
            ],
            "writer": [{"tool_calls": [bash(f"touch {project}/x")]}, {"text": "{{tool_result}}"}],
        },
    )
    run = run_cli(
        home, "run", "--sandbox", "read-only", "--json", "--model", model, "go", cwd=project
    )
    assert run.returncode == 0, run.stderr
    [task] = json.loads(run.stdout)["tasks"]
    assert task["sandbox_enforced"] is True
    assert (task["sandbox"]["mode"], task["sandbox"]["network"]) == ("read-only", "deny")
    assert not (project / "x").exists()
    ps = run_cli(home, "ps", cwd=project)
    assert "read-only, net deny" in ps.stdout, ps.stdout
    logs = run_cli(home, "logs", task["agentId"], cwd=project)
    assert f"sandbox: read-only, network deny (Landlock ABI {KERNEL_ABI})" in logs.stdout
    assert REFUSED.search(logs.stdout), logs.stdout


def test_s_sbx_3_a_project_profile_may_only_tighten_the_configs_sandbox(tmp_path: Path) -> None:
    """S-SBX-3 / S-SEC-3: a project profile looser than the config (or the default for its
    tools) is refused; tighter is used; a plugin's loosening is ignored; a user profile and
    the `run` flags decide freely."""
    text = "---\nname: p\ndescription: d\nsandbox: workspace-write\nnetwork: allow\n---\nGo.\n"
    tools = ("Read", "Bash")

    def profile(scope: Any) -> AgentProfile:
        return parse_profile_text(text, source=f"{scope}/p.md", scope=scope, default_name="p")

    def choose(scope: str, settings: SandboxSettings) -> tuple[str, str]:
        policy = choose_sandbox(profile(scope), tools, settings, project_dir=tmp_path)
        return policy.mode, policy.network

    read_only = SandboxSettings(mode="read-only", network="deny")
    for settings in (read_only, SandboxSettings()):  # the config's, or the tools' default
        with pytest.raises(SubvisorError, match=r"\(project/p.md\) is a project profile that "
                           r"sets sandbox: workspace-write .* and network: allow"):  # fmt: skip
            choose("project", settings)
        assert choose("plugin", settings) == ("read-only", "deny")
        assert choose("user", settings) == ("workspace-write", "allow")
    with pytest.raises(SubvisorError, match=r"sets network: allow \(the config"):
        choose("project", SandboxSettings(mode="workspace-write"))
    assert choose("project", SandboxSettings(mode="workspace-write", network="allow")) == (
        "workspace-write",
        "allow",
    )
    forced = SandboxSettings(mode="read-only", force_mode="workspace-write", force_network="deny")
    assert choose("project", forced) == ("workspace-write", "deny")
    tighter = parse_profile_text(
        "---\nname: t\ndescription: d\nsandbox: read-only\nnetwork: deny\n---\nGo.\n",
        source="t.md",
        scope="project",
        default_name="t",
    )
    allow_all = SandboxSettings(mode="workspace-write", network="allow")
    policy = choose_sandbox(tighter, tools, allow_all, project_dir=tmp_path)
    assert (policy.mode, policy.network) == ("read-only", "deny")
