"""The gateway's processes: HTTP providers' calls made beside the supervisor (S-PROF-6, S-SEC-1).

Real gateway processes against the real local provider server: each call
goes there once enough calls are in flight (``pool_after``), its text comes
back in order, its errors as the same classes (so retries still work), and
a process that dies mid-call costs the call a retry, not the answer.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import trio
import trustme

from protocol._chat import ChatMessage, ModelRequest
from supervisor import Supervisor, SupervisorConfig
from supervisor.kernel import HelperCgroup
from supervisor.providers import GatewayConfig, ModelAuthError, ModelGateway
from supervisor.providers._gateway_process import GATEWAY_PROCESS_NAME
from tests.support.provider_server import CannedResponse, ProviderServer, localhost_tls

HELLO = (ChatMessage(role="user", content="hi"),)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def _pooled(base_url: str, **config: object) -> ModelGateway:
    settings = GatewayConfig.model_validate(
        {
            "processes": 1,
            "pool_after": 1,
            "max_retries": 1,
            "backoff_base_s": 0.0,
            "providers": {"openai": {"base_url": base_url + "/v1", "api_key": "sk-pool-test"}},
            **config,
        }
    )
    return ModelGateway(settings, rng=random.Random(3))


def _words(text: str, *, hold: tuple[int, threading.Event] | None = None) -> CannedResponse:
    """An OpenAI stream of ``text``'s words; ``hold``: stop before that chunk until the event."""
    events = [
        (None, {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
        for word in text.split(" ")
    ]
    events.append((None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    events.append((None, "[DONE]"))
    words = CannedResponse.sse(events)
    if hold is None:
        return words
    return CannedResponse(headers=words.headers, chunks=words.chunks, holds=(hold,))


async def _ready(gateway: ModelGateway) -> None:
    """Start the pool and wait until calls go to it."""
    assert gateway.pool is not None
    gateway.pool.start_soon()
    with trio.fail_after(60):
        while not gateway.pool.ready:  # noqa: ASYNC110 (another process: no event here)
            await trio.sleep(0.02)


def _gateway_processes() -> list[psutil.Process]:
    me = psutil.Process()
    return [child for child in me.children() if child.name() == GATEWAY_PROCESS_NAME]


async def test_a_call_streams_through_a_gateway_process_in_order(server: ProviderServer) -> None:
    """S-PROF-6: with the pool ready, a streamed answer is read by a gateway process (a child
    of ours, named so); its text reaches the caller's sink in order, and the result is whole."""
    words = " ".join(f"w{i}" for i in range(60))
    server.enqueue(_words(words))
    pieces: list[str] = []
    async with _pooled(server.base_url) as gateway:
        await _ready(gateway)
        [process] = _gateway_processes()
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO), pieces.append)
        assert gateway.process_cpu_seconds() > 0
    assert result.text == words.replace(" ", "")
    assert "".join(pieces) == result.text
    assert server.requests[0].headers["authorization"] == "Bearer sk-pool-test"
    with pytest.raises(psutil.NoSuchProcess):
        process.wait(timeout=10)
        process.status()


async def test_keys_reach_a_gateway_process_over_its_link_never_its_environment(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-SEC-1: a key the supervisor reads from its environment is sent to the gateway
    process in its start frame and used there; the process's own environment holds no key
    (and the process is not dumpable: only a reader with CAP_SYS_PTRACE, as here, sees it)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-pool-MARKER")
    server.enqueue(_words("keyed"))
    config = GatewayConfig.model_validate(
        {
            "processes": 1,
            "pool_after": 1,
            "providers": {"openai": {"base_url": server.base_url + "/v1"}},
        }
    )
    async with ModelGateway(config) as gateway:
        await _ready(gateway)
        [process] = _gateway_processes()
        environ = await trio.Path(f"/proc/{process.pid}/environ").read_bytes()
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == "keyed"
    assert server.requests[0].headers["authorization"] == "Bearer sk-env-pool-MARKER"
    assert b"MARKER" not in environ and b"OPENAI_API_KEY" not in environ
    assert b"PATH=" in environ  # the rest of the environment is there


async def test_errors_cross_as_their_class_and_retries_stay_with_the_gateway(
    server: ProviderServer,
) -> None:
    """A 429 in the gateway process is retried by the supervisor's gateway; a 401 arrives
    as ``ModelAuthError`` saying what the provider said, and is not retried."""
    server.enqueue(
        CannedResponse.json({"error": {"message": "slow down"}}, status=429),
        _words("after the wait"),
        CannedResponse.json({"error": {"message": "bad key"}}, status=401),
    )
    async with _pooled(server.base_url) as gateway:
        await _ready(gateway)
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        assert result.text == "afterthewait"
        with pytest.raises(ModelAuthError, match="bad key") as refused:
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert refused.value.status_code == 401 and refused.value.attempts == 1
    assert len(server.requests) == 3


async def test_a_gateway_process_killed_mid_call_costs_a_retry_not_the_answer(
    server: ProviderServer,
) -> None:
    """A gateway process SIGKILLed while its call waits for the stream: the call fails
    over (retried, here while the pool restarts) and the caller gets the whole answer. (Once
    text has reached the caller, a failed attempt is not retried: it would say it twice.)"""
    held = threading.Event()
    server.enqueue(_words("never finished", hold=(0, held)), _words("the whole answer"))
    async with _pooled(server.base_url) as gateway:
        await _ready(gateway)
        [process] = _gateway_processes()

        async def kill_when_streaming() -> None:
            while not server.requests:  # noqa: ASYNC110 (the server's thread)
                await trio.sleep(0.01)
            os.kill(process.pid, signal.SIGKILL)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_when_streaming)
            result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        held.set()
    assert result.text == "thewholeanswer"
    assert len(server.requests) == 2


async def test_a_cancelled_call_is_cancelled_in_its_gateway_process(
    server: ProviderServer,
) -> None:
    """Cancelling the caller sends the process ``cancel``: it drops the provider's connection
    (the server sees it go) and the pool serves the next call as usual."""
    held = threading.Event()
    server.enqueue(_words("held forever", hold=(1, held)), _words("next one"))
    async with _pooled(server.base_url) as gateway:
        await _ready(gateway)
        with trio.move_on_after(0.5) as waited:
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        assert waited.cancelled_caught
        held.set()
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == "nextone"
    assert len(server.requests) == 2


async def test_below_pool_after_calls_stay_in_the_supervisor(server: ProviderServer) -> None:
    """Fewer calls in flight than ``pool_after``: no gateway process is started at all."""
    server.enqueue(_words("here"))
    async with _pooled(server.base_url, pool_after=4) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        assert gateway.pool is not None and not gateway.pool.ready
        assert _gateway_processes() == []
    assert result.text == "here"


async def test_past_pool_after_a_call_waits_for_the_starting_pool(
    server: ProviderServer,
) -> None:
    """While the pool starts, ``pool_after`` calls stream in the supervisor and the next one
    waits for the pool: it is made by the gateway process, not on the supervisor's loop."""
    held = threading.Event()
    server.enqueue(_words("one", hold=(0, held)), _words("two", hold=(0, held)), _words("three"))
    results: dict[int, str] = {}
    async with _pooled(server.base_url, pool_after=2) as gateway:

        async def call(i: int) -> None:
            result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
            results[i] = result.text

        async with trio.open_nursery() as nursery:
            for i in range(2):
                nursery.start_soon(call, i)
            with trio.fail_after(30):
                while len(server.requests) < 2:  # noqa: ASYNC110 (the server's thread)
                    await trio.sleep(0.01)
            nursery.start_soon(call, 2)
            with trio.fail_after(60):
                while 2 not in results:  # noqa: ASYNC110 (another process: no event here)
                    await trio.sleep(0.02)
            ours = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.laddr}
            held.set()
    # The first two race each other to the server; the third comes after both.
    assert sorted(results.values()) == ["one", "three", "two"] and results[2] == "three"
    first, second, third = (request.client_port for request in server.requests)
    assert {first, second} <= ours
    assert third not in ours


async def test_every_piece_of_text_arrives_in_order_when_the_supervisor_reads_slowly(
    server: ProviderServer,
) -> None:
    """S-OBS-2: with the supervisor's loop stalling (so the gateway process's link fills and
    its writers queue), each call's pieces still reach its sink whole and in order: joined,
    they are the call's answer. (A call's result once overtook its last batch of text.)"""
    calls, words = 24, 100
    for call in range(calls):
        server.enqueue(_words(" ".join(f"c{call}w{i}:" + "x" * 600 for i in range(words))))
    pieces: dict[int, list[str]] = {call: [] for call in range(calls)}
    answers: dict[int, str] = {}
    async with _pooled(server.base_url, max_concurrency=calls) as gateway:
        await _ready(gateway)

        async def call(i: int) -> None:
            request = ModelRequest(model="openai:m", messages=HELLO)
            answers[i] = (await gateway.call(request, pieces[i].append)).text

        async def stall() -> None:
            while True:
                time.sleep(0.02)  # noqa: ASYNC251 (the loop is busy: nobody reads the link)
                await trio.sleep(0.001)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stall)
            async with trio.open_nursery() as callers:
                for i in range(calls):
                    callers.start_soon(call, i)
            nursery.cancel_scope.cancel()
    assert len(answers) == calls
    for i in range(calls):
        assert "".join(pieces[i]) == answers[i]


