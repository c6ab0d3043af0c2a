"""S-SEC-2 Control: no subagent reaches any session's control channel; its user still does.

Real ``subvisor run`` processes (scripted model) share one SUBVISOR_HOME, as two
sessions of one user do. An attacking general-purpose subagent, in the weakest
sandbox (``--sandbox full --network allow``: no filesystem rules, no
abstract-socket scope), looks for control channels as an attacker would: every
subvisor socket ``/proc/net/unix`` lists, and every address file it can read.
On each it asks for the tasks, reads a sibling's transcript, stops every
other agent and moves itself to the background. Every attempt must fail and
the agents it tried to stop must complete. The same client code run from the
test process (outside any worker tree) gets answers; run as another uid it is
refused.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from supervisor.cli._control_channel import LiveSession
from supervisor.cli._control_client import control_request, live_sessions
from supervisor.cli._control_ops import TasksOp
from supervisor.cli._control_peer import peer_credentials, refusal
from tests.support.cli import cli_env, start_cli
from tests.support.delegation import agent_call, home_for, readme_project, write_scenario

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]

#: The attack on every control channel it finds; each request on a fresh connection, each
#: answer (or error) one JSON line in the report. ``--leaked`` names task ids it could not
#: have listed (the worst case: an id leaked some other way).
ATTACK = r"""
import argparse, glob, json, socket

parser = argparse.ArgumentParser()
parser.add_argument("--home", required=True)
parser.add_argument("--report", required=True)
parser.add_argument("--me", default="attacker", help="the attacking agent's description")
parser.add_argument("--leaked", help="a JSON file: {task_id: description}")
parser.add_argument("--look-only", nargs="*", help="only read, and only these addresses")
args = parser.parse_args()
report = open(args.report, "a")

def note(**fields):
    report.write(json.dumps(fields) + "\n")
    report.flush()

targets = {}
if args.look_only is not None:
    targets = {address: "given" for address in args.look_only}
else:
    with open("/proc/net/unix") as table:
        for row in table.read().splitlines()[1:]:
            name = row.split()[7] if len(row.split()) > 7 else ""
            if name.startswith("@subvisor-") or (
                name.startswith(args.home) and name.endswith(".sock")
            ):
                targets[name] = "proc"
    for path in glob.glob(args.home + "/run/*"):
        try:
            with open(path) as f:
                text = f.read()
            note(step="read", path=path, ok=True)
            targets.setdefault(json.loads(text)["address"], "addr")
        except Exception as exc:
            note(step="read", path=path, ok=False, error=repr(exc))

def ask(address, request):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(30)
    try:
        conn.connect("\0" + address[1:] if address.startswith("@") else address)
        try:
            conn.sendall(json.dumps(request).encode() + b"\n")
        except OSError:
            pass  # closed on us: read what it said
        line = conn.makefile("rb").readline()
        reply = json.loads(line) if line else {"ok": False, "error": "closed without a reply"}
    except Exception as exc:
        reply = {"ok": False, "error": repr(exc)}
    finally:
        conn.close()
    note(step=request["op"], address=address, task_id=request.get("task_id"), reply=reply)
    return reply

leaked = json.load(open(args.leaked)) if args.leaked else {}
for address, found_in in targets.items():
    note(step="found", address=address, found_in=found_in)
    listed = ask(address, {"op": "tasks"}).get("tasks", [])
    tasks = {**leaked, **{t["task_id"]: t["description"] for t in listed}}
    for task_id, description in tasks.items():
        ask(address, {"op": "transcript", "task_id": task_id})
        if args.look_only is None:
            op = "background" if description == args.me else "stop"
            ask(address, {"op": op, "task_id": task_id})
