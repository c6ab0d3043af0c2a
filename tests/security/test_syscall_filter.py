"""The worker's seccomp filter: what uid checks and Landlock leave open (S-SEC-2, S-SEC-7, S-SBX-1).

Each attack runs in a real worker's Bash. ``prlimit(2)`` on another process
asks only for a matching uid, so it reached the supervisor (RLIMIT_CPU=1 got
it SIGKILLed); a user namespace made the worker-tree check read the host's
init; MPTCP sockets escaped Landlock's TCP-only network rules, and UDP and ICMP
sockets, which those rules do not name at all, sent datagrams to any host.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.support.attack import Attack, bash_attack
from tests.support.listener import record_connections

PY = sys.executable
# Bash's parent is the worker; above it the zygote, then the supervisor (this process).
# A worker's /proc shows neither (S-SEC-1): this process finds its zygote child and
# leaves the pid in a file, which the attack reads (the name shows it found the zygote).


async def _leave_zygote_pid(path: Path) -> None:
    """Write the pid of this process's child named subvisor-zygote to ``path``, once it runs."""
    me = str(os.getpid())
    while True:
        for pid in os.listdir("/proc"):
            try:
                stat = await trio.Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
            if pid.isdigit() and comm == "subvisor-zygote" and rest.split()[1] == me:
                await trio.Path(path).write_text(f"{pid} {comm}\n")
                return
        await trio.sleep(0.05)


async def test_s_sec_2_prlimit_on_the_supervisor_or_zygote_is_refused(tmp_path: Path) -> None:
    """S-SEC-2: `prlimit --pid` on the zygote or the supervisor fails (EPERM), so no
    RLIMIT_CPU of 1 s gets them SIGKILLed. The attack re-sets each one's own RLIMIT_NOFILE
    (a change of nothing) so that the test process is never at risk; `ulimit` on itself works."""
    found = tmp_path / "zygote.pid"
    attack = (
        f"until [ -s {found} ]; do sleep 0.05; done; read z name < {found}; s={os.getpid()}; "
        'echo "zygote=$name supervisor=$s"; '
        "for v in $z $s; do "
        "lim=$(prlimit --pid $v --nofile --raw --noheadings | awk '{print $2\":\"$3}'); "
        'prlimit --pid $v --nofile=$lim; echo "prlimit $v rc=$?"; done; '
        'ulimit -S -n 512; echo "ulimit rc=$?"'
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_leave_zygote_pid, found)
        done = await bash_attack(tmp_path, [attack], mode="workspace-write")
        nursery.cancel_scope.cancel()
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


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on loopback: its port, and what each connection sent."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    got = record_connections(srv)
    try:
        yield srv.getsockname()[1], got
    finally:
        srv.close()


@pytest.fixture
def datagram_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A UDP socket on loopback (IPv4 and IPv6): its port, and every datagram it got."""
    srv = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", 0))
    got: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                got.append(srv.recv(100))
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1], got
    finally:
        srv.close()


CLIENT = """
import socket, sys
for name, family, kind, proto in (
    ("tcp", 2, 1, 0), ("tcp6", 10, 1, 0), ("mptcp", 2, 1, 262), ("mptcp6", 10, 1, 262),
    ("sctp", 2, 1, 132), ("seqpacket", 2, 5, 0), ("vsock", 40, 1, 0),
):
    try:
        s = socket.socket(family, kind, proto)
    except OSError as e:
        print(name, "no socket", e.errno)
        continue
    try:
        s.settimeout(5)
        s.connect(("127.0.0.1" if family == 2 else "::ffff:127.0.0.1", int(sys.argv[1])))
        s.sendall(b"exfil-" + name.encode())
        print(name, "CONNECTED", s.recv(10))
    except (OSError, TypeError) as e:  # TypeError: a vsock address is no (host, port)
        print(name, "refused", getattr(e, "errno", e))
