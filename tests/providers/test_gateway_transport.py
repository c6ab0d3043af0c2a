"""``GatewayTransport``: the gateway's HTTP/1.1, bodies decoded a read at a time (S-PROF-6).

Real local servers throughout: the test provider server (chunked SSE,
JSON bodies, keep-alive, HTTPS), a raw trio server where a test needs a
server that stalls or breaks mid-body (its TLS written by hand through an
``ssl.SSLObject``), and OpenSSL's own ``s_server`` for a TLS 1.3 KeyUpdate.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import shutil
import ssl
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest
import trio
import trustme
from hypothesis import given
from hypothesis import strategies as st

from protocol._chat import ChatMessage, ModelRequest
from supervisor.providers import GatewayConfig, ModelConnectionError, ModelGateway
from supervisor.providers._transport import ChunkedBody, GatewayTransport
from tests.support.provider_server import CannedResponse, ProviderServer, localhost_tls

HELLO = (ChatMessage(role="user", content="hi"),)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def _gateway(base_url: str, **provider: object) -> ModelGateway:
    config = GatewayConfig.model_validate(
        {
            "max_retries": 0,
            "providers": {"openai": {"base_url": base_url + "/v1", **provider}},
        }
    )
    return ModelGateway(config, env={}, rng=random.Random(7))


def _streamed(text: str, piece_size: int | None = None) -> CannedResponse:
    events = [
        (None, {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
        for word in text.split(" ")
    ]
    events.append((None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    events.append((None, "[DONE]"))
    return CannedResponse.sse(events, piece_size=piece_size)


def _chunked(pieces: list[bytes], extension: bytes = b"", trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces if p)
    return body + b"0\r\n" + trailer + b"\r\n"


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    cut=st.integers(min_value=1, max_value=17),
    extension=st.sampled_from([b"", b";name=value"]),
    trailer=st.sampled_from([b"", b"x-trailer: 1\r\n"]),
)
def test_chunked_body_decodes_however_the_reads_are_cut(
    pieces: list[bytes], cut: int, extension: bytes, trailer: bytes
) -> None:
    """Chunk extensions and trailers are dropped; the payload is the chunks' bytes, in order."""
    wire = _chunked(pieces, extension, trailer) + b"NEXT"
    decoder = ChunkedBody()
    payload, ended = b"", False
    for i in range(0, len(wire), cut):
        data, ended = decoder.feed(wire[i : i + cut])
        payload += data
        if ended:
            break
    assert ended
    assert payload == b"".join(pieces)
    assert b"NEXT".startswith(decoder.leftover)  # what followed the body stays apart


@pytest.mark.parametrize("wire", [b"zz\r\nab\r\n", b"+2\r\nab\r\n", b"2\r\nabXY0\r\n\r\n"])
def test_chunked_body_refuses_bad_framing(wire: bytes) -> None:
    with pytest.raises(ValueError):
        ChunkedBody().feed(wire)


@pytest.mark.parametrize("piece_size", [None, 1, 7])
async def test_streamed_answer_whole_however_the_body_is_cut(
    server: ProviderServer, piece_size: int | None
) -> None:
    """HTTP chunks cut across SSE lines and events still give the whole answer, once."""
    server.enqueue(_streamed("one two three four", piece_size))
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)

    async with _gateway(server.base_url) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO), on_delta)
    assert result.text == "onetwothreefour"
    assert "".join(deltas) == result.text


async def test_a_connection_is_reused_after_a_whole_answer(server: ProviderServer) -> None:
    """Keep-alive: a body read to its exact end returns its connection to the pool."""
    server.enqueue(_streamed("first answer"), _streamed("second answer"))
    server.enqueue(CannedResponse.json({"error": {"message": "no"}}, status=400))
    async with _gateway(server.base_url) as gateway:
        for _ in range(2):
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    first, second = server.requests
    assert first.client_port == second.client_port


async def test_a_stalled_body_times_out_as_a_connection_error() -> None:
    """The read-idle timeout holds for the body too: one deadline per response."""

    async def stall(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        await stream.send_all(head + _chunked([b'data: {"choices":[]}\n\n'])[:-5])
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, host="127.0.0.1"), stall, 0
        )
        port = listeners[0].socket.getsockname()[1]
        async with _gateway(f"http://127.0.0.1:{port}", read_timeout_s=0.3) as gateway:
            with pytest.raises(ModelConnectionError, match="timed out"):
                await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
        nursery.cancel_scope.cancel()