"""

#: No filesystem rules, TCP allowed: the mode with the fewest kernel fences.
WEAKEST_SANDBOX = ("--sandbox", "full", "--network", "allow")

#: Bash that waits (bounded) until ``marker`` exists.
WAIT_FOR = "for i in $(seq 2400); do [ -f {marker} ] && break; sleep 0.05; done"


def _bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "input": {"command": command, "timeout": 300_000}}


def _waiter(marker: Path) -> list[dict[str, Any]]:
    """An agent that runs until ``marker`` exists, then completes."""
    return [{"tool_calls": [_bash(WAIT_FOR.format(marker=marker))]}, {"text": "waited it out"}]


def _start_run(home: Path, project: Path, model: str) -> subprocess.Popen[str]:
    """A live `subvisor run` in the weakest sandbox every subagent gets."""
    return start_cli(
        home,
        *("run", "--json", *WEAKEST_SANDBOX, "--model", model, "go"),
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(run: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


@contextmanager
def _running(*runs: subprocess.Popen[str]) -> Iterator[None]:
    try:
        yield
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.communicate()


def _wait_running(
    home: Path, runner: subprocess.Popen[str], descriptions: set[str], known: set[str]
) -> LiveSession:
    """The runner's live session (one not in ``known``), once ``descriptions`` all run."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert runner.poll() is None, runner.communicate()
        for session in live_sessions(home):
            if session.session_id in known:
                continue
            tasks = control_request(session.address, TasksOp())["tasks"]
            running = {t["description"] for t in tasks if t["status"] == "running"}
            if descriptions <= running:
                return session
        time.sleep(0.05)
    raise AssertionError(f"{descriptions} never all ran")


def _steps(report: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in report.read_text().splitlines()]


@pytest.mark.parametrize("launch", ["direct", "detached"])
def test_s_sec_2_a_subagent_cannot_reach_its_own_or_another_sessions_control_channel(
    tmp_path: Path, launch: str
) -> None:
    """S-SEC-2: from a subagent's Bash, every control channel found (via /proc/net/unix and
    the address files) refuses it: no task list, no transcript, no stop of a sibling or of an
    agent of another session, no move to the background; those agents complete. Control: the
    same client, run from outside any worker tree, reads both sessions."""
    home, project = home_for(tmp_path), readme_project(tmp_path)
    go, done = tmp_path / "go", tmp_path / "attack-done"
    script, attack_report = tmp_path / "attack.py", tmp_path / "attack.jsonl"
    leaked = tmp_path / "leaked.json"
    script.write_text(ATTACK)
    run_attack = f"{PY} {script} --home {home} --report {attack_report} --leaked {leaked}"
    if launch == "detached":
        # setsid and a double fork: the attack runs reparented away from Bash and the worker.
        script_sh = tmp_path / "detached.sh"
        script_sh.write_text(f"{run_attack}; touch {done}\n")
        detach = f"setsid sh -c '( sh {script_sh} > /dev/null 2>&1 & ) &'"
        run_attack = f"{detach}; {WAIT_FOR.format(marker=done)}"
    attack = f"{WAIT_FOR.format(marker=go)}; {run_attack}; touch {done}"
    other = _start_run(
        home,
        project,
        write_scenario(
            tmp_path / "other.yaml",
            {
                "root": [
                    {"tool_calls": [agent_call("victim", "wait", run_in_background=True)]},
                    {"text": "waiting"},
                    {"text": "the victim ended"},
                ],
                "victim": _waiter(done),
            },
        ),
    )
    with _running(other):
        other_session = _wait_running(home, other, {"victim"}, known=set())
        attacked = _start_run(
            home,
            project,
            write_scenario(
                tmp_path / "attacked.yaml",
                {
                    "root": [
                        {
                            "tool_calls": [
                                agent_call("sibling", "wait", run_in_background=True),
                                agent_call("attacker", "attack", subagent_type="general-purpose"),
                            ]
                        },
                        {"text": "attacked"},
                        {"text": "the sibling ended"},
                    ],
                    "sibling": _waiter(done),
                    "attacker": [{"tool_calls": [_bash(attack)]}, {"text": "{{tool_result}}"}],
                },
            ),
        )
        with _running(attacked):
            session = _wait_running(
                home, attacked, {"sibling", "attacker"}, known={other_session.session_id}
            )
            # Control: the attack's own client, outside any worker tree, is answered.
            look_report = tmp_path / "look.jsonl"
            look = ["--home", str(home), "--report", str(look_report), "--look-only"]
            subprocess.run(
                [PY, str(script), *look, session.address, other_session.address],
                check=True,
                timeout=60,
            )
            looked = _steps(look_report)
            assert {s["address"] for s in looked if s["step"] == "tasks" and s["reply"]["ok"]} == {
                session.address,
                other_session.address,
            }
            assert any(s["step"] == "transcript" and s["reply"]["ok"] for s in looked)
            ids = {
                t["task_id"]: (address, t["description"])
                for address in (session.address, other_session.address)
                for t in control_request(address, TasksOp())["tasks"]
            }
            leaked.write_text(json.dumps({task: about[1] for task, about in ids.items()}))
            go.touch()
            report = _finish(attacked)
        other_report = _finish(other)

    steps = _steps(attack_report)
    found = {s["address"] for s in steps if s["step"] == "found"}
    # The name is no secret: /proc/net/unix lists both sessions' channels.
    assert {session.address, other_session.address} <= found, steps
    # Even knowing every id, it tried to read and steer every agent of both sessions ...
    tried = {(s["step"], s["address"], s["task_id"]) for s in steps if "reply" in s}
    for task_id, (address, description) in ids.items():
        steer = "background" if description == "attacker" else "stop"
        assert {("transcript", address, task_id), (steer, address, task_id)} <= tried
    # ... and got nothing: no reply was an answer.
    answered = [s for s in steps if "reply" in s and s["reply"].get("ok")]
    assert answered == [], answered
    tasks = {t["description"]: t for t in report["tasks"]}
    assert tasks["sibling"]["status"] == "completed", tasks["sibling"]
    assert tasks["attacker"]["status"] == "completed" and not tasks["attacker"]["background"]
    [victim] = other_report["tasks"]
    assert victim["status"] == "completed", victim


