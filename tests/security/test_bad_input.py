"""Issue 14 item 10: bad input of every kind is one line and a non-zero exit, never a traceback.

Every test runs the real ``subvisor`` command line in a subprocess. Files a
repository (or a subagent writing to the workspace) can plant are among the
inputs (S-SEC-3): a FIFO where a profile or memory index should be, a YAML
alias bomb, a binary profile. The property tests at the end call the loaders
in-process with random bytes.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.profiles._profile_files import ProfileError, parse_profile_file
from supervisor.providers import ScenarioError
from supervisor.providers._scripted import load_scenario
from tests.support.attack import bash_attack
from tests.support.cli import cli_env, run_cli
from tests.support.delegation import agent_call, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer

#: Long enough for a loaded machine, short enough that a hang fails the test.
HANG = 60


def assert_one_line_error(done: subprocess.CompletedProcess[str], *named: str) -> str:
    """A non-zero exit, exactly one line on stderr naming ``named``, no traceback anywhere."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert "ExceptionGroup" not in output, output
    assert done.returncode != 0, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for name in named:
        assert name in lines[0], lines[0]
    return lines[0]


def run_bounded(
    home: Path, *args: str, timeout: float = 30, memory_bytes: int = 1 << 30
) -> subprocess.CompletedProcess[str]:
    """``subvisor ARGS`` with an address-space cap: a blow-up fails fast, not the machine."""

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=cap_memory,
    )