async def test_a_gateway_process_runs_ahead_of_the_supervisor_where_it_may(
    server: ProviderServer,
) -> None:
    """S-PROF-6: a gateway process lowers its nice value below the supervisor's (its
    streamed text goes before launches in a storm) where it may, as here (root)."""
    from supervisor.providers._gateway_process import GATEWAY_NICE_STEP

    ours = os.getpriority(os.PRIO_PROCESS, 0)
    async with _pooled(server.base_url) as gateway:
        await _ready(gateway)
        [process] = _gateway_processes()
        theirs = os.getpriority(os.PRIO_PROCESS, process.pid)
    wanted = max(-20, ours - GATEWAY_NICE_STEP)
    may = os.geteuid() == 0 or 20 - resource.getrlimit(resource.RLIMIT_NICE)[0] <= wanted
    assert theirs == (wanted if may else ours)


def _as_a_user(report: Callable[[], str]) -> str:
    """What ``report`` returns, run in a forked child as uid 65534 with no capability left."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child reports through the pipe)
        code = 1
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            os.write(write, report().encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as reported:
        text = reported.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return text


def test_a_gateway_process_without_the_right_to_step_ahead_stays_as_it_is() -> None:
    """S-PROF-6: where neither CAP_SYS_NICE nor RLIMIT_NICE allows it (a user's process),
    stepping ahead changes nothing and fails nothing: the call still works."""
    from supervisor.providers._gateway_process import step_ahead

    def step() -> str:
        resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
        before = os.getpriority(os.PRIO_PROCESS, 0)
        return f"{before} {step_ahead(5)}"

    before, after = _as_a_user(step).split()
    assert before == after


def _weight(cgroup: Path) -> int:
    """A cpu cgroup's weight, in v1 shares (v2's ``cpu.weight`` 100 is 1024 shares)."""
    if (cgroup / "cpu.shares").exists():
        return int((cgroup / "cpu.shares").read_text())
    return int((cgroup / "cpu.weight").read_text()) * 1024 // 100


def _cpu_cgroup(pid: int) -> Path:
    """The cgroup that weighs ``pid`` for the CPU."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
        if controllers == "":
            v2 = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (v2 / "cpu.weight").exists():
                return v2
    raise LookupError(f"process {pid} has no cpu cgroup")