a, b = socket.socketpair(); a.close(); b.close(); print("socketpair ok")
"""


async def _run_client(tmp_path: Path, script: str, port: int, *, mode: str, network: str) -> Attack:
    """Run the Python ``script`` with ``port`` in a general-purpose worker's Bash."""
    client = tmp_path / "client.py"
    client.write_text(script)
    return await bash_attack(
        tmp_path,
        [f"{PY} {client} {port}"],
        subagent_type="general-purpose",
        mode=mode,
        network=network,
    )


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
async def test_s_sbx_1_network_deny_refuses_mptcp_and_sctp_sockets(
    tmp_path: Path, mode: str, listener: tuple[int, list[bytes]]
) -> None:
    """S-SBX-1: under network deny an MPTCP socket (which Landlock's TCP rules do not match)
    cannot be made, nor SCTP or vsock; plain TCP is still refused at connect and a
    socketpair is still fine. Nothing reaches the listener."""
    port, got = listener
    attack = await _run_client(tmp_path, CLIENT, port, mode=mode, network="deny")
    out = attack.output()
    assert attack.record.sandbox is not None and attack.record.sandbox.network_denied
    assert "CONNECTED" not in out and got == [], (out, got)
    assert "tcp refused 13" in out and "tcp6 refused 13" in out, out  # Landlock, at connect
    for name in ("mptcp", "mptcp6", "sctp", "seqpacket", "vsock"):
        assert f"{name} no socket 13" in out, out  # the filter, at socket()
    assert "socketpair ok" in out, out


DATAGRAMS = """
import socket, sys, time
for name, family, proto in (("udp", 2, 0), ("udp6", 10, 17), ("udplite", 2, 136)):
    try:
        s = socket.socket(family, socket.SOCK_DGRAM, proto)
    except OSError as e:
        print(name, "no socket", e.errno)
        continue
    host = "127.0.0.1" if family == 2 else "::ffff:127.0.0.1"
    s.sendto(b"exfil-" + name.encode(), (host, int(sys.argv[1])))
    print(name, "SENT")
for name, family, kind, proto in (("ping", 2, 2, 1), ("ping6", 10, 2, 58), ("raw", 2, 3, 1)):
    try:
        socket.socket(family, kind, proto).close()
        print(name, "MADE")
    except OSError as e:
        print(name, "no socket", e.errno)
time.sleep(0.2)  # the datagrams, where they went out, reach the listener first
"""


@pytest.mark.parametrize(
    ("mode", "network"),
    [("read-only", "deny"), ("workspace-write", "deny"), ("read-only", "allow")],
)
async def test_s_sbx_1_network_deny_sends_no_datagram(
    tmp_path: Path, mode: str, network: str, datagram_listener: tuple[int, list[bytes]]
) -> None:
    """S-SBX-1: Landlock has no UDP rules, so under network deny the filter refuses UDP,
    UDP-Lite, ICMP echo and raw sockets at socket() (EACCES): no datagram reaches a listener
    on loopback, where it could as well have gone to any host or carried a DNS query out.
    With `network: allow` (the control) the same datagrams arrive."""
    port, got = datagram_listener
    attack = await _run_client(tmp_path, DATAGRAMS, port, mode=mode, network=network)
    out = attack.output()
    if network == "allow":
        assert "udp SENT" in out and "udp6 SENT" in out, out
        assert b"exfil-udp" in got and b"exfil-udp6" in got, (out, got)
        return
    assert attack.record.sandbox is not None and attack.record.sandbox.network_denied
    assert got == [] and "SENT" not in out and "MADE" not in out, (out, got)
    for name in ("udp", "udp6", "udplite", "ping", "ping6", "raw"):
        assert f"{name} no socket 13" in out, out


_INOTIFY_HOG = (
    "import ctypes, fcntl, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "held = [fd for fd in (libc.inotify_init1(0) for _ in range(8)) if fd >= 0]\n"
    "print('inotify instances', len(held), 'errno', ctypes.get_errno())\n"
    "with open(sys.argv[1]) as f:\n"
    "    try:\n"
    "        fcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n"
    "        print('lease held')\n"
    "    except OSError as e:\n"
    "        print('lease refused', e.errno)\n"
)