def alias_bomb(levels: int = 9) -> str:
    """A few hundred bytes of YAML whose aliases stand for 9**levels strings."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def profile_entries(home: Path, project: Path) -> dict[str, dict[str, object]]:
    """``subvisor agents --json``, by source file name."""
    done = run_cli(home, "agents", "--json", "--cwd", str(project), timeout=HANG)
    assert "Traceback" not in done.stderr, done.stderr
    return {Path(str(p["source"])).name: p for p in json.loads(done.stdout)["profiles"]}


GOOD_PROFILE = "---\nname: fine\ndescription: a working profile\n---\nWork.\n"
ANSWER = "agents:\n  root:\n    - text: the root answered\n"


# -- scenario files (scripted:FILE) ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("random.yaml", bytes(range(256)) * 2),
        ("zeros.yaml", b"\0" * 300),
        ("binary.json", b"\xff\xfe{}"),
        ("list.yaml", b"- a\n- b\n"),
        ("wrong.yaml", b"agents: 3\n"),
        ("turns.yaml", b"agents:\n  root: [1, 2]\n"),
        ("empty.yaml", b""),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000),
        ("surrogate.json", b'{"agents": {"root": [{"text": "\\udcff"}]}}'),
    ],
)
def test_a_bad_scenario_file_is_one_line_naming_it(
    tmp_path: Path, name: str, content: bytes
) -> None:
    """Issue 14 item 10: a binary, NUL-filled, empty, too deep or wrongly shaped scenario
    file is one line naming the file, exit 1; never a traceback."""
    scenario = tmp_path / name
    scenario.write_bytes(content)
    done = run_cli(tmp_path / "home", "run", "go", "--model", f"scripted:{scenario}", timeout=HANG)
    assert_one_line_error(done, str(scenario), "scenario file")


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_scenario_path_that_is_not_a_file_is_one_line(tmp_path: Path, kind: str) -> None:
    """Issue 14 item 10: a directory or a FIFO as the scenario is refused at once (a FIFO
    used to block the supervisor forever on open)."""
    scenario = tmp_path / "scenario.yaml"
    if kind == "directory":
        scenario.mkdir()
    else:
        os.mkfifo(scenario)
    done = run_cli(tmp_path / "home", "run", "go", "--model", f"scripted:{scenario}", timeout=HANG)
    assert_one_line_error(done, str(scenario), "not a regular file")


def test_a_scenario_alias_bomb_is_refused(tmp_path: Path) -> None:
    """Issue 14 item 10: a scenario whose aliases stand for 9**9 strings is refused before
    anything walks it (before: minutes and gigabytes)."""
    scenario = tmp_path / "bomb.yaml"
    scenario.write_text(
        alias_bomb()
        + "agents:\n  root:\n    - text: hi\n      tool_calls: [{name: Read, input: {x: *l8}}]\n"
    )
    assert scenario.stat().st_size < 1000
    done = run_bounded(tmp_path / "home", "run", "go", "--model", f"scripted:{scenario}")
    assert_one_line_error(done, str(scenario), "YAML aliases are not accepted")


def test_control_a_good_scenario_runs(tmp_path: Path) -> None:
    """Control: the same command on a well-formed scenario answers and exits 0."""
    scenario = tmp_path / "ok.yaml"
    scenario.write_text(ANSWER)
    done = run_bounded(tmp_path / "home", "run", "go", "--model", f"scripted:{scenario}")
    assert done.returncode == 0, done.stderr
    assert "the root answered" in done.stdout


# -- the command line: prompt, --cwd, --timeout -------------------------------------------


def test_a_non_utf8_prompt_is_refused_naming_it(tmp_path: Path) -> None:
    """Issue 14 item 10: `subvisor run $'caf\\xe9'` is refused on one line that names the
    prompt and the byte (it used to crash the store with a surrogate traceback). Refused,
    not replaced: a changed prompt would ask for something else, silently."""
    scenario = tmp_path / "ok.yaml"
    scenario.write_text(ANSWER)
    # A lone surrogate in an argument reaches the child as the raw byte (PEP 383).
    done = run_cli(tmp_path / "home", "run", "caf\udce9", "--model", f"scripted:{scenario}")
    line = assert_one_line_error(done, "the prompt", "not valid UTF-8", "0xe9")
    assert done.returncode == 2, line
    control = run_cli(tmp_path / "home", "run", "café", "--model", f"scripted:{scenario}")
    assert control.returncode == 0, control.stderr
    assert "the root answered" in control.stdout


def test_a_working_directory_whose_path_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """Issue 14 item 10: run from (or with --cwd) a directory whose name is not UTF-8, the
    path would reach SQLite as a lone surrogate; it is one line instead."""
    scenario = tmp_path / "ok.yaml"
    scenario.write_text(ANSWER)
    odd = tmp_path / "caf\udce9"
    odd.mkdir()
    model = f"scripted:{scenario}"
    by_flag = run_cli(tmp_path / "home", "run", "go", "--cwd", str(odd), "--model", model)
    assert_one_line_error(by_flag, "--cwd", "not valid UTF-8")
    inside = run_cli(tmp_path / "home", "run", "go", "--model", model, cwd=odd)
    assert_one_line_error(inside, "working directory", "not valid UTF-8")


@pytest.mark.parametrize("command", ["run", "agents", "workflow"])
@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_bad_cwd_is_one_line_and_exit_2(tmp_path: Path, command: str, kind: str) -> None:
    """Issue 14 item 10: a --cwd that does not exist, or is a file, is one line naming it
    and exit 2 (`run` used to exit 0 in a directory that is not there)."""
    scenario = tmp_path / "ok.yaml"
    scenario.write_text(ANSWER)
    cwd = tmp_path / "nowhere"
    if kind == "file":
        cwd.write_text("not a directory\n")
    args = {
        "run": ["run", "go", "--model", f"scripted:{scenario}"],
        "agents": ["agents"],
        "workflow": ["workflow", "run", str(scenario), "--model", f"scripted:{scenario}"],
    }[command]
    done = run_cli(tmp_path / "home", *args, "--cwd", str(cwd))
    line = assert_one_line_error(done, str(cwd), "working directory")
    assert done.returncode == 2, line


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_a_timeout_that_is_not_positive_is_a_usage_error(tmp_path: Path, value: str) -> None:
    """Issue 14 item 10: --timeout nan/-1 used to crash inside trio; it is argparse's usage
    error now, exit 2."""
    done = run_cli(
        tmp_path / "home", "run", "go", "--model", "scripted:x.yaml", f"--timeout={value}"
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert "argument --timeout: must be a number of seconds above 0" in done.stderr


def test_a_fifo_workflow_script_is_one_line(tmp_path: Path) -> None:
    """Issue 14 item 10: a FIFO given as the workflow script no longer blocks forever."""
    script = tmp_path / "flow.py"
    os.mkfifo(script)
    done = run_cli(tmp_path / "home", "workflow", "run", str(script), timeout=HANG)
    assert_one_line_error(done, str(script), "not a regular file")


# -- profiles -------------------------------------------------------------------------------


def test_a_profile_alias_bomb_is_refused_and_the_others_load(tmp_path: Path) -> None:
    """Issue 14 item 10: a profile whose frontmatter aliases stand for 9**9 strings is
    refused before it costs anything (before: 45 s and 3 GB); `subvisor agents` shows one
    error for it and the other profiles still load."""
    agents = tmp_path / "project" / ".subvisor" / "agents"
    agents.mkdir(parents=True)
    bomb = "---\nname: bomb\n" + alias_bomb() + "description: *l8\n---\nBoom.\n"
    (agents / "bomb.md").write_text(bomb)
    assert len(bomb) < 1000
    (agents / "fine.md").write_text(GOOD_PROFILE)
    done = run_bounded(tmp_path / "home", "agents", "--json", "--cwd", str(tmp_path / "project"))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    entries = {Path(p["source"]).name: p for p in json.loads(done.stdout)["profiles"]}
    error = str(entries["bomb.md"]["error"])
    assert "YAML aliases are not accepted" in error
    assert "\n" not in error
    assert entries["fine.md"]["error"] is None


def test_broken_profile_files_are_one_error_each(tmp_path: Path) -> None:
    """Issue 14 item 10: a binary profile, a NUL in frontmatter, a lone-surrogate escape and
    a FIFO (which used to hang `subvisor agents`) each give one error naming the file; a
    directory named like a profile is not one; a good profile beside them still loads."""
    project = tmp_path / "project"
    agents = project / ".subvisor" / "agents"
    agents.mkdir(parents=True)
    (agents / "binary.md").write_bytes(bytes(range(256)))
    (agents / "nul.md").write_bytes(b"---\nname: n\0ul\ndescription: x\n---\nhi\n")
    (agents / "surrogate.md").write_text('---\ndescription: "\\udcff"\n---\nhi\n')
    os.mkfifo(agents / "fifo.md")
    (agents / "folder.md").mkdir()
    (agents / "fine.md").write_text(GOOD_PROFILE)
    entries = profile_entries(tmp_path / "home", project)
    for name, says in [
        ("binary.md", "not UTF-8"),
        ("nul.md", "invalid YAML"),
        ("surrogate.md", "surrogate"),
        ("fifo.md", "it is a FIFO, not a regular file"),
    ]:
        error = str(entries[name]["error"])
        assert says in error and str(agents / name) in error and "\n" not in error, error
    assert "folder.md" not in entries
    assert entries["fine.md"]["error"] is None


async def test_fifos_a_subagent_plants_do_not_hang_the_next_run(tmp_path: Path) -> None:
    """Issue 14 item 10, S-SEC-3: a workspace-write subagent plants a FIFO as a project
    profile and as a profile's MEMORY.md; the user's next `subvisor run` still delegates to
    that profile (before: it blocked forever opening the FIFO) and says what is wrong."""
    project = tmp_path / "project"
    memory = project / ".subvisor" / "agent-memory" / "keeper"
    agents = project / ".subvisor" / "agents"
    agents.mkdir(parents=True)
    (agents / "keeper.md").write_text(
        "---\nname: keeper\ndescription: keeps notes\nmemory: project\n---\nKeep notes.\n"
    )
    attack = await bash_attack(
        tmp_path,
        [f"mkdir -p {memory} && mkfifo {memory}/MEMORY.md {agents}/planted.md && echo planted"],
        cwd=project,
        subagent_type="general-purpose",
        mode="workspace-write",
    )
    assert "planted" in attack.output(), attack.output()
    model = write_scenario(
        tmp_path / "next.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("notes", "take notes", subagent_type="keeper")]},
                {"text": "root saw: {{tool_result}}"},
            ],
            "keeper": [{"text": "the keeper answered"}],
        },
    )
    done = run_cli(
        tmp_path / "home", "run", "go", "--cwd", str(project), "--model", model, timeout=HANG
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the keeper answered" in done.stdout
    entries = profile_entries(tmp_path / "home", project)
    assert "it is a FIFO" in str(entries["planted.md"]["error"])


# -- MCP servers that fail to connect (S-MCP-1) ---------------------------------------------


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ('command = "/no/such/mcp-server"', "not found"),
        ('command = "sh"\nargs = ["-c", "exit 3"]', "closed the connection"),
        (
            'command = "sh"\nargs = ["-c", "echo garbage; echo it broke >&2"]',
            "it printed 'garbage' on stdout",
        ),
        (
            'command = "sh"\nargs = ["-c", "echo garbage; echo it broke >&2; sleep 30"]\n'
            "startup_timeout_s = 2",
            "no answer within",
        ),
    ],
)
def test_an_mcp_server_that_fails_is_one_line_and_the_run_goes_on(
    tmp_path: Path, server: str, says: str
) -> None:
    """Issue 14 item 10, S-MCP-1: a server that does not exist, exits at once or prints
    garbage is one warning line naming it, why, and what to fix (no ExceptionGroup, no SDK
    traceback); the run goes on without it, and a profile that needs it fails with
    "Required MCP server is not connected: bad"."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f"[mcp_servers.bad]\n{server}\n")
    project = tmp_path / "project"
    agents = project / ".subvisor" / "agents"
    agents.mkdir(parents=True)
    (agents / "needs.md").write_text(
        "---\nname: needs-bad\ndescription: needs bad\nmcpServers: [bad]\n---\nGo.\n"
    )
    model = write_scenario(
        tmp_path / "s.yaml",
        {
            "root": [
                {"tool_calls": [agent_call("d", "p", subagent_type="needs-bad")]},
                {"text": "root saw: {{tool_result}}"},
            ]
        },
    )
    done = run_cli(home, "run", "go", "--cwd", str(project), "--model", model, timeout=HANG)
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "ExceptionGroup" not in output, output
    assert done.returncode == 0, output
    [line] = done.stderr.strip().splitlines()
    assert "MCP server 'bad' is not connected" in line and says in line, line
    assert "mcp_servers.bad" in line, line
    if "it broke" in server:
        assert "its stderr ends with 'it broke'" in line, line
    assert "Required MCP server is not connected: bad" in done.stdout