@pytest.mark.machine_may_lack("a writable cpu cgroup (cgroup v1 here; cpu delegated in v2)")
async def test_a_gateway_process_weighs_more_than_the_fleet_for_the_cpu(
    server: ProviderServer,
) -> None:
    """S-PROF-6: a gateway process is in a cpu cgroup of its own that weighs four times the
    whole fleet (its streamed text goes before a launch storm), outside the fleet's tree
    (no worker can join it); the cgroup is gone once the gateway is closed."""
    server.enqueue(_words("weighed and streamed"))
    async with Supervisor(SupervisorConfig()) as sup:
        tree = sup._cgroups
        if tree is None or tree.cpu_weight_error:
            pytest.skip(
                f"no CPU weight for the fleet here: {tree.cpu_weight_error if tree else ''}"
            )
        handle = await sup.spawn()
        # A worker's cgroup weighs a part of the fleet's, its parent.
        fleet = _cpu_cgroup(handle.pid).parent
        async with _pooled(server.base_url) as gateway:
            await _ready(gateway)
            assert gateway.pool is not None and gateway.pool.cpu_weight_error == ""
            [process] = _gateway_processes()
            helpers = _cpu_cgroup(process.pid)
            assert _weight(helpers) >= 4 * _weight(fleet)
            result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        await handle.kill("test over")
    assert result.text == "weighedandstreamed"
    assert fleet not in (helpers, *helpers.parents)
    assert not helpers.exists()


