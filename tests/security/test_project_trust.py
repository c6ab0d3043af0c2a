"""S-SEC-3: a project's files start nothing and send no key until the user trusts them.

A repository (or a subagent that wrote into it) controls the project's
``.mcp.json`` and ``subvisor.toml``. Here each attack is a project as cloned,
run with the real ``subvisor`` CLI: its MCP server's command would touch a
marker file outside the project, its provider ``base_url`` points to a real
local HTTP server that records every request. Untrusted, nothing happens and
the run exits non-zero with one line naming the file and ``subvisor trust``;
each test then trusts the file (by command, flag or at a real pseudo-terminal)
as the control, and the same server starts or the same request arrives.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.attack import bash_attack
from tests.support.cli import CHECKOUT, run_cli, start_cli
from tests.support.delegation import home_for
from tests.support.provider_server import CannedResponse, ProviderServer

#: An MCP server whose first act is to touch the marker named by its argument.
MARKER_SERVER = """\
import sys
from pathlib import Path

Path(sys.argv[1]).touch()
from mcp.server.mcpserver import MCPServer

server = MCPServer("marker")


@server.tool()
def ping() -> str:
    \"\"\"Answer pong.\"\"\"
    return "pong"


server.run("stdio")
"""
#: The root calls the project's MCP tool and answers with its result.
SCENARIO = """\
agents:
  root:
    - tool_calls: [{name: mcp__marker__ping, input: {}}]
    - text: "the tool said {{tool_result}}"