@pytest.mark.machine_may_lack("root, to run a client as another uid", when=os.geteuid() != 0)
def test_s_sec_2_another_uid_is_refused(tmp_path: Path) -> None:
    """S-SEC-2: an abstract socket has no file permissions, so the channel checks the peer's
    uid: the same client run as uid 65534 is refused; run as the session's owner it is
    answered."""
    home, project = home_for(tmp_path), readme_project(tmp_path)
    done = tmp_path / "done"
    run = _start_run(
        home,
        project,
        write_scenario(
            tmp_path / "s.yaml",
            {
                "root": [{"tool_calls": [agent_call("holder", "hold")]}, {"text": "held"}],
                "holder": _waiter(done),
            },
        ),
    )
    with _running(run):
        session = _wait_running(home, run, {"holder"}, known=set())
        client = (
            "import json, sys\n"
            "from supervisor.cli._control_client import ControlError, control_request\n"
            "from supervisor.cli._control_ops import TasksOp\n"
            "try:\n"
            "    reply = control_request(sys.argv[1], TasksOp())\n"
            "    print(json.dumps({'ok': True, 'tasks': len(reply['tasks'])}))\n"
            "except ControlError as exc:\n"
            "    print(json.dumps({'ok': False, 'code': exc.code, 'error': str(exc)}))\n"
        )
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        answers = {}
        for who, prefix in (("owner", []), ("nobody", as_nobody)):
            done_client = subprocess.run(
                [*prefix, PY, "-c", client, session.address],
                cwd=REPO,
                env={**cli_env(home), "PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done_client.returncode == 0, done_client.stderr
            answers[who] = json.loads(done_client.stdout)
        done.touch()
        assert _finish(run)["tasks"][0]["status"] == "completed"
    assert answers["owner"] == {"ok": True, "tasks": 1}
    assert answers["nobody"]["ok"] is False and answers["nobody"]["code"] == "refused"
    assert "uid 65534" in answers["nobody"]["error"]


#: Connect to the abstract name argv[1], leave the socket to a child, print its pid, exit.
CONNECT_AND_LEAVE = """
import socket, subprocess, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(b"\\0" + sys.argv[1].encode())
keeper = subprocess.Popen(
    ["sleep", "600"], pass_fds=[conn.fileno()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
print(keeper.pid)
"""


def test_s_sec_2_a_connection_whose_connecting_process_has_exited_is_refused() -> None:
    """S-SEC-2 race: the check is on the process that connected. Once it has exited (its
    child keeping the socket), its pid may name another process, so the connection is
    refused, not judged by whatever holds that pid now. Control: a live connector is served."""
    name = f"subvisor-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(b"\0" + name.encode())
        listener.listen(4)
        left = subprocess.run(
            [PY, "-c", CONNECT_AND_LEAVE, name], capture_output=True, text=True, timeout=60
        )
        assert left.returncode == 0, left.stderr
        keeper = int(left.stdout)
        try:
            conn, _ = listener.accept()
            with conn:
                peer = peer_credentials(conn)
                assert peer.pid not in (os.getpid(), keeper)
                why = refusal(conn, peer)
                assert why == f"process {peer.pid} exited before it could be checked"
        finally:
            os.kill(keeper, signal.SIGKILL)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mine:
            mine.connect(b"\0" + name.encode())
            conn, _ = listener.accept()
            with conn:
                assert refusal(conn, peer_credentials(conn)) is None


#: A stdio MCP server a session lends its agents: its one tool asks the control channel
#: named in the file argv[1] for the task list, and says what came back.
ASKER = r"""
import json, socket, sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("asker")


@server.tool()
def ask() -> str:
    '''Ask the control channel in the file named on the command line for its tasks.'''
    address = Path(sys.argv[1]).read_text()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.connect("\0" + address[1:] if address.startswith("@") else address)
        try:
            conn.sendall(json.dumps({"op": "tasks"}).encode() + b"\n")
        except OSError:
            pass  # refused and closed before our request went: read what it said
        return "reply " + conn.makefile("rb").readline().decode().strip()


server.run("stdio")
"""


def test_s_sec_2_another_sessions_mcp_server_is_refused(tmp_path: Path) -> None:
    """S-SEC-2 across sessions: session A's subagent has a stdio MCP server A lends it (outside
    every worker tree, no descendant of B) ask session B's control channel for its tasks. A
    supervisor (A, named subvisor-sup) is above that server, so B refuses it: an agent cannot
    list, read or stop another session's agents through what its supervisor started. Control:
    the same request from a plain process of the user's is answered."""
    for side in "ab":
        (tmp_path / side).mkdir()
    home_b, project_b = home_for(tmp_path / "b"), readme_project(tmp_path / "b")
    home_a, project_a = home_for(tmp_path / "a"), readme_project(tmp_path / "a")
    done, address_file, script = tmp_path / "done", tmp_path / "address", tmp_path / "asker.py"
    script.write_text(ASKER)
    home_a.mkdir(parents=True, exist_ok=True)
    (home_a / "config.toml").write_text(
        f'[permission]\n"*" = "allow"\n[mcp_servers.asker]\ncommand = "{PY}"\n'
        f'args = ["{script}", "{address_file}"]\n'
    )
    run_b = _start_run(
        home_b,
        project_b,
        write_scenario(
            tmp_path / "b.yaml",
            {
                "root": [{"tool_calls": [agent_call("holder", "hold")]}, {"text": "held"}],
                "holder": _waiter(done),
            },
        ),
    )
    with _running(run_b):
        session = _wait_running(home_b, run_b, {"holder"}, known=set())
        address_file.write_text(session.address)
        run_a = _start_run(
            home_a,
            project_a,
            write_scenario(
                tmp_path / "a.yaml",
                {
                    "root": [
                        {"tool_calls": [agent_call("asker", "ask", subagent_type="Explore")]},
                        {"text": "root: {{tool_result}}"},
                    ],
                    "asker": [
                        {"tool_calls": [{"name": "mcp__asker__ask", "input": {}}]},
                        {"text": "asker: {{tool_result}}"},
                    ],
                },
            ),
        )
        with _running(run_a):
            answer = _finish(run_a)["answer"]
        plain = _ask_plainly(session.address)
        done.touch()
        assert _finish(run_b)["tasks"][0]["status"] == "completed"
    assert 'reply {"ok":false' in answer and '"code":"refused"' in answer, answer
    assert "started by subvisor supervisor" in answer, answer
    assert plain["ok"] is True and [t["description"] for t in plain["tasks"]] == ["holder"]


def _ask_plainly(address: str) -> dict[str, Any]:
    """The asker's request, from a plain child of the test process (no supervisor above)."""
    client = (
        "import json, socket, sys\n"
        "conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "a = sys.argv[1]\n"
        "conn.connect('\\0' + a[1:] if a.startswith('@') else a)\n"
        "conn.sendall(json.dumps({'op': 'tasks'}).encode() + b'\\n')\n"
        "print(conn.makefile('rb').readline().decode())\n"
    )
    done = subprocess.run([PY, "-c", client, address], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    reply: dict[str, Any] = json.loads(done.stdout)
    return reply
