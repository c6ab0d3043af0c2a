"""No socket file is in a restricted subagent's reach (S-SBX-1, S-SEC-1).

Landlock does not check ``connect(2)`` on a pathname UNIX socket, so a
``read-only`` or ``workspace-write`` subagent, under network deny too, could
connect to any socket file it could name: ``/var/run/docker.sock`` (root on the
host), the D-Bus buses, an ssh-agent, X11. Here a listener in this test process
stands for them, outside the project, and a real worker's Bash connects to it.
Only the user's config (``[sandbox] allow_unix_sockets``) or ``full`` reaches it;
a project's config or profile cannot. Socketpairs, which reach nothing but
themselves, keep working.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.policy._sandbox import SandboxSettings
from tests.support.attack import bash_attack
from tests.support.listener import record_connections

PY = sys.executable


@pytest.fixture
def socket_file(tmp_path: Path) -> Iterator[tuple[Path, list[bytes]]]:
    """A UNIX stream listener outside the project: its path, and what each connection sent."""
    path = tmp_path / "outside" / "s.sock"
    path.parent.mkdir()
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(8)
    got = record_connections(srv)
    try:
        yield path, got
    finally:
        srv.close()


def _connect(path: Path) -> str:
    """Bash that connects to ``path``, sends ``hi`` and prints the answer, or why not."""
    target = str(path)
    script = (
        "import socket\n"
        "try:\n"
        f"    s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect({target!r})\n"
        "    s.sendall(b'hi'); print('CONNECTED', s.recv(10))\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    return f'{PY} -c "{script}"'


SOCKETPAIR = f"{PY} -c \"import socket; a,b=socket.socketpair(); a.send(b'x'); print(b.recv(1))\""


@pytest.mark.parametrize("network", ["deny", "allow"])
@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
async def test_s_sbx_1_a_restricted_subagent_reaches_no_socket_file(
    tmp_path: Path, socket_file: tuple[Path, list[bytes]], mode: str, network: str
) -> None:
    """S-SBX-1, S-SEC-1: a read-only or workspace-write subagent, network deny or allow,
    cannot connect to a UNIX socket file outside the project: the listener gets nothing.
    A socketpair still works in its Bash, and its task record says sockets are blocked."""
    path, got = socket_file
    attack = await bash_attack(
        tmp_path,
        [_connect(path), SOCKETPAIR],
        subagent_type="general-purpose",
        mode=mode,
        network=network,
    )
    assert "CONNECTED" not in attack.output(0) and got == [], (attack.output(0), got)
    assert "refused" in attack.output(0), attack.output(0)
    assert "b'x'" in attack.output(1), attack.output(1)
    assert attack.record.sandbox is not None and attack.record.sandbox.unix_sockets_blocked


@pytest.mark.parametrize(
    ("mode", "settings"),
    [("full", SandboxSettings()), ("workspace-write", SandboxSettings(allow_unix_sockets=True))],
    ids=["full", "user-opt-in"],
)
async def test_s_sbx_1_full_mode_or_the_users_opt_in_reaches_the_socket_file(
    tmp_path: Path,
    socket_file: tuple[Path, list[bytes]],
    mode: str,
    settings: SandboxSettings,
) -> None:
    """S-SBX-1: the control: in `full`, or with the user's `allow_unix_sockets = true`,
    the same connect under network deny reaches the listener."""
    path, got = socket_file
    attack = await bash_attack(
        tmp_path, [_connect(path)], mode=mode, network="deny", sandbox=settings
    )
    assert "CONNECTED b'pong'" in attack.output(), attack.output()
    assert got == [b"hi"]
    assert attack.record.sandbox is not None and not attack.record.sandbox.unix_sockets_blocked


@pytest.mark.parametrize("where", ["project", "user"])
async def test_s_sbx_1_no_profile_allows_unix_sockets(
    tmp_path: Path, socket_file: tuple[Path, list[bytes]], where: str
) -> None:
    """S-SBX-1, S-SBX-3: a profile, the repository's or the user's own, that writes
    `allowUnixSockets: true` does not reach the socket file: only the user's config
    opens it, for every subagent at once (the field is ignored with a warning)."""
    path, got = socket_file
    home = tmp_path.parent / f"{tmp_path.name}.home"
    project = tmp_path / "project"
    agents = project / ".claude" / "agents" if where == "project" else home / "agents"
    agents.mkdir(parents=True)
    (agents / "sockets.md").write_text(
        "---\nname: sockets\ndescription: talks to the daemon\ntools: Bash\n"
        "network: deny\nallowUnixSockets: true\n---\nHelp.\n"
    )
    attack = await bash_attack(tmp_path, [_connect(path)], subagent_type="sockets", home=home)
    assert "CONNECTED" not in attack.output() and got == [], (attack.output(), got)