async def test_plain_json_answers_and_error_statuses_read_whole(server: ProviderServer) -> None:
    """Bodies framed by Content-Length: a JSON answer, and an error status with its message."""
    server.enqueue(
        CannedResponse.json({"ok": True}),
        CannedResponse.json({"error": {"message": "bad key"}}, status=401),
    )
    async with httpx.AsyncClient(transport=GatewayTransport()) as client:
        ok = await client.post(server.base_url + "/v1/x", json={})
        refused = await client.post(server.base_url + "/v1/x", json={})
    assert ok.json() == {"ok": True}
    assert refused.status_code == 401 and refused.json()["error"]["message"] == "bad key"


async def test_waiting_for_a_model_slot_is_reported(server: ProviderServer) -> None:
    """A call that finds every slot taken says so (``on_wait``), then runs."""
    slow = _streamed("slow")
    server.enqueue(
        CannedResponse(headers=slow.headers, chunks=slow.chunks, delay_s=0.3), _streamed("next")
    )
    seen: list[bool] = []
    config = GatewayConfig.model_validate(
        {"max_concurrency": 1, "providers": {"openai": {"base_url": server.base_url + "/v1"}}}
    )
    async with ModelGateway(config, env={}) as gateway, trio.open_nursery() as nursery:
        request = ModelRequest(model="openai:m", messages=HELLO)
        nursery.start_soon(gateway.call, request)
        await trio.sleep(0.05)
        await gateway.call(request, on_wait=seen.append)
    assert seen == [True, False]


@pytest.fixture(scope="module")
def certificate_authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_server(certificate_authority: trustme.CA) -> Iterator[ProviderServer]:
    with ProviderServer(tls=localhost_tls(certificate_authority)) as running:
        yield running


def _tls_gateway(base_url: str, ca: trustme.CA, **provider: object) -> ModelGateway:
    """A gateway whose ``openai`` provider is at ``base_url`` (``https://host:port``).

    It trusts ``ca`` alone.
    """
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    config = GatewayConfig.model_validate(
        {"max_retries": 0, "providers": {"openai": {"base_url": base_url + "/v1", **provider}}}
    )
    return ModelGateway(
        config, transport=GatewayTransport(ssl_context=client_context), env={}, rng=random.Random(7)
    )


@pytest.mark.parametrize("piece_size", [None, 7])
async def test_a_streamed_answer_over_https_is_whole_and_in_order(
    tls_server: ProviderServer, certificate_authority: trustme.CA, piece_size: int | None
) -> None:
    """Over TLS the body is fed by the transport's reader, which decrypts what it reads: the
    same whole answer, its pieces in order, on a verified connection."""
    words = " ".join(f"w{i}" for i in range(40))
    tls_server.enqueue(_streamed(words, piece_size), _streamed("again"))
    pieces: list[str] = []
    async with _tls_gateway(tls_server.base_url, certificate_authority) as gateway:
        result = await gateway.call(ModelRequest(model="openai:m", messages=HELLO), pieces.append)
        again = await gateway.call(ModelRequest(model="openai:m", messages=HELLO))
    assert result.text == words.replace(" ", "")
    assert "".join(pieces) == result.text
    assert again.text == "again"
    # Read to its end, the TLS connection was reused.
    assert len({r.client_port for r in tls_server.requests}) == 1


async def test_an_untrusted_certificate_is_a_connection_error(tls_server: ProviderServer) -> None:
    """A server whose certificate the system does not trust is refused, saying so."""
    tls_server.enqueue(_streamed("never"))
    config = GatewayConfig.model_validate(
        {"max_retries": 0, "providers": {"openai": {"base_url": tls_server.base_url + "/v1"}}}
    )
    async with ModelGateway(config, transport=GatewayTransport(), env={}) as gateway:
        with pytest.raises(ModelConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO))


async def test_a_stalled_tls_body_times_out_as_a_connection_error(
    tls_server: ProviderServer, certificate_authority: trustme.CA
) -> None:
    """A TLS stream that stops mid-answer ends with the read-idle timeout, as plain TCP does."""
    import threading

    held = threading.Event()
    stalled = _streamed("one two three")
    tls_server.enqueue(
        CannedResponse(headers=stalled.headers, chunks=stalled.chunks, holds=((2, held),))
    )
    pieces: list[str] = []
    stalling = _tls_gateway(tls_server.base_url, certificate_authority, read_timeout_s=0.5)
    async with stalling as gateway:
        with pytest.raises(ModelConnectionError, match="timed out"):
            await gateway.call(ModelRequest(model="openai:m", messages=HELLO), pieces.append)
    held.set()
    # Both came before the stall (in one read or two: a round reads what has come).
    assert "".join(pieces) == "onetwo"


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


