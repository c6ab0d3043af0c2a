"""S-SEC-1: no worker can obtain a provider key or subvisor's own files, in any sandbox mode.

Every attack is a real subagent's Bash, as the user running these tests
(root in CI). The supervisor is a real ``subvisor run`` process whose
environment holds a marker key; subvisor's home holds a config with another
and the database of every session. A control shows that each secret really
is where the attack looks, from outside the worker tree.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.state._store import SessionStore
from tests.support.attack import cli_bash_attack
from tests.support.cli import run_cli
from tests.support.delegation import home_for, write_scenario
from tests.support.provider_server import CannedResponse, ProviderServer

PY = sys.executable
ENV_KEY = "sk-env-MARKER-5d1c0ffee"
FILE_KEY = "sk-file-MARKER-beefcafe"
OTHER_KEY = "sk-other-home-MARKER-0ddba11"
MODES = [("read-only", "deny"), ("workspace-write", "deny"), ("full", "allow")]

#: Walks up from Bash through the worker and the zygote to the supervisor, trying
#: each one's environ, memory and ptrace; then every process's environ it can name.
_MEM = "import sys; f=open('/proc/'+sys.argv[1]+'/mem','rb'); print('mem', f.read(1))"
_ATTACH = "import ctypes,sys; print('attach', ctypes.CDLL(None).ptrace(16, int(sys.argv[1]), 0, 0))"
_ANCESTORS = """
pid=$$
for i in 1 2 3 4 5 6; do
  pid=$(awk '{{print $4}}' /proc/$pid/stat)
  [ -z "$pid" ] || [ "$pid" -le 1 ] && break
  echo "== $pid $(cat /proc/$pid/comm)"
  tr '\\0' '\\n' < /proc/$pid/environ 2>&1 | grep -E 'MARKER|denied|not permitted' | head -2
  {py} -c "{mem}" $pid 2>&1 | tail -1
  {py} -c "{attach}" $pid
  cat /proc/$pid/root{home}/config.toml 2>&1 | head -1
done
{py} -c "{hidden}" {home}
echo "sweep $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c MARKER)"
grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|CapInh|NoNewPrivs)' /proc/self/status
"""


#: Where a worker's /proc shows only its own tree (S-SEC-1), the walk above stops
#: below the worker: this finds every process below our pid that exists (``kill 0``
#: does not answer ESRCH) but /proc does not show, and tries each one's environ,
#: memory, ptrace and root. ``hidden N``, then what it got (``[]``: nothing).
HIDDEN = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "def there(pid):\n"
    "    try:\n"
    "        os.kill(pid, 0)\n"
    "    except ProcessLookupError:\n"
    "        return False\n"
    "    except OSError:\n"
    "        pass\n"
    "    return not os.path.exists(f'/proc/{pid}')\n"
    "hidden = [pid for pid in range(2, os.getpid()) if there(pid)]\n"
    "got = []\n"
    "for pid in hidden:\n"
    "    for what in ('environ', 'mem', 'root' + sys.argv[1] + '/config.toml'):\n"
    "        try:\n"
    "            with open(f'/proc/{pid}/{what}', 'rb') as f:\n"
    "                got.append((pid, what, f.read(200)))\n"
    "        except OSError:\n"
    "            pass\n"
    "    if libc.ptrace(16, pid, 0, 0) == 0:\n"
    "        got.append((pid, 'attach'))\n"
    "        libc.ptrace(17, pid, 0, 0)\n"
    "print('hidden', len(hidden))\n"
    "print('hidden got', got)\n"
)


def ancestors(home: str, py: str = PY) -> str:
    """The ancestor walk, reading ``home``'s config through each /proc/PID/root, then
    every process /proc hides (``HIDDEN``)."""
    hidden = HIDDEN.replace('"', '\\"')
    return _ANCESTORS.format(py=py, mem=_MEM, attach=_ATTACH, home=home, hidden=hidden)


def reached_past_the_zygote(answer: str) -> bool:
    """Whether the walk named the zygote, or found it (and more) among hidden processes."""
    counts = [
        int(line.split()[1])
        for line in answer.splitlines()
        if line.startswith("hidden ") and line.split()[1].isdigit()
    ]
    return "subvisor-zygote" in answer or (bool(counts) and counts[0] >= 2)


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The key in the environment `subvisor run` gets; a home whose config holds another."""
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    home = home_for(tmp_path)
    home.mkdir()
    (home / "config.toml").write_text(
        f'[gateway.providers.mine]\napi = "openai"\napi_key = "{FILE_KEY}"\n'
    )
    os.chmod(home / "config.toml", 0o600)
    return home