@pytest.mark.parametrize("mode", ["read-only", "workspace-write", "full"])
async def test_s_sec_2_a_restricted_subagent_takes_no_inotify_instance_and_no_lease(
    tmp_path: Path, mode: str
) -> None:
    """S-SEC-2: inotify instances are counted per uid for the whole machine (128 here; a
    read-only worker took them all, and every other process of the uid, root's services
    included, got EMFILE until it ended), and a read lease on a file the worker only reads
    (it owns it: uid 0) stalls every writer of it for lease-break-time. In read-only and
    workspace-write the worker gets neither; in full (the control) it gets both."""
    target = tmp_path / "outside" / "hostname"
    target.parent.mkdir()
    target.write_text("host\n")
    script = tmp_path / "outside" / "hog.py"
    script.write_text(_INOTIFY_HOG)
    done = await bash_attack(tmp_path, [f"{PY} {script} {target}"], mode=mode)
    out = done.output()
    if mode == "full":
        assert "inotify instances 8" in out and "lease held" in out, out
    else:
        assert "inotify instances 0 errno 38" in out, out
        assert "lease refused 1" in out, out


# Listens on the proc connector (NETLINK_CONNECTOR, CN_IDX_PROC), then names
# itself READY (what the test waits for) and waits for a comm event carrying
# SECRET: a process outside its tree naming itself.
_PROC_CONNECTOR = """
import ctypes, os, socket, struct, sys, time
ready, secret = sys.argv[1].encode(), sys.argv[2].encode()
try:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)
except OSError as exc:
    print(f"connector refused errno {exc.errno}")
    route = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    print("route socket made")
    sys.exit()
s.bind((os.getpid(), 1))
header = struct.pack("=IHHII", 40, 3, 0, 0, os.getpid())
s.send(header + struct.pack("=IIIIHHI", 1, 1, 0, 0, 4, 0, 1))
ctypes.CDLL(None).prctl(15, ready, 0, 0, 0)
s.settimeout(1.0)
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        data = s.recv(65536)
    except socket.timeout:
        continue
    if secret in data:
        print("saw another tree's process")
        break
else:
    print("saw nothing")
"""


async def _name_processes_once_ready(ready: str, secret: str) -> None:
    """Once a process is named ``ready``, keep starting ones that name themselves ``secret``."""
    while True:
        if any(_comm(pid) == ready for pid in os.listdir("/proc") if pid.isdigit()):
            break
        await trio.sleep(0.05)
    name = f"import ctypes; ctypes.CDLL(None).prctl(15, {secret.encode()!r}, 0, 0, 0)"
    while True:
        await trio.run_process([PY, "-c", name])
        await trio.sleep(0.1)


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def test_s_sec_2_a_subagent_watches_no_process_outside_its_tree(tmp_path: Path) -> None:
    """S-SEC-1, S-SEC-2: the proc connector multicasts every fork, exec, exit and comm change
    of the machine to any listener, no capability needed: a read-only subagent saw a process
    outside its tree (another session's worker, a supervisor) name itself. Now its netlink
    socket for the connector is refused; a NETLINK_ROUTE one (getifaddrs, ip) is still made."""
    script = tmp_path / "outside" / "connector.py"
    script.parent.mkdir()
    script.write_text(_PROC_CONNECTOR)
    ready, secret = f"cnready{os.getpid()}"[:15], f"cnsecret{os.getpid()}"[:15]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_name_processes_once_ready, ready, secret)
        done = await bash_attack(tmp_path, [f"{PY} {script} {ready} {secret}"])
        nursery.cancel_scope.cancel()
    out = done.output()
    assert "saw another tree's process" not in out, out
    assert "connector refused errno 13" in out and "route socket made" in out, out