async def _call_raw_tls_server(
    ca: trustme.CA,
    answer: Callable[[ssl.SSLObject, trio.SocketStream, Callable[[], bytes]], Awaitable[None]],
    pieces: list[str],
) -> None:
    """One gateway call to a TLS server whose answer ``answer`` writes by hand.

    ``answer`` gets the server's TLS object after the request was read, the
    raw socket stream, and what reads the TLS bytes it wrote since.
    """
    server_context = localhost_tls(ca)

    async def serve(stream: trio.SocketStream) -> None:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = server_context.wrap_bio(incoming, outgoing, server_side=True)
        request = b""
        while b"\r\n\r\n" not in request:
            try:
                tls.do_handshake()
                request += tls.read(65536)
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    await stream.send_all(outgoing.read())
                incoming.write(await stream.receive_some(65536))
        await answer(tls, stream, outgoing.read)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, host="127.0.0.1"), serve, 0
        )
        port = listeners[0].socket.getsockname()[1]
        gateway = _tls_gateway(f"https://127.0.0.1:{port}", ca, read_timeout_s=0.5)
        try:
            async with gateway:
                await gateway.call(ModelRequest(model="openai:m", messages=HELLO), pieces.append)
        except ModelConnectionError as exc:
            failure: ModelConnectionError | None = exc
        else:
            failure = None
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure  # outside the nursery: not in an exception group


async def test_tls_records_that_came_with_the_head_are_not_left_waiting(
    certificate_authority: trustme.CA,
) -> None:
    """Body records read in the same socket read as the response head are handed on at once.

    The server sends the head and three events as four TLS records in one
    write, then holds the stream open: all three must arrive before the
    read-idle timeout ends the call, not wait for bytes that never come.
    """

    async def answer(
        tls: ssl.SSLObject, stream: trio.SocketStream, sent: Callable[[], bytes]
    ) -> None:
        tls.write(_SSE_HEAD)
        for event in _streamed("one two three").chunks[:3]:
            tls.write(_chunked([event])[:-5])  # one record each, the body not ended
        await stream.send_all(sent())
        await trio.sleep_forever()

    pieces: list[str] = []
    with pytest.raises(ModelConnectionError, match="timed out"):
        await _call_raw_tls_server(certificate_authority, answer, pieces)
    assert "".join(pieces) == "onetwothree"


@pytest.mark.parametrize(
    ("after", "error"),
    [
        (b"\x17\x03\x03\x00\x20" + b"x" * 32, "BAD_RECORD_MAC"),
        (None, "peer closed connection without sending complete message body"),
    ],
    ids=["a forged record", "the socket closed"],
)
async def test_a_tls_answer_broken_mid_body_is_one_connection_error(
    certificate_authority: trustme.CA, after: bytes | None, error: str
) -> None:
    """A record that does not decrypt, or a close without the body's end: the call fails
    with a connection error that says which, after the text that came whole."""

    async def answer(
        tls: ssl.SSLObject, stream: trio.SocketStream, sent: Callable[[], bytes]
    ) -> None:
        tls.write(_SSE_HEAD + _chunked([_streamed("one").chunks[0]])[:-5])
        await stream.send_all(sent())
        await trio.sleep(0.1)
        if after is None:
            await stream.aclose()
            return
        await stream.send_all(after)
        await trio.sleep_forever()

    pieces: list[str] = []
    with pytest.raises(ModelConnectionError, match=error):
        await _call_raw_tls_server(certificate_authority, answer, pieces)
    assert pieces == ["one"]


def _sse_line_chunk(data: str) -> bytes:
    """One SSE event as one HTTP chunk, written with LF for ``openssl s_server -crlf``."""
    payload = f"data: {data}\n\n".encode()
    on_the_wire = len(payload) + payload.count(b"\n")  # each LF goes out as CRLF
    return b"%x\n%s\n" % (on_the_wire, payload)


@dataclass
class _OpensslServer:
    """``openssl s_server``, driven through its stdin, and what it prints."""

    port: int
    stdin: IO[bytes]
    stdout: IO[bytes]

    def line_with(self, marker: bytes) -> bytes:
        while marker not in (line := self.stdout.readline()):
            assert line, f"openssl s_server ended before printing {marker!r}"
        return line

    def say(self, data: bytes) -> None:
        # It reads its stdin a read at a time: ``K`` works only alone.
        self.stdin.write(data)
        self.stdin.flush()
        time.sleep(0.2)


