"""The worker's seccomp filter: what uid checks and Landlock leave open (S-SEC-2, S-SEC-7, S-SBX-1).

Each attack runs in a real worker's Bash. ``prlimit(2)`` on another process
asks only for a matching uid, so it reached the supervisor (RLIMIT_CPU=1 got
it SIGKILLed); a user namespace made the worker-tree check read the host's
init; MPTCP sockets escaped Landlock's TCP-only network rules.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.attack import bash_attack

PY = sys.executable
# Bash's parent is the worker; above it the zygote, then the supervisor (this process).
PIDS = (
    "w=$PPID; z=$(awk '{print $4}' /proc/$w/stat); s=$(awk '{print $4}' /proc/$z/stat); "
    'echo "zygote=$(cat /proc/$z/comm) supervisor=$s"; '
)


async def test_s_sec_2_prlimit_on_the_supervisor_or_zygote_is_refused(tmp_path: Path) -> None:
    """S-SEC-2: `prlimit --pid` on the zygote or the supervisor fails (EPERM), so no
    RLIMIT_CPU of 1 s gets them SIGKILLed. The attack re-sets each one's own RLIMIT_NOFILE
    (a change of nothing) so that the test process is never at risk; `ulimit` on itself works."""
    attack = PIDS + (
        "for v in $z $s; do "
        "lim=$(prlimit --pid $v --nofile --raw --noheadings | awk '{print $2\":\"$3}'); "
        'prlimit --pid $v --nofile=$lim; echo "prlimit $v rc=$?"; done; '
        'ulimit -S -n 512; echo "ulimit rc=$?"'
    )
    done = await bash_attack(tmp_path, [attack], mode="workspace-write")
    out = done.output()
    assert "zygote=subvisor-zygote" in out, out
    assert out.count("rc=1") == 2 and "Operation not permitted" in out, out
    assert "ulimit rc=0" in out, out


def _nested(tmp: Path, wrap: str) -> str:
    return (
        f"env -u SUBVISOR_TREE SUBVISOR_HOME=$TMPDIR/nested-home {wrap} {PY} -m supervisor.cli "
        f"run --model scripted:{tmp}/nested.yaml --json 'nested root' 2>&1 | tail -c 600; "
        "echo exit=$?"
    )


@pytest.mark.parametrize("mode", ["read-only", "full"])
async def test_s_sec_7_a_user_and_pid_namespace_does_not_hide_the_worker_tree(
    tmp_path: Path, mode: str
) -> None:
    """S-SEC-7: `unshare --user --pid --fork` (with or without its own /proc) around a nested
    `subvisor run` does not get it to run: no user namespace can be made in a worker."""
    (tmp_path / "nested.yaml").write_text(
        "agents:\n  root:\n    - text: the nested supervisor ran\n"
    )
    attack = await bash_attack(
        tmp_path,
        [
            "unshare --user true; echo userns rc=$?",
            _nested(tmp_path, "unshare --user --pid --fork --kill-child"),
            _nested(tmp_path, "unshare --user --map-root-user --pid --fork --mount-proc"),
        ],
        subagent_type="general-purpose",
        mode=mode,
    )
    outs = [attack.output(i) for i in range(3)]
    assert "userns rc=0" not in outs[0], outs[0]
    for out in outs[1:]:
        assert "the nested supervisor ran" not in out, out