"""
#: The root answers without calling anything.
PLAIN_SCENARIO = "agents:\n  root:\n    - text: plain answer\n"


class Project:
    """A cloned project whose MCP server would touch ``marker`` when started."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = home_for(tmp_path)
        self.dir = tmp_path / "project"
        self.dir.mkdir()
        self.marker = tmp_path / "server-started"
        self.server_script = tmp_path / "marker_server.py"
        self.server_script.write_text(MARKER_SERVER)
        (tmp_path / "scenario.yaml").write_text(SCENARIO)
        (tmp_path / "plain.yaml").write_text(PLAIN_SCENARIO)
        self.model = f"scripted:{tmp_path / 'scenario.yaml'}"
        self.plain_model = f"scripted:{tmp_path / 'plain.yaml'}"

    def server_args(self, *extra: str) -> list[str]:
        return [str(self.server_script), str(self.marker), *extra]

    def write_mcp_json(self, *extra: str) -> Path:
        path = self.dir / ".mcp.json"
        server = {
            "command": sys.executable,
            "args": self.server_args(*extra),
            "env": {"MARKER_TOKEN": "value-not-shown"},
        }
        path.write_text(json.dumps({"mcpServers": {"marker": server}}))
        return path

    def write_toml_servers(self, *extra: str) -> Path:
        path = self.dir / "subvisor.toml"
        path.write_text(
            "[mcp_servers.marker]\n"
            f"command = {json.dumps(sys.executable)}\n"
            f"args = {json.dumps(self.server_args(*extra))}\n"
            'env = { MARKER_TOKEN = "value-not-shown" }\n'
        )
        return path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(self.home, *args, cwd=self.dir)

    def run(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.cli("run", *flags, "--model", self.model, "go")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _assert_refused(result: subprocess.CompletedProcess[str], path: Path, state: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"{path} {state}" in line
    assert f"subvisor trust {path}" in line
    assert "--trust-project" in line


@pytest.mark.parametrize("kind", ["mcp.json", "subvisor.toml"])
def test_s_sec_3_an_untrusted_server_never_starts_until_subvisor_trust(
    project: Project, kind: str
) -> None:
    """S-SEC-3: `subvisor run` in a project whose server command would touch a marker exits
    non-zero with one line naming the file and `subvisor trust`; the marker never appears.
    Control: `subvisor trust` shows the command, args and env names (not values), records
    the trust, and the same run starts the server and calls its tool."""
    path = project.write_mcp_json() if kind == "mcp.json" else project.write_toml_servers()
    _assert_refused(project.run(), path, "is not trusted")
    assert not project.marker.exists()

    trusted = project.cli("trust")
    assert trusted.returncode == 0, trusted.stderr
    assert f"runs {sys.executable} {project.server_script} {project.marker}" in trusted.stdout
    assert "outside any sandbox" in trusted.stdout
    assert "MARKER_TOKEN" in trusted.stdout and "value-not-shown" not in trusted.stdout
    assert f"trusted {path}" in trusted.stdout
    assert not project.marker.exists()

    run = project.run()
    assert run.returncode == 0, run.stderr
    assert "the tool said pong" in run.stdout
    assert project.marker.exists()


def test_s_sec_3_a_changed_file_asks_again_and_revoke_forgets(project: Project) -> None:
    """Trust is bound to the content: an edited `.mcp.json` is refused as changed, a
    revoked one as untrusted; trusting the new content starts it (control)."""
    path = project.write_mcp_json()
    assert project.cli("trust", str(path)).returncode == 0
    project.write_mcp_json("--edited")
    _assert_refused(project.run(), path, "changed since you trusted it")
    assert not project.marker.exists()
    listed = project.cli("trust", "--list")
    assert f"{path}" in listed.stdout and "changed since trusted" in listed.stdout

    assert project.cli("trust").returncode == 0
    revoked = project.cli("trust", "--revoke")
    assert f"revoked {path}" in revoked.stdout
    _assert_refused(project.run(), path, "is not trusted")
    assert not project.marker.exists()

    assert project.cli("trust").returncode == 0
    assert project.run().returncode == 0
    assert project.marker.exists()


def test_s_sec_3_trust_project_flag_trusts_for_this_run_only(project: Project) -> None:
    """`--trust-project` (CI) starts the server without asking and records nothing."""
    path = project.write_mcp_json()
    run = project.run("--trust-project")
    assert run.returncode == 0, run.stderr
    assert "the tool said pong" in run.stdout
    assert project.marker.exists()
    project.marker.unlink()
    _assert_refused(project.run(), path, "is not trusted")
    assert not project.marker.exists()


def test_s_sec_3_commands_that_start_nothing_leave_untrusted_servers_out(
    project: Project,
) -> None:
    """`agents` and `demo` work in an untrusted project and never start its server;
    `workflow run` starts them, so it refuses like `run`."""
    path = project.write_mcp_json()
    agents = project.cli("agents")
    assert agents.returncode == 0, agents.stderr
    demo = project.cli("demo")
    assert demo.returncode == 0, demo.stderr
    workflow = project.cli("workflow", "run", "flow.py")
    _assert_refused(workflow, path, "is not trusted")
    assert not project.marker.exists()


def test_s_sec_3_an_untrusted_base_url_receives_no_key(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-3: a project `subvisor.toml` pointing the openai provider at a real local
    server gets no request (so no bearer key) until trusted; then the key arrives there
    (control: the same setting does redirect traffic once trusted)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "from the project's server"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    with ProviderServer() as server:
        server.enqueue(CannedResponse.json(answer))
        path = project.dir / "subvisor.toml"
        path.write_text(
            f'[gateway.providers.openai]\nbase_url = "{server.base_url}"\nstreaming = false\n'
        )
        run = ("run", "--model", "openai:gpt-test", "go")
        _assert_refused(project.cli(*run), path, "is not trusted")
        assert server.requests == []

        trusted = project.cli("trust", str(path))
        assert f"model calls go to {server.base_url}" in trusted.stdout
        assert "$OPENAI_API_KEY in the Authorization header" in trusted.stdout
        assert "sk-test-secret" not in trusted.stdout
        result = project.cli(*run)
        assert result.returncode == 0, result.stderr
        assert "from the project's server" in result.stdout
        (request,) = server.requests
    assert request.headers["authorization"] == "Bearer sk-test-secret"


@pytest.mark.parametrize(
    ("value", "accepted"), [("100000", False), ("2", True)], ids=["lift", "tighten"]
)
def test_s_sec_3_a_project_may_only_tighten_max_concurrent_subagents(
    project: Project, value: str, accepted: bool
) -> None:
    """A project's `max_concurrent_subagents = 100000` is refused, naming the key, the file
    and the user's config; `= 2` is taken (control)."""
    (project.dir / "subvisor.toml").write_text(f"max_concurrent_subagents = {value}\n")
    result = project.cli("run", "--model", project.plain_model, "go")
    if accepted:
        assert result.returncode == 0, result.stderr
        assert "plain answer" in result.stdout
        return
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"{project.dir / 'subvisor.toml'} sets max_concurrent_subagents = 100000" in line
    assert str(project.home / "config.toml") in line
    assert "--max-concurrent-subagents" in line


def _run_at_terminal(project: Project, answer: bytes) -> tuple[int, str, str]:
    """`subvisor run` with stdin and stderr on a real pseudo-terminal; ``answer`` typed
    at the trust question. Returns the exit code, the terminal's text and stdout."""
    master, slave = pty.openpty()
    process = start_cli(
        project.home,
        *("run", "--model", project.model, "go"),
        cwd=project.dir,
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    os.close(slave)
    screen = bytearray()
    while b"[y/N]" not in screen:
        ready, _, _ = select.select([master], [], [], 60)
        assert ready, f"no trust question on the terminal: {screen.decode(errors='replace')}"
        screen += os.read(master, 4096)
    os.write(master, answer)

    def drain() -> None:
        # Until the child's side closes (EIO on Linux).
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            screen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = process.communicate(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return process.returncode, screen.decode(errors="replace"), stdout.decode()


def test_s_sec_3_at_a_terminal_the_user_is_shown_the_command_and_asked(
    project: Project,
) -> None:
    """At a terminal, `subvisor run` shows what would start and asks: no refuses (the
    marker never appears, nothing is recorded); yes records the trust and starts it."""
    path = project.write_mcp_json()
    code, screen, _ = _run_at_terminal(project, b"n\n")
    assert f"runs {sys.executable} {project.server_script} {project.marker}" in screen
    assert "MARKER_TOKEN" in screen and "value-not-shown" not in screen
    assert code == 2
    assert f"{path} was not trusted; nothing was started" in screen
    assert not project.marker.exists()
    assert not (project.home / "trusted.json").exists()

    code, screen, stdout = _run_at_terminal(project, b"y\n")
    assert code == 0, screen
    assert "the tool said pong" in stdout
    assert project.marker.exists()
    (entry,) = json.loads((project.home / "trusted.json").read_text())["files"]
    assert (entry["path"], entry["workdir"]) == (str(path), str(project.dir))


BINARY = bytes(range(256)) * 4


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("subvisor.toml", BINARY, "is not UTF-8 text"),
        ("home/config.toml", BINARY, "is not UTF-8 text"),
        (".mcp.json", BINARY, "is not UTF-8 text"),
        ("subvisor.toml", b"max_turns = \n", "is not valid TOML"),
        ("subvisor.toml", b"mcp_servers = 5\n", "mcp_servers must be a table"),
        ("subvisor.toml", b"[mcp_servers.x]\ncommand = 5\n", "mcp_servers.x: command"),
        ("home/config.toml", b"[sandbox\n", "is not valid TOML"),
        (".mcp.json", b'{"mcpServers": []}', '"mcpServers" must be an object'),
        (".mcp.json", b"[]", "expected an object"),
        (".mcp.json", b'{"mcpServers": {"x": 5}}', "mcpServers.x must be an object"),
        (".mcp.json", b'{"mcpServers": {"x": {"command": 5}}}', "mcpServers.x: command"),
        (".mcp.json", b'{"mcpServers": {"x": {}}}', "give exactly one of command"),
        (".mcp.json", b"{not json", "is not valid JSON"),
        (".mcp.json", b"[" * 100_000, "is not valid JSON"),
        ("home/trusted.json", BINARY, "delete it to start over"),
    ],
)
def test_bad_config_input_is_one_line_and_a_non_zero_exit(
    project: Project, name: str, content: bytes, says: str
) -> None:
    """Issue 14 item 10: binary, malformed or wrongly shaped config files give one line
    naming the file and what to fix, exit 2, and never a traceback."""
    home_file = name.removeprefix("home/")
    path = project.home / home_file if home_file != name else project.dir / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    if name == "home/trusted.json":
        project.write_mcp_json()  # the store is read only when a file waits for trust
    for result in (project.run(), project.cli("trust")):
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert str(path) in line and says in line
    assert not project.marker.exists()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_config_name_that_is_not_a_regular_file_is_refused(project: Project, kind: str) -> None:
    """A FIFO planted as `.mcp.json` must not hang the run; a directory is no file."""
    path = project.dir / ".mcp.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    result = project.run()
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"{path} is not a regular file" in line


async def test_s_sec_3_a_subagent_cannot_trust_the_file_it_wrote(tmp_path: Path) -> None:
    """A subagent (sandbox `full`, so the home is writable to it) writes a `.mcp.json`
    and runs `subvisor trust` without the tree variable: refused, nothing recorded.
    The same command outside a worker is what the other tests run (control)."""
    project = Project(tmp_path)
    home = tmp_path / "user-home"
    mcp_json = json.dumps({"mcpServers": {"x": {"command": "touch", "args": ["/tmp/x"]}}})
    trust = (
        f"env -u SUBVISOR_TREE SUBVISOR_HOME={home} PYTHONPATH={CHECKOUT}"
        f" {sys.executable} -m supervisor.cli trust {project.dir} 2>&1; echo exit=$?"
    )
    attack = await bash_attack(
        tmp_path,
        [f"echo {shlex.quote(mcp_json)} > {project.dir / '.mcp.json'}", trust],
        subagent_type="general-purpose",
        mode="full",
    )
    out = attack.output(1)
    assert "trusting a project is the user's decision" in out, out
    assert "exit=2" in out
    assert (project.dir / ".mcp.json").exists()  # the write itself was allowed
    assert not (home / "trusted.json").exists()


#: A server that writes who it is into the marker named by its first argument.
NAMED_SERVER = MARKER_SERVER.replace(
    "Path(sys.argv[1]).touch()", "Path(sys.argv[1]).write_text(Path(__file__).parent.name)"
)


def _sibling_projects(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """The user's trusted ``good/`` (its `.mcp.json` runs its own `server.py`, a relative
    path) and a cloned sibling ``evil/`` with its own `server.py`. Returns the home,
    good, evil and the marker the server that starts writes its directory's name to."""
    home = home_for(tmp_path)
    marker = tmp_path / "started-by"
    (tmp_path / "plain.yaml").write_text(PLAIN_SCENARIO)
    good, evil = tmp_path / "good", tmp_path / "evil"
    for directory in (good, evil):
        directory.mkdir()
        (directory / "server.py").write_text(NAMED_SERVER)
    server = {"command": sys.executable, "args": ["server.py", str(marker)]}
    (good / ".mcp.json").write_text(json.dumps({"mcpServers": {"tools": server}}))
    trusted = run_cli(home, "trust", str(good / ".mcp.json"), cwd=good)
    assert trusted.returncode == 0, trusted.stderr
    return home, good, evil, marker


def test_s_sec_3_a_symlink_to_a_trusted_mcp_json_runs_nothing_in_another_project(
    tmp_path: Path,
) -> None:
    """S-SEC-3: `evil/.mcp.json -> ../good/.mcp.json` runs `python server.py` in evil/,
    evil's script: `subvisor run` there is refused naming evil's file, and no server
    starts. Control: the same run in good/ starts good's server."""
    home, good, evil, marker = _sibling_projects(tmp_path)
    (evil / ".mcp.json").symlink_to("../good/.mcp.json")
    model = f"scripted:{tmp_path / 'plain.yaml'}"
    _assert_refused(
        run_cli(home, "run", "--model", model, "go", cwd=evil), evil / ".mcp.json", "is not trusted"
    )
    assert not marker.exists()

    run = run_cli(home, "run", "--model", model, "go", cwd=good)
    assert run.returncode == 0, run.stderr
    assert marker.read_text() == "good"


def test_s_sec_3_a_trusted_mcp_json_loaded_with_cwd_elsewhere_asks_again(
    tmp_path: Path,
) -> None:
    """S-SEC-3: from evil/, `subvisor run --cwd ../good` would load good's trusted file but
    start `python server.py` in evil/ (servers start in the supervisor's directory):
    refused, nothing starts. Control: run from good/ it starts good's server."""
    home, good, evil, marker = _sibling_projects(tmp_path)
    model = f"scripted:{tmp_path / 'plain.yaml'}"
    run = ("run", "--cwd", str(good), "--model", model, "go")
    _assert_refused(run_cli(home, *run, cwd=evil), good / ".mcp.json", "is not trusted")
    assert not marker.exists()

    result = run_cli(home, *run, cwd=good)
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "good"


def test_s_sec_3_a_process_proc_does_not_name_cannot_trust(project: Project) -> None:
    """A process that ``/proc`` does not name (it sees the ``/proc`` of a PID namespace
    it is not in) cannot be shown to be outside a worker tree: `subvisor trust` refuses
    it, as the supervisor refuses to start there. Nothing is recorded."""
    project.write_mcp_json()
    namespaces = ["--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc"]
    holder = subprocess.Popen(["unshare", *namespaces, "sleep", "60"])
    try:
        sleeper = _child_named(holder.pid, "sleep")
        env = {**os.environ, "SUBVISOR_HOME": str(project.home), "PYTHONPATH": str(CHECKOUT)}
        env.pop("SUBVISOR_TREE", None)
        check = "import os; print('named', os.path.exists('/proc/self'))"
        enter = ["nsenter", "-t", str(sleeper), "--user", "--mount", "--preserve-credentials"]
        named = subprocess.run(
            [*enter, sys.executable, "-c", check], env=env, capture_output=True, text=True
        )
        assert named.stdout.strip() == "named False", named.stdout + named.stderr
        result = subprocess.run(
            [*enter, sys.executable, "-m", "supervisor.cli", "trust", str(project.dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "cannot be shown to be outside a subvisor worker tree" in line, line
    assert "trusting a project is the user's decision" in line, line
    assert not (project.home / "trusted.json").exists()


def _child_named(parent: int, name: str, timeout_s: float = 10.0) -> int:
    """The pid of ``parent``'s descendant called ``name``, once it exists."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in psutil.Process(parent).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.name() == name:
                    return int(child.pid)
        time.sleep(0.02)
    raise AssertionError(f"no {name} below process {parent}")


@pytest.mark.parametrize("kind", ["mcp.json", "subvisor.toml"])
def test_s_sec_3_a_trusted_server_whose_project_script_was_rewritten_asks_again(
    project: Project, kind: str
) -> None:
    """S-SEC-3: trust covers the project files a server's command line names. A
    workspace-write subagent can rewrite `server.py` (never `.mcp.json` itself); the next
    run refuses it as changed instead of running the rewrite outside any sandbox, and runs
    it once the user trusts the new content (control)."""
    script = project.dir / "server.py"
    script.write_text(MARKER_SERVER)
    project.server_script = Path("server.py")  # as a project names it: relative
    path = project.write_mcp_json() if kind == "mcp.json" else project.write_toml_servers()
    trusted = project.cli("trust", str(path))
    assert trusted.returncode == 0, trusted.stderr
    assert "trust covers the content of" in trusted.stdout and str(script) in trusted.stdout
    assert project.run().returncode == 0 and project.marker.exists()
    project.marker.unlink()

    pwned = project.dir.parent / "rewrite-ran"
    script.write_text(f"from pathlib import Path\nPath({str(pwned)!r}).touch()\n" + MARKER_SERVER)
    _assert_refused(project.run(), path, "changed since you trusted it")
    assert not pwned.exists() and not project.marker.exists()

    assert project.cli("trust", str(path)).returncode == 0
    assert project.run().returncode == 0
    assert pwned.exists() and project.marker.exists()


_RUNNER = (
    "import runpy, sys\n"
    "path = sys.argv.pop(1).split('=', 1)[1]\n"
    "sys.argv[0] = path\n"
    "runpy.run_path(path, run_name='__main__')\n"
)


@pytest.mark.parametrize("named_as", ["option value", "script directory"])
def test_s_sec_3_trust_covers_a_script_named_as_an_option_value_or_a_directory(
    project: Project, named_as: str
) -> None:
    """S-SEC-3: a server's code named as `--plugin=./server.py` or as the directory
    `./srv` (whose `__main__.py` Python runs) is covered by trust like `server.py`: a
    subagent's rewrite of it asks again instead of running outside any sandbox."""
    if named_as == "option value":
        (project.dir / "runner.py").write_text(_RUNNER)
        script = project.dir / "server.py"
        words = ["runner.py", "--plugin=./server.py"]
    else:
        script = project.dir / "srv" / "__main__.py"
        script.parent.mkdir()
        words = ["./srv"]
    script.write_text(MARKER_SERVER)
    project.server_args = lambda *extra: [*words, str(project.marker), *extra]  # type: ignore[method-assign]
    path = project.write_mcp_json()
    trusted = project.cli("trust", str(path))
    assert trusted.returncode == 0, trusted.stderr
    assert str(script) in trusted.stdout
    assert project.run().returncode == 0 and project.marker.exists()

    pwned = project.dir.parent / "rewrite-ran"
    script.write_text(f"from pathlib import Path\nPath({str(pwned)!r}).touch()\n" + MARKER_SERVER)
    _assert_refused(project.run(), path, "changed since you trusted it")
    assert not pwned.exists()
