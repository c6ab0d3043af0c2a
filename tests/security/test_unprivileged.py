"""S-SEC-1, -4, -5, -7 as an unprivileged user: attacks of test_keys, test_cap_evasion and
test_depth, as uid 65534.

Where these differ from root: a user's supervisor is dumpable unless it says
otherwise (same uid: its environ and memory are open to its workers), and a
user has no ``CAP_SYS_ADMIN``, so hiding subvisor's home takes a user
namespace (or, where those are off, Landlock alone). The supervisor here is
a real ``subvisor run`` started as ``nobody`` with a key in its environment.
"""

from __future__ import annotations

import json
import os
import random

import pytest
import yaml

from protocol import SUPERVISOR_PROCESS_NAME
from tests.security.test_cap_evasion import remove_shm, shm_attack, shm_keys
from tests.security.test_keys import ancestors
from tests.support.delegation import agent_call
from tests.support.unprivileged import NOBODY, Unprivileged, unprivileged

ENV_KEY = "sk-env-MARKER-0ddba11"
FILE_KEY = "sk-file-MARKER-f00dfeed"


@pytest.fixture
def nobody() -> Unprivileged:
    with unprivileged() as user:
        home, project = user.root / "home", user.root / "project"
        project.mkdir()
        (home / "config.toml").write_text(
            f'[gateway.providers.x]\napi = "openai"\napi_key = "{FILE_KEY}"\n'
        )
        os.chmod(home / "config.toml", 0o600)
        if os.geteuid() == 0:
            for path in (project, home / "config.toml"):
                os.chown(path, NOBODY, NOBODY)
        yield user