@pytest.mark.parametrize(("mode", "network"), MODES)
def test_s_sec_1_no_ancestor_gives_up_a_key_by_environ_memory_ptrace_or_root(
    tmp_path: Path, keyed: Path, mode: str, network: str
) -> None:
    """S-SEC-1: from Bash up to the supervisor, no environ, no memory, no ptrace attach,
    no /proc/PID/root path into the home; no process's environ holds the key; the
    worker has no capability in any set and no_new_privs."""
    answer = cli_bash_attack(
        tmp_path, [ancestors(str(keyed))], home=keyed, mode=mode, network=network
    )
    assert "MARKER" not in answer, answer
    assert reached_past_the_zygote(answer), answer
    assert "attach -1" in answer
    assert "mem b" not in answer and "hidden got []" in answer, answer
    assert "sweep 0" in answer
    for name in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        assert f"{name}:\t0000000000000000" in answer, answer
    assert "NoNewPrivs:\t1" in answer


@pytest.mark.parametrize(("mode", "network"), MODES)
def test_s_sec_1_subvisor_home_config_and_database_are_out_of_reach(
    tmp_path: Path, keyed: Path, mode: str, network: str
) -> None:
    """S-SEC-1: the home's config (a key), its database (every session) and its run/
    directory cannot be read, listed or written from a worker."""
    answer = cli_bash_attack(
        tmp_path,
        [
            f"cat {keyed}/config.toml; echo status=$?",
            f"ls -a {keyed} {keyed}/run; echo status=$?",
            f"{PY} -c \"import sqlite3; print(sqlite3.connect('{keyed}/subvisor.db')"
            ".execute('select count(*) from sessions').fetchall())\" 2>&1 | tail -1",
            f"echo pwned >> {keyed}/config.toml; echo status=$?",
            f"grep -rl MARKER {keyed} 2>/dev/null | wc -l",
        ],
        home=keyed,
        mode=mode,
        network=network,
    )
    assert "MARKER" not in answer, answer
    assert "config.toml" not in answer.split("status=")[1]  # not listed by ls
    assert "subvisor.db\n" not in answer and "[(" not in answer
    assert "status=0" not in answer
    # Control: the secrets were there all along, and untouched.
    assert FILE_KEY in (keyed / "config.toml").read_text()
    assert "pwned" not in (keyed / "config.toml").read_text()
    with sqlite3.connect(keyed / "subvisor.db") as db:
        assert db.execute("select count(*) from sessions").fetchone()[0] >= 2


@pytest.mark.parametrize(("mode", "network"), MODES)
def test_s_sec_1_the_default_home_is_out_of_reach_while_another_is_in_use(
    tmp_path: Path, keyed: Path, monkeypatch: pytest.MonkeyPatch, mode: str, network: str
) -> None:
    """S-SEC-1: with ``SUBVISOR_HOME`` pointing elsewhere, the user's default home
    (``~/.subvisor``: its keys, every earlier session) is out of a worker's reach too."""
    default = tmp_path / "user" / ".subvisor"
    default.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(default.parent))
    _attack_another_home(tmp_path, default, keyed, mode, network)


@pytest.mark.parametrize(("mode", "network"), MODES)
def test_s_sec_1_a_home_only_another_run_named_is_out_of_reach(
    tmp_path: Path, keyed: Path, mode: str, network: str
) -> None:
    """S-SEC-1: a home that nothing in this run names, but another run used (a project's
    own ``SUBVISOR_HOME``, set in another shell), is out of a worker's reach too: each run
    lists its home in ``~/.subvisor``, and hides every home listed. Nor can a subagent
    take a home off that list, for the runs after it."""
    other = tmp_path / "other-project" / ".subvisor-home"
    model = write_scenario(tmp_path / "hello.yaml", {"root": [{"text": "hello"}]})
    assert run_cli(other, "run", "--model", model, "hi").returncode == 0
    _attack_another_home(tmp_path, other, keyed, mode, network)
    homes = Path.home() / ".subvisor" / "homes"
    answer = cli_bash_attack(
        tmp_path,
        [f": > {homes}; echo status=$?", f"rm {homes}; echo status=$?"],
        home=keyed,
        mode=mode,
        network=network,
    )
    assert "status=0" not in answer, answer
    assert str(other) in homes.read_text().splitlines()