async def test_closing_one_gateway_leaves_another_gateways_processes_running(
    server: ProviderServer,
) -> None:
    """S-PROF-6: two gateways in one process each weigh their processes in a cgroup of their
    own: closing one (which removes its cgroup, killing what is left in it) leaves the
    other's processes running, mid-answer or not."""
    server.enqueue(_words("still here"))
    async with _pooled(server.base_url) as second:
        await _ready(second)
        assert second.pool is not None
        [pid] = second.pool.pids
        async with _pooled(server.base_url) as first:
            await _ready(first)
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert second.pool.ready
        result = await second.call(ModelRequest(model="openai:m", messages=HELLO))
        assert second.pool.pids == [pid]
    assert result.text == "stillhere"


def test_without_a_cpu_cgroup_a_gateway_process_keeps_the_supervisors_weight() -> None:
    """S-PROF-6: where no cpu cgroup can be made (a user's process, no delegation), the
    helper cgroup is not made and says why in one line; the pool then serves as before."""

    def create() -> str:
        cgroup, why = HelperCgroup.create("gateway")
        return f"{cgroup is None}\n{why}"

    made, why = _as_a_user(create).split("\n", 1)
    assert made == "True"
    assert why and "\n" not in why


def test_processes_auto_is_sized_to_the_machine() -> None:
    """``processes = "auto"``: one gateway process per two CPUs we may use, none on one."""
    from supervisor.providers._gateway_pool import pool_size

    cpus = len(os.sched_getaffinity(0))
    assert pool_size("auto") == (0 if cpus < 2 else min(8, cpus // 2))
    assert pool_size(3) == 3 and pool_size(0) == 0
    with pytest.raises(ValueError, match="processes"):
        GatewayConfig.model_validate({"processes": -1})


async def test_a_gateway_process_streams_over_https_trusting_the_users_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S-PROF-6: a private CA named by ``SSL_CERT_FILE`` (as a company proxy's would be) is
    trusted by the gateway process too; its TLS answer streams whole and in order."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    words = " ".join(f"w{i}" for i in range(60))
    pieces: list[str] = []
    with ProviderServer(tls=localhost_tls(ca)) as server:
        server.enqueue(_words(words))
        async with _pooled(server.base_url) as gateway:
            await _ready(gateway)
            assert _gateway_processes()
            result = await gateway.call(
                ModelRequest(model="openai:m", messages=HELLO), pieces.append
            )
            assert gateway.process_cpu_seconds() > 0
    assert result.text == words.replace(" ", "")
    assert "".join(pieces) == result.text