# -- a provider's answer ------------------------------------------------------------------


def test_a_lone_surrogate_from_the_provider_becomes_u_fffd(tmp_path: Path) -> None:
    """Issue 14 item 10: a provider whose JSON escapes a lone surrogate ("\\udcff") used to
    crash the store with a traceback; it is U+FFFD now, and a whole escaped pair (an emoji)
    stays one character."""

    def chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}

    home = tmp_path / "home"
    home.mkdir()
    with ProviderServer() as server:
        (home / "config.toml").write_text(
            f'[gateway.providers.local]\napi = "openai"\nbase_url = "{server.base_url}/v1"\n'
            'api_key = "sk-test"\n'
        )
        events = [
            chunk({"role": "assistant", "content": "caf\udcff \U0001f600"}),
            chunk({}, "stop"),
        ]
        server.enqueue(CannedResponse.sse([*((None, e) for e in events), (None, "[DONE]")]))
        done = run_cli(home, "run", "go", "--model", "local:m", timeout=HANG)
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "ExceptionGroup" not in output, output
    assert done.returncode == 0, output
    assert "caf\ufffd \U0001f600" in done.stdout


# -- loaders, in-process (property) ---------------------------------------------------------

_FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_YAMLISH = st.lists(
    st.sampled_from(
        [
            "agents:",
            "  root:",
            "    - ",
            "text: ",
            "&a ",
            "*a",
            "[",
            "]",
            "{",
            "}",
            ",",
            ": ",
            '"\\udcff"',
            "\\x00",
            "\0",
            "\t",
            "\n",
            "---",
            "- ",
            "!!python/object ",
            "é",
            "\udcff",
        ]
    )
    | st.text(max_size=8),
    max_size=40,
).map("".join)