@pytest.fixture
def openssl_server(certificate_authority: trustme.CA, tmp_path: Path) -> Iterator[_OpensslServer]:
    issued = certificate_authority.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    issued.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    command = ["openssl", "s_server", "-accept", "127.0.0.1:0", "-naccept", "1", "-crlf"]
    command += ["-tls1_3", "-cert", str(tmp_path / "cert.pem"), "-key", str(tmp_path / "key.pem")]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        server = _OpensslServer(0, process.stdin, process.stdout)
        server.port = int(server.line_with(b"ACCEPT").rsplit(b":", 1)[1])
        yield server
    finally:
        process.kill()
        process.wait()


@pytest.mark.machine_may_lack("the openssl command", when=shutil.which("openssl") is None)
async def test_a_tls_key_update_mid_answer_neither_cuts_nor_stalls_it(
    certificate_authority: trustme.CA, openssl_server: _OpensslServer
) -> None:
    """A TLS 1.3 KeyUpdate asking for ours, mid-answer (OpenSSL's own server, its ``K``).

    The reader decrypts on with the server's new keys and sends our KeyUpdate
    while it reads: the answer comes whole, and the next request on the same
    connection (sent under our new keys, after that KeyUpdate) is answered.
    """
    server = openssl_server

    def event(word: str | None) -> bytes:
        delta = {"content": word} if word else {}
        choice = {"index": 0, "delta": delta, "finish_reason": None if word else "stop"}
        return _sse_line_chunk(json.dumps({"choices": [choice]}))

    def answer(words: list[str], key_update_after: int | None) -> None:
        server.line_with(b"POST /v1/chat/completions")
        time.sleep(0.2)
        server.say(
            b"HTTP/1.1 200 OK\ncontent-type: text/event-stream\ntransfer-encoding: chunked\n\n"
        )
        for i, word in enumerate(words):
            server.say(event(word))
            if i == key_update_after:
                server.say(b"K\n")
        server.say(event(None) + _sse_line_chunk("[DONE]") + b"0\n\n")

    request = ModelRequest(model="openai:m", messages=HELLO)
    async with _tls_gateway(f"https://127.0.0.1:{server.port}", certificate_authority) as gateway:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, answer, ["one", "two", "three"], 0)
            first = await gateway.call(request)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, answer, ["again"], None)
            again = await gateway.call(request)
    assert first.text == "onetwothree"
    assert again.text == "again"


async def test_fed_bodies_are_read_in_rounds_a_period_apart(server: ProviderServer) -> None:
    """S-PROF-6: with ``read_rounds_s`` (a gateway process's ``TEXT_BATCH_S``), a stream whose
    chunks come every 20 ms is read in rounds at least that period apart, each taking what
    came since the last; every piece arrives, in order."""
    import threading

    words = [f"w{i}" for i in range(12)]
    gates = [threading.Event() for _ in words]
    paced = _streamed(" ".join(words))
    server.enqueue(
        CannedResponse(
            headers=paced.headers,
            chunks=paced.chunks,
            holds=tuple((i, gate) for i, gate in enumerate(gates) if i),
        )
    )

    def release() -> None:
        for gate in gates[1:]:
            time.sleep(0.02)
            gate.set()

    pieces: list[tuple[float, str]] = []
    config = GatewayConfig.model_validate(
        {"max_retries": 0, "providers": {"openai": {"base_url": server.base_url + "/v1"}}}
    )
    async with ModelGateway(config, env={}, read_rounds_s=0.1) as gateway:
        pacer = threading.Thread(target=release)
        pacer.start()
        try:
            result = await gateway.call(
                ModelRequest(model="openai:m", messages=HELLO),
                lambda text: pieces.append((time.monotonic(), text)),
            )
        finally:
            for gate in gates:
                gate.set()
            pacer.join()
    assert "".join(text for _, text in pieces) == result.text == "".join(words)
    # A piece per round, each round a period after the last (the first piece may come
    # with the response's head, before any round): not a read per chunk.
    rounds = [came for came, _ in pieces[1:]]
    assert len(rounds) >= 2
    gaps = [later - earlier for earlier, later in itertools.pairwise(rounds)]
    assert all(gap >= 0.09 for gap in gaps), gaps