def _attack_another_home(tmp_path: Path, other: Path, keyed: Path, mode: str, network: str) -> None:
    """A key put in ``other``'s config: a subagent of a run on ``keyed`` can neither read
    that config nor list ``other``."""
    (other / "config.toml").write_text(f'[gateway.providers.old]\napi_key = "{OTHER_KEY}"\n')
    answer = cli_bash_attack(
        tmp_path,
        [f"cat {other}/config.toml; echo status=$?", f"ls -a {other}; echo status=$?"],
        home=keyed,
        mode=mode,
        network=network,
    )
    assert "MARKER" not in answer, answer
    cat, listing = answer.split("status=")[:2]
    assert "No such file" in cat and "config.toml" not in listing, answer
    assert OTHER_KEY in (other / "config.toml").read_text()  # control: it was there


def test_s_sec_1_control_the_same_reads_work_outside_a_worker(keyed: Path) -> None:
    """Control: what the attacks go for is readable by the user who runs subvisor."""
    done = subprocess.run(
        ["bash", "-c", f"cat {keyed}/config.toml; env"],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ),
    )
    assert FILE_KEY in done.stdout and ENV_KEY in done.stdout


def _tool_call(name: str, arguments: dict[str, object]) -> CannedResponse:
    call = {"index": 0, "id": f"call_{name}", "function": {"name": name, "arguments": ""}}
    call["function"] = {"name": name, "arguments": json.dumps(arguments)}
    return CannedResponse.sse(
        [
            (None, {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}),
            (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            (None, "[DONE]"),
        ]
    )


def _text(text: str) -> CannedResponse:
    return CannedResponse.sse(
        [
            (None, {"choices": [{"index": 0, "delta": {"content": text}}]}),
            (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            (None, "[DONE]"),
        ]
    )


#: Looks for the gateway's process by name, tries its environ, memory and ptrace;
#: then every process /proc hides (the gateway among them, where /proc is the
#: worker's own); and sweeps.
_GATEWAY = """
gw=$(pgrep -x subvisor-gw | head -1)
echo "gateway=$gw"
if [ -n "$gw" ]; then
tr '\\0' '\\n' < /proc/$gw/environ 2>&1 | grep -E 'MARKER|denied|not permitted' | head -2
{py} -c "{mem}" $gw 2>&1 | tail -1
{py} -c "{attach}" $gw
ls -l /proc/$gw/fd/ 2>&1 | head -1
fi
{py} -c "{hidden}" /
echo "sweep $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c MARKER)"
"""


def test_s_sec_1_a_gateway_process_gives_up_no_key(tmp_path: Path, keyed: Path) -> None:
    """S-SEC-1: with the gateway's processes relaying the model traffic (the subagent's own
    calls among it), the subagent's Bash finds the process, and gets no key from it: not its
    environment (which holds none), nor its memory, nor by ptrace, nor its fds."""
    hidden = HIDDEN.replace('"', '\\"')
    attack = _GATEWAY.format(py=PY, mem=_MEM, attach=_ATTACH, hidden=hidden)
    with ProviderServer() as server:
        (keyed / "config.toml").write_text(
            "[gateway]\nprocesses = 1\npool_after = 1\n"
            f'[gateway.providers.openai]\nbase_url = "{server.base_url}/v1"\n'
        )
        server.enqueue(
            _tool_call(
                "Agent",
                {"description": "attack", "prompt": "attack", "subagent_type": "general-purpose"},
            ),
            _tool_call("Bash", {"command": attack}),
            _text("attacked"),
            _text("done"),
        )
        done = run_cli(
            keyed,
            "run", "--model", "openai:m", "--json", "--sandbox", "full", "--network", "allow",
            "--cwd", str(tmp_path), "attack",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        # Control: the key was in the supervisor's environment, and went to the provider.
        assert all(r.headers["authorization"] == f"Bearer {ENV_KEY}" for r in server.requests)
    store = SessionStore(keyed / "subvisor.db")
    root = store.latest_root_session()
    assert root is not None
    [child] = store.list_child_sessions(root.session_id)
    [result] = [m.content for m in store.messages(child.session_id) if m.role == "tool"]
    # Found by name, or among the processes /proc hides (with the zygote and supervisor).
    assert "gateway=\n" not in result or reached_past_the_zygote(result), result
    assert "MARKER" not in result, result
    assert "mem b" not in result and "attach 0" not in result, result
    assert "hidden got []" in result, result
    assert "sweep 0" in result, result