@_FUZZ
@given(
    content=st.binary(max_size=2000) | _YAMLISH.map(lambda t: t.encode("utf-8", "surrogatepass"))
)
def test_any_bytes_as_a_scenario_load_or_raise_scenario_error(
    tmp_path: Path, content: bytes
) -> None:
    """Issue 14 item 10: whatever bytes a scenario file holds, ``load_scenario`` returns a
    scenario or raises ``ScenarioError`` with one line naming the file."""
    for name in ("s.yaml", "s.json"):
        path = tmp_path / name
        path.write_bytes(content)
        try:
            load_scenario(str(path))
        except ScenarioError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)


@_FUZZ
@given(
    content=st.binary(max_size=2000)
    | _YAMLISH.map(lambda t: f"---\n{t}\n---\nbody\n".encode("utf-8", "surrogatepass"))
)
def test_any_bytes_as_a_profile_parse_or_raise_profile_error(
    tmp_path: Path, content: bytes
) -> None:
    """Issue 14 item 10: whatever bytes a profile file holds, ``parse_profile_file`` returns
    a profile or raises ``ProfileError`` naming the file."""
    path = tmp_path / "fuzz.md"
    path.write_bytes(content)
    try:
        parse_profile_file(path, scope="project", default_name="fuzz")
    except ProfileError as exc:
        assert exc.path == str(path)