def _attack(user: Unprivileged, cmds: list[str], mode: str, network: str) -> str:
    scenario = user.root / "attack.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "agents": {
                    "root": [
                        {"tool_calls": [agent_call("a", "a", subagent_type="general-purpose")]},
                        {"text": "done:\n{{tool_result}}"},
                    ],
                    "a": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": c}} for c in cmds]},
                        {"text": "{{tool_result}}"},
                    ],
                }
            }
        )
    )
    done = user.run(
        [
            "python", "-m", "supervisor.cli", "run", "--model", f"scripted:{scenario}",
            "--json", "--sandbox", mode, "--network", network,
            "--cwd", str(user.root / "project"), "attack",
        ],
        env={"OPENAI_API_KEY": ENV_KEY},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answer: str = json.loads(done.stdout)["answer"]
    return answer


@pytest.mark.parametrize(("mode", "network"), [("read-only", "deny"), ("full", "allow")])
def test_s_sec_1_as_a_user_no_ancestor_gives_up_a_key(
    nobody: Unprivileged, mode: str, network: str
) -> None:
    """S-SEC-1 as uid 65534: the supervisor, zygote and worker are the worker's own uid,
    and still no environ, memory, ptrace or /proc/PID/root read reaches a key."""
    home = nobody.root / "home"
    answer = _attack(nobody, [ancestors(str(home), _interpreter(nobody))], mode, network)
    assert "MARKER" not in answer, answer
    assert "subvisor-zygote" in answer
    assert answer.count("attach -1") >= 3
    assert "mem b" not in answer
    assert "sweep 0" in answer
    assert "NoNewPrivs:\t1" in answer


@pytest.mark.parametrize(("mode", "network"), [("workspace-write", "deny"), ("full", "allow")])
def test_s_sec_1_as_a_user_the_home_is_out_of_reach(
    nobody: Unprivileged, mode: str, network: str
) -> None:
    """S-SEC-1 as uid 65534: the user's own config and database, which the user may read,
    cannot be read or written by the user's subagent."""
    home = nobody.root / "home"
    answer = _attack(
        nobody,
        [
            f"cat {home}/config.toml; echo read=$?",
            f"ls -a {home} | grep -c -e config -e subvisor.db",
            f"echo pwned >> {home}/config.toml; echo write=$?",
        ],
        mode,
        network,
    )
    assert "MARKER" not in answer and "read=0" not in answer and "write=0" not in answer, answer
    assert "\n0\n" in answer  # nothing of the home is even listed
    assert "pwned" not in (home / "config.toml").read_text()
    # Control: the same user reads its config outside any worker.
    control = nobody.run(["cat", str(home / "config.toml")])
    assert FILE_KEY in control.stdout, control.stderr


def test_s_sec_7_as_a_user_a_nested_run_refuses(nobody: Unprivileged) -> None:
    """S-SEC-7 as uid 65534: `env -u SUBVISOR_TREE subvisor run` inside a subagent refuses."""
    (nobody.root / "nested.yaml").write_text("agents:\n  root:\n    - text: nested ran\n")
    nested = (
        f"env -u SUBVISOR_TREE SUBVISOR_HOME=$TMPDIR/h python3 -m supervisor.cli run "
        f"--model scripted:{nobody.root}/nested.yaml 'x' 2>&1; echo exit=$?"
    )
    answer = _attack(nobody, [nested.replace("python3", _interpreter(nobody))], "full", "allow")
    assert "inside a subvisor worker tree" in answer, answer
    assert "nested ran" not in answer


@pytest.mark.parametrize("mode", ["workspace-write", "full"])
def test_s_sec_4_and_5_as_a_user_shared_memory_ends_with_the_worker(
    nobody: Unprivileged, mode: str
) -> None:
    """S-SEC-4, S-SEC-5 as uid 65534: the worker's IPC namespace is its own (made in the
    user namespace its zygote entered), so its SysV segment is gone once it ends."""
    key = random.randrange(1, 2**30)
    try:
        answer = _attack(nobody, [shm_attack(key, 16, key + 1)], mode, "allow")
        left = shm_keys()
    finally:
        remove_shm(key)
    assert "made True" in answer, answer
    assert key not in left
    assert os.readlink("/proc/self/ns/ipc") not in answer


def _interpreter(user: Unprivileged) -> str:
    done = user.run(["python", "-c", "import sys; print(sys.executable)"])
    return done.stdout.strip()


def test_s_sec_2_as_a_user_the_supervisors_scheduling_is_out_of_reach(
    nobody: Unprivileged,
) -> None:
    """S-SEC-2 as uid 65534: a user's subagent cannot starve its supervisor: setpriority,
    sched_setaffinity, sched_setscheduler and ioprio_set on it are refused (each call would set
    what is already in force, so a hole changes nothing here)."""
    script = (
        "import ctypes, os\n"
        "def ppid(p): return int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "s = ppid(ppid(ppid(os.getpid())))\n"
        "print('supervisor', open(f'/proc/{s}/comm').read().strip())\n"
        "calls = {\n"
        "    'setpriority': lambda: os.setpriority(0, s, os.getpriority(0, s)),\n"
        "    'setaffinity': lambda: os.sched_setaffinity(s, os.sched_getaffinity(s)),\n"
        "    'setscheduler': lambda: os.sched_setscheduler(s, os.sched_getscheduler(s),"
        " os.sched_param(0)),\n"
        "}\n"
        "for name, call in calls.items():\n"
        "    try:\n"
        "        call(); print(name, 'DONE')\n"
        "    except OSError as e:\n"
        "        print(name, 'refused', e.errno)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "get = libc.syscall(252, 1, s)\n"  # ioprio_get (x86_64)
        "rc = libc.syscall(251, 1, s, get)\n"
        "print('ioprio_set', 'DONE' if rc == 0 else 'refused')\n"
    )
    (nobody.root / "sched.py").write_text(script)
    answer = _attack(
        nobody,
        [f"{_interpreter(nobody)} {nobody.root}/sched.py"],
        "workspace-write",
        "deny",
    )
    assert f"supervisor {SUPERVISOR_PROCESS_NAME}" in answer, answer
    assert "DONE" not in answer, answer
    assert answer.count("refused") == 4, answer


def test_s_sbx_1_as_a_user_a_read_only_subagent_changes_no_metadata(
    nobody: Unprivileged,
) -> None:
    """S-SBX-1 as uid 65534 (its mounts in a user namespace): the mode and mtime of the
    user's own file outside the project stay as they were; a file in its temp dir and
    /dev/null are still its to use."""
    notes = nobody.root / "notes.txt"
    notes.write_text("mine\n")
    os.chmod(notes, 0o600)
    if os.geteuid() == 0:
        os.chown(notes, NOBODY, NOBODY)
    before = notes.stat()
    answer = _attack(
        nobody,
        [
            f"chmod 0666 {notes}; echo chmod=$?; touch -d 2000-01-01 {notes}; echo touch=$?",
            'echo x > /dev/null && echo y > "$TMPDIR/f" && chmod 0700 "$TMPDIR/f"; echo own=$?',
        ],
        "read-only",
        "deny",
    )
    after = notes.stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns), answer
    assert "chmod=0" not in answer and "touch=0" not in answer, answer
    assert "own=0" in answer, answer
