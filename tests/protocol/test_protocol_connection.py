"""The connection state machine (``protocol/_connection.py``): who may say what, when.

The invariants under test, from the module docstring, DESIGN.md ("Processes
and trust": every frame from a worker is validated) and SPEC S-POL-4:

- C1 The role/state table below (written out independently of the code's
  ``_TRANSITIONS``): the worker speaks first (``hello``), the supervisor
  answers (``welcome``), and only then may either send anything else; after
  ``shutdown`` the supervisor starts nothing new (no request, heartbeat or
  second shutdown) but may answer or cancel what is in flight, while the worker
  may still request (a request can cross the shutdown on the full-duplex
  pipes), answer, report events and heartbeat. Everything outside the table is a
  ``RemoteProtocolError`` when the peer sends it (``receive_data``) and a
  ``LocalProtocolError`` when we try to (``send``: our bug, never to be taken
  for a dead peer).
- C2 S-POL-4: no worker->supervisor message requests a spawn: a frame whose
  type belongs to the other direction or to nobody, a ``request`` whose
  method is outside ``WORKER_REQUEST_METHODS`` and an ``event`` whose name is
  outside ``WORKER_EVENT_NAMES`` are rejected; so are a supervisor request
  outside ``SUPERVISOR_REQUEST_METHODS``, and params or data that do not fit
  their model (named by field).
- C3 A protocol version mismatch in ``hello`` or ``welcome`` fails with both
  versions named.
- C4 ``response``/``error``/``progress`` name a request the receiver sent and
  has not seen answered; request ids are fresh while pending; at most
  ``max_pending_requests`` are pending per sender (``.limit``).
- C5 EOF at a frame boundary is ``ConnectionClosed``; EOF inside a frame is a
  ``RemoteProtocolError``; a frame body that is not a map is one too.
- C6 Any bytes, for either role in any state, give messages or a
  ``RemoteProtocolError``; after a ``ProtocolError`` every later call raises it
  again (the connection is poisoned, state ``ERROR``).
"""

from __future__ import annotations

import re
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from protocol import (
    FLOOD,
    KERNEL_ECHO,
    KERNEL_SLEEP,
    PROCESS_GROUP,
    PROTOCOL_VERSION,
    SUPERVISOR_METHODS,
    SUPERVISOR_REQUEST_METHODS,
    TOOL_STARTED,
    WORKER_EVENT_NAMES,
    WORKER_EVENTS,
    WORKER_METHODS,
    WORKER_REQUEST_METHODS,
    AgentRunSpec,
    AllocateParams,
    BurnCpuParams,
    Cancel,
    ChatMessage,
    Connection,
    ConnectionClosed,
    ConnectionState,
    CoordinatorMessage,
    CrashParams,
    EchoParams,
    EchoRequest,
    ErrorReply,
    Event,
    FloodItem,
    FloodParams,
    ForbiddenParams,
    FrameLimits,
    HangParams,
    Heartbeat,
    Hello,
    InfoParams,
    KernelEchoRequest,
    LocalProtocolError,
    McpToolCall,
    MemoryHeld,
    Message,
    MessageAppended,
    ModelRequest,
    PermissionCheck,
    ProcessGroupStarted,
    Progress,
    ProtocolError,
    RemoteProtocolError,
    Response,
    Role,
    Shutdown,
    SleepParams,
    SteerMessage,
    SupervisorRequest,
    ToolFinished,
    ToolStarted,
    UserQuestion,
    Welcome,
    WorkerRequest,
    WorkflowActorDeclaration,
    WorkflowAnswerCheck,
    WorkflowAsk,
    WorkflowEscalation,
    WorkflowScriptSpec,
    encode_frame,
)

S, W = Role.SUPERVISOR, Role.WORKER
AWAIT_HELLO = ConnectionState.AWAIT_HELLO
AWAIT_WELCOME = ConnectionState.AWAIT_WELCOME
OPEN = ConnectionState.OPEN
CLOSING = ConnectionState.CLOSING
ERROR = ConnectionState.ERROR
_HEADER = struct.Struct(">I")

WORKER_TYPES = {"hello", "request", "response", "error", "progress", "event", "heartbeat"}
SUPERVISOR_TYPES = {
    "welcome",
    "request",
    "response",
    "error",
    "progress",
    "cancel",
    "heartbeat",
    "shutdown",
}
ALL_TYPES = sorted(WORKER_TYPES | SUPERVISOR_TYPES)

#: C1, the spec: (state, sender) -> message types it may send then.
ALLOWED: dict[tuple[ConnectionState, Role], set[str]] = {
    (AWAIT_HELLO, W): {"hello"},
    (AWAIT_WELCOME, S): {"welcome"},
    (OPEN, W): {"request", "response", "error", "progress", "event", "heartbeat"},
    (OPEN, S): {"request", "response", "error", "progress", "cancel", "heartbeat", "shutdown"},
    # Full duplex: a worker request may cross the shutdown on the wire, and the
    # supervisor may still answer or cancel what is in flight.
    (CLOSING, W): {"request", "response", "error", "progress", "event", "heartbeat"},
    (CLOSING, S): {"response", "error", "progress", "cancel"},
}
NEXT_STATE = {"hello": AWAIT_WELCOME, "welcome": OPEN, "shutdown": CLOSING}


def _hello(version: int = PROTOCOL_VERSION) -> Hello:
    return Hello(
        protocol_version=version, worker_id="w-1", pid=4242, pgid=4242, spawn_mode="zygote"
    )


def _welcome(version: int = PROTOCOL_VERSION) -> Welcome:
    return Welcome(protocol_version=version, worker_id="w-1")


def _request(sender: Role, request_id: int) -> Message:
    if sender is W:
        return EchoRequest(id=request_id, params=EchoParams(value={"x": 1}))
    return KernelEchoRequest(id=request_id, params=EchoParams(value={"prompt": "hi"}))


def _deliver(src: Connection, dst: Connection, message: Message) -> None:
    assert dst.receive_data(src.send(message)) == [message]


def _pair(state: ConnectionState, **kwargs: Any) -> dict[Role, Connection]:
    """Both ends in ``state``; from OPEN on, each side has request 7 pending at the other."""
    pair = {S: Connection(S, **kwargs), W: Connection(W, **kwargs)}
    if state is AWAIT_HELLO:
        return pair
    _deliver(pair[W], pair[S], _hello())
    if state is AWAIT_WELCOME:
        return pair
    _deliver(pair[S], pair[W], _welcome())
    _deliver(pair[S], pair[W], _request(S, 7))
    _deliver(pair[W], pair[S], _request(W, 7))
    if state is CLOSING:
        _deliver(pair[S], pair[W], Shutdown(reason="done"))
    assert pair[S].state is pair[W].state is state
    return pair


def _sample(sender: Role, kind: str) -> Message:
    """One message of type ``kind`` as ``sender`` would build it (answers go to id 7)."""
    samples: dict[str, Message] = {
        "hello": _hello(),
        "welcome": _welcome(),
        "request": _request(sender, 8),
        "response": Response(id=7, result={"ok": True}),
        "error": ErrorReply(id=7, code="tool_failed", message="boom"),
        "progress": Progress(id=7, data={"delta": "he"}),
        "event": TOOL_STARTED.event_for(ToolStarted(call_id="c1", name="Read")),
        "cancel": Cancel(id=7),
        "shutdown": Shutdown(reason="done"),
        "heartbeat": Heartbeat(seq=3),
    }
    return samples[kind]


def _frame(message: BaseModel | dict[str, Any]) -> bytes:
    raw = message.model_dump() if isinstance(message, BaseModel) else message
    return encode_frame(raw)


# -- C1: the role/state table ----------------------------------------------------

_STATES = [AWAIT_HELLO, AWAIT_WELCOME, OPEN, CLOSING]


@pytest.mark.parametrize("kind", ALL_TYPES)
@pytest.mark.parametrize("sender", [W, S], ids=lambda r: r.value)
@pytest.mark.parametrize("state", _STATES, ids=lambda s: s.value)
def test_c1_who_may_send_what_when(state: ConnectionState, sender: Role, kind: str) -> None:
    """C1: each (state, sender, type) is allowed exactly when the table says so, on both ends."""
    pair = _pair(state)
    src, dst = pair[sender], pair[sender.peer]
    message = _sample(sender, kind)
    if kind in ALLOWED.get((state, sender), set()):
        assert dst.receive_data(src.send(message)) == [message]
        assert src.state is dst.state is NEXT_STATE.get(kind, state)
        return
    # The peer sends it: rejected.
    own_types = WORKER_TYPES if sender is W else SUPERVISOR_TYPES
    expected = (
        f"{sender.value} may not send {kind!r} while the connection is {state.value}"
        if kind in own_types
        else f"message type {kind!r} is not part of the {sender.value}->"
        f"{sender.peer.value} protocol"
    )
    with pytest.raises(RemoteProtocolError, match=re.escape(expected)):
        dst.receive_data(_frame(message))
    assert dst.state is ERROR
    # We try to send it ourselves: local misuse, rejected too, and nothing is produced.
    with pytest.raises(LocalProtocolError, match="may not send"):
        src.send(message)
    assert src.state is ERROR


def test_c1_second_hello_is_rejected() -> None:
    """C1: a worker says hello once; a second one (after welcome too) is a violation."""
    for state in (AWAIT_WELCOME, OPEN):
        pair = _pair(state)
        with pytest.raises(RemoteProtocolError, match="may not send 'hello'"):
            pair[S].receive_data(_frame(_hello()))


def test_c1_nothing_before_hello_not_even_welcome() -> None:
    """C1: the worker speaks first; a welcome it did not ask for is a violation."""
    worker = Connection(W)
    with pytest.raises(RemoteProtocolError, match="may not send 'welcome' while the connection is"):
        worker.receive_data(_frame(_welcome()))


def test_c1_after_shutdown_the_worker_still_answers_and_the_supervisor_starts_nothing() -> None:
    """C1: after shutdown the worker answers; the supervisor starts no new conversation."""
    pair = _pair(CLOSING)
    _deliver(pair[W], pair[S], Progress(id=7, data={"delta": "partial"}))
    _deliver(pair[W], pair[S], PROCESS_GROUP.event_for(ProcessGroupStarted(pgid=77)))
    _deliver(pair[W], pair[S], Response(id=7, result="final"))
    assert pair[S].pending_requests(S) == frozenset()
    assert pair[S].state is CLOSING
    for message in (Heartbeat(seq=1), _request(S, 9), Shutdown()):
        with pytest.raises(LocalProtocolError, match="supervisor may not send"):
            _pair(CLOSING)[S].send(message)
    assert pair[S].receive_data(b"") == [ConnectionClosed()]


def test_c1_a_request_crossing_shutdown_is_not_a_violation() -> None:
    """C1: the pipes are full duplex; what the worker sent before it saw shutdown is legal."""
    pair = _pair(OPEN)
    in_flight = pair[W].send(_request(W, 8))  # worker: OPEN, legal
    shutdown = pair[S].send(Shutdown(reason="done"))  # at the same time
    assert pair[W].receive_data(shutdown) == [Shutdown(reason="done")]
    pair[S].receive_data(in_flight)


def test_c1_worker_cannot_send_a_request_outside_its_methods() -> None:
    """C1/S-POL-4, local misuse: a worker cannot even produce a request the schema forbids."""
    worker = _pair(OPEN)[W]
    with pytest.raises(LocalProtocolError):
        worker.send(KERNEL_ECHO.request_for(8, EchoParams(value="child")))


# -- C2: S-POL-4, nothing from a worker spawns -----------------------------------


@pytest.mark.parametrize(
    "tag",
    ["spawn", "spawn_worker", "spawn_agent", "delegate", "fork", "welcome", "shutdown", "cancel"],
)
def test_c2_worker_frames_of_foreign_or_unknown_type_are_rejected(tag: str) -> None:
    """S-POL-4: a worker frame typed as a spawn (or as a supervisor message) is a violation."""
    supervisor = _pair(OPEN)[S]
    with pytest.raises(
        RemoteProtocolError, match=r"is not part of the worker->supervisor protocol"
    ):
        supervisor.receive_data(_frame({"type": tag, "id": 9, "worker_id": "child"}))
    assert supervisor.state is ERROR


@settings(max_examples=100, deadline=None)
@given(
    tag=st.one_of(
        st.text(max_size=20).filter(lambda t: t not in WORKER_TYPES),
        st.none(),
        st.integers(-(2**63), 2**64 - 1),
        st.binary(max_size=8),
        st.booleans(),
        st.floats(allow_nan=False),
    ),
    role=st.sampled_from([S, W]),
)
def test_c2_any_other_type_tag_is_rejected(tag: Any, role: Role) -> None:
    """C2: a tag (or a missing/non-string one) outside the peer's union is a violation."""
    receiver = _pair(OPEN)[role]
    peer_types = WORKER_TYPES if role is S else SUPERVISOR_TYPES
    if tag in peer_types:
        return  # only possible for role W, where the tag is a supervisor type
    with pytest.raises(RemoteProtocolError, match="is not part of the"):
        receiver.receive_data(_frame({"type": tag}))
    with pytest.raises(RemoteProtocolError, match="is not part of the"):
        _pair(OPEN)[role].receive_data(_frame({"id": 1}))  # no tag at all


@pytest.mark.parametrize("tag", ["hello", "event", "spawn", "spawned"])
def test_c2_supervisor_frames_of_worker_or_unknown_type_are_rejected(tag: str) -> None:
    """C1: a supervisor cannot say hello or report events; unknown types are violations."""
    worker = _pair(OPEN)[W]
    with pytest.raises(
        RemoteProtocolError, match=r"is not part of the supervisor->worker protocol"
    ):
        worker.receive_data(_frame({"type": tag, "name": "x"}))


@settings(max_examples=100, deadline=None)
@given(method=st.text(max_size=40).filter(lambda m: m not in WORKER_REQUEST_METHODS))
def test_c2_worker_request_methods_outside_the_list_are_rejected(method: str) -> None:
    """S-POL-4: a worker may request only ``WORKER_REQUEST_METHODS`` of its supervisor."""
    supervisor = _pair(OPEN)[S]
    with pytest.raises(RemoteProtocolError, match=r"invalid 'request' message from worker: method"):
        supervisor.receive_data(_frame({"type": "request", "id": 8, "method": method}))
    assert supervisor.pending_requests(W) == frozenset({7})


#: One valid params value of each method of the table.
_EXAMPLE_PARAMS: dict[str, BaseModel] = {
    "supervisor.echo": EchoParams(value=[1, "two", None]),
    "model.call": ModelRequest(model="scripted:x"),
    "permission.check": PermissionCheck(tool="Bash", input={"command": "ls"}),
    "coordinator.message": CoordinatorMessage(text="halfway there"),
    "mcp.call_tool": McpToolCall(name="mcp__s__t", arguments={"a": 1}),
    "user.question": UserQuestion(question="which?", options=("a", "b")),
    "workflow.declare_actor": WorkflowActorDeclaration(name="critic", system="You review."),
    "workflow.ask": WorkflowAsk(
        actor_id="actor_1",
        prompt="Review it.",
        schema_name="Verdict",
        json_schema={"type": "object"},
    ),
    "workflow.escalate": WorkflowEscalation(question="Which release branch?"),
}


@pytest.mark.parametrize("method", WORKER_REQUEST_METHODS)
def test_c2_worker_request_methods_in_the_list_are_accepted(method: str) -> None:
    """S-POL-4: the listed methods are exactly what goes through, each with typed params."""
    pair = _pair(OPEN)
    spec = WORKER_METHODS[method]
    _deliver(pair[W], pair[S], spec.request_for(8, _EXAMPLE_PARAMS[method]))


@pytest.mark.parametrize("method", WORKER_REQUEST_METHODS)
def test_c2_worker_request_params_of_the_wrong_shape_are_rejected(method: str) -> None:
    """S-POL-4: a listed method with params that do not fit its model is a protocol
    violation, named by the field, exactly like an unknown method."""
    supervisor = _pair(OPEN)[S]
    raw = {"type": "request", "id": 8, "method": method, "params": {"unexpected": 1}}
    with pytest.raises(RemoteProtocolError, match=r"invalid 'request' message from worker: params"):
        supervisor.receive_data(_frame(raw))


#: One valid params value of each method of the supervisor's table.
_EXAMPLE_COMMAND_PARAMS: dict[str, BaseModel] = {
    "echo": EchoParams(value={"nested": [1, "two", None]}),
    "sleep": SleepParams(seconds=0.5),
    "allocate": AllocateParams(mb=64, step_mb=8),
    "burn_cpu": BurnCpuParams(seconds=1),
    "crash": CrashParams(how="signal", signal="SIGTERM"),
    "hang": HangParams(seconds=3),
    "flood": FloodParams(count=10, size=3),
    "forbidden": ForbiddenParams(kind="garbage"),
    "info": InfoParams(),
    "ask_supervisor": EchoParams(value="up"),
    "agent.run": AgentRunSpec(
        agent_id="a1",
        system="s",
        prompt="go",
        history=(ChatMessage(role="user", content="hi"),),
        tools=("Read",),
        cwd="/tmp",
    ),
    "agent.steer": SteerMessage(text="also check the tests"),
    "workflow.run": WorkflowScriptSpec(
        source="x = 1", filename="w.py", run_id="r1", cwd="/tmp", model="m", inputs={"n": 2}
    ),
    "workflow.check_answer": WorkflowAnswerCheck(check_id=0, text='{"a": 1}'),
}


@pytest.mark.parametrize("method", SUPERVISOR_REQUEST_METHODS)
def test_c2_supervisor_request_methods_in_the_list_are_accepted(method: str) -> None:
    """C2: the supervisor's methods go through, each with typed params."""
    pair = _pair(OPEN)
    spec = SUPERVISOR_METHODS[method]
    _deliver(pair[S], pair[W], spec.request_for(8, _EXAMPLE_COMMAND_PARAMS[method]))


@settings(max_examples=100, deadline=None)
@given(method=st.text(max_size=40).filter(lambda m: m not in SUPERVISOR_REQUEST_METHODS))
def test_c2_supervisor_request_methods_outside_the_list_are_rejected(method: str) -> None:
    """C2: the worker serves only ``SUPERVISOR_REQUEST_METHODS``; anything else is a violation."""
    worker = _pair(OPEN)[W]
    with pytest.raises(
        RemoteProtocolError, match=r"invalid 'request' message from supervisor: method"
    ):
        worker.receive_data(_frame({"type": "request", "id": 8, "method": method, "params": {}}))


@pytest.mark.parametrize("method", SUPERVISOR_REQUEST_METHODS)
def test_c2_supervisor_request_params_of_the_wrong_shape_are_rejected(method: str) -> None:
    """C2: a bad param is refused where the worker decodes the frame, named by field."""
    worker = _pair(OPEN)[W]
    raw = {"type": "request", "id": 8, "method": method, "params": {"unexpected": 1}}
    with pytest.raises(
        RemoteProtocolError, match=r"invalid 'request' message from supervisor: params"
    ):
        worker.receive_data(_frame(raw))


def test_c2_supervisor_request_is_not_validated_twice_on_send() -> None:
    """C2: the supervisor's params were validated when built; ``request_for`` wraps them
    as they are (the same object goes out), and refuses a model of another method."""
    params = SleepParams(seconds=1)
    request = KERNEL_SLEEP.request_for(8, params)
    assert request.params is params
    with pytest.raises(TypeError, match="sleep takes SleepParams, not EchoParams"):
        KERNEL_SLEEP.request_for(9, EchoParams())  # type: ignore[arg-type]


#: One valid data value of each event of the table.
_EXAMPLE_EVENT_DATA: dict[str, BaseModel] = {
    "message": MessageAppended(message=ChatMessage(role="assistant", content="done")),
    "tool.started": ToolStarted(call_id="c1", name="Bash", input={"command": "ls"}),
    "tool.finished": ToolFinished(call_id="c1", name="Bash", is_error=False, output_chars=12),
    "process_group": ProcessGroupStarted(pgid=4321),
    "fault.memory": MemoryHeld(held_bytes=16 << 20),
    "flood": FloodItem(seq=3, payload="xxx"),
}


@pytest.mark.parametrize("name", WORKER_EVENT_NAMES)
def test_c2_worker_events_in_the_table_are_accepted(name: str) -> None:
    """C2: every event of ``WORKER_EVENTS`` goes through with its typed data."""
    pair = _pair(OPEN)
    _deliver(pair[W], pair[S], WORKER_EVENTS[name].event_for(_EXAMPLE_EVENT_DATA[name]))


@settings(max_examples=100, deadline=None)
@given(name=st.text(max_size=40).filter(lambda n: n not in WORKER_EVENT_NAMES))
def test_c2_worker_events_outside_the_table_are_rejected(name: str) -> None:
    """C2: an event name the table lacks is a protocol violation naming ``name``."""
    supervisor = _pair(OPEN)[S]
    with pytest.raises(RemoteProtocolError, match=r"invalid 'event' message from worker: name"):
        supervisor.receive_data(_frame({"type": "event", "name": name, "data": {}}))
    assert supervisor.state is ERROR


@pytest.mark.parametrize("name", WORKER_EVENT_NAMES)
def test_c2_worker_event_data_of_the_wrong_shape_is_rejected(name: str) -> None:
    """C2: an event whose data does not fit its model is a violation named by field."""
    supervisor = _pair(OPEN)[S]
    raw = {"type": "event", "name": name, "data": {"unexpected": 1}}
    with pytest.raises(RemoteProtocolError, match=r"invalid 'event' message from worker: data"):
        supervisor.receive_data(_frame(raw))


# -- C3: protocol versions --------------------------------------------------------

_other_versions = st.integers(-(2**63), 2**64 - 1).filter(lambda v: v != PROTOCOL_VERSION)


def _names_both(text: str, sender: Role, theirs: int) -> bool:
    return bool(
        re.search(rf"{sender.value} speaks version {theirs}\b", text)
        and re.search(rf"{sender.peer.value} speaks version {PROTOCOL_VERSION}\b", text)
    )


@settings(max_examples=50, deadline=None)
@given(version=_other_versions)
def test_c3_hello_version_mismatch_names_both_versions(version: int) -> None:
    """C3: the supervisor refuses a hello of another version and says which two."""
    supervisor = Connection(S)
    with pytest.raises(RemoteProtocolError, match="version mismatch") as exc_info:
        supervisor.receive_data(_frame(_hello(version)))
    assert _names_both(str(exc_info.value), W, version), str(exc_info.value)
    assert supervisor.state is ERROR
    with pytest.raises(LocalProtocolError, match="version mismatch"):
        Connection(W).send(_hello(version))


@settings(max_examples=50, deadline=None)
@given(version=_other_versions)
def test_c3_welcome_version_mismatch_names_both_versions(version: int) -> None:
    """C3: the worker refuses a welcome of another version and says which two."""
    pair = _pair(AWAIT_WELCOME)
    with pytest.raises(RemoteProtocolError, match="version mismatch") as exc_info:
        pair[W].receive_data(_frame(_welcome(version)))
    assert _names_both(str(exc_info.value), S, version), str(exc_info.value)
    assert pair[W].state is ERROR
    with pytest.raises(LocalProtocolError, match="version mismatch"):
        pair[S].send(_welcome(version))


# -- C4: request ids --------------------------------------------------------------

_ids = st.integers(0, 2**64 - 1)
_answer_kinds = st.sampled_from(["response", "error", "progress"])


def _answer(kind: str, request_id: int) -> Message:
    if kind == "response":
        return Response(id=request_id, result=None)
    if kind == "error":
        return ErrorReply(id=request_id, code="c", message="m")
    return Progress(id=request_id)


@settings(max_examples=100, deadline=None)
@given(
    sender=st.sampled_from([S, W]),
    kind=_answer_kinds,
    asked=st.sets(_ids, max_size=5),
    answered=_ids,
)
def test_c4_answers_to_ids_never_asked_are_rejected(
    sender: Role, kind: str, asked: set[int], answered: int
) -> None:
    """C4: a response/error/progress must name a pending request of the receiver."""
    pair = _pair(OPEN)
    for request_id in asked - {7}:
        _deliver(pair[sender.peer], pair[sender], _request(sender.peer, request_id))
    pending = asked | {7}
    message = _answer(kind, answered)
    if answered in pending:
        _deliver(pair[sender], pair[sender.peer], message)
        return
    with pytest.raises(RemoteProtocolError, match=rf"for request id {answered},"):
        pair[sender.peer].receive_data(_frame(message))
    with pytest.raises(LocalProtocolError, match=rf"for request id {answered},"):
        pair[sender].send(message)


@pytest.mark.parametrize("final", ["response", "error"])
@pytest.mark.parametrize("sender", [S, W], ids=lambda r: r.value)
def test_c4_a_request_is_answered_once_progress_only_before(final: str, sender: Role) -> None:
    """C4: progress any number of times, then one final answer; nothing for it afterwards."""
    pair = _pair(OPEN)
    for _ in range(3):
        _deliver(pair[sender], pair[sender.peer], Progress(id=7, data={"n": 1}))
    _deliver(pair[sender], pair[sender.peer], _answer(final, 7))
    assert 7 not in pair[sender.peer].pending_requests(sender.peer)
    for late in ("response", "error", "progress"):
        with pytest.raises(RemoteProtocolError, match="for request id 7,"):
            _pair_after_answer(sender, final)[sender.peer].receive_data(_frame(_answer(late, 7)))


def _pair_after_answer(sender: Role, final: str) -> dict[Role, Connection]:
    pair = _pair(OPEN)
    _deliver(pair[sender], pair[sender.peer], _answer(final, 7))
    return pair


@settings(max_examples=50, deadline=None)
@given(sender=st.sampled_from([S, W]), request_id=_ids)
def test_c4_request_ids_are_fresh_while_pending(sender: Role, request_id: int) -> None:
    """C4: a pending id cannot be reused; once answered it may be used again."""
    pair = _pair(OPEN)
    if request_id != 7:
        _deliver(pair[sender], pair[sender.peer], _request(sender, request_id))
    with pytest.raises(RemoteProtocolError, match=rf"reused request id {request_id} "):
        _pair_with(sender, request_id)[sender.peer].receive_data(
            _frame(_request(sender, request_id))
        )
    with pytest.raises(LocalProtocolError, match=rf"reused request id {request_id} "):
        _pair_with(sender, request_id)[sender].send(_request(sender, request_id))
    _deliver(pair[sender.peer], pair[sender], _answer("response", request_id))
    _deliver(pair[sender], pair[sender.peer], _request(sender, request_id))


def _pair_with(sender: Role, request_id: int) -> dict[Role, Connection]:
    pair = _pair(OPEN)
    if request_id != 7:
        _deliver(pair[sender], pair[sender.peer], _request(sender, request_id))
    return pair


def _open_pair(**kwargs: Any) -> dict[Role, Connection]:
    """Both ends OPEN with nothing pending."""
    pair = {S: Connection(S, **kwargs), W: Connection(W, **kwargs)}
    _deliver(pair[W], pair[S], _hello())
    _deliver(pair[S], pair[W], _welcome())
    return pair


@settings(max_examples=30, deadline=None)
@given(sender=st.sampled_from([S, W]), limit=st.integers(1, 12))
def test_c4_max_pending_requests_is_enforced_and_named(sender: Role, limit: int) -> None:
    """C4: ``max_pending_requests`` per sender; one more is ``.limit == "max_pending_requests"``."""
    pairs = [_open_pair(max_pending_requests=limit) for _ in range(2)]
    for pair in pairs:
        for request_id in range(limit):
            _deliver(pair[sender], pair[sender.peer], _request(sender, request_id))
    # The peer sends one too many ...
    with pytest.raises(RemoteProtocolError) as exc_info:
        pairs[0][sender.peer].receive_data(_frame(_request(sender, limit)))
    assert exc_info.value.limit == "max_pending_requests"
    # ... or we try to (local misuse).
    with pytest.raises(LocalProtocolError) as exc_info:
        pairs[1][sender].send(_request(sender, limit))
    assert exc_info.value.limit == "max_pending_requests"


@pytest.mark.parametrize("sender", [S, W], ids=lambda r: r.value)
def test_c4_answering_frees_a_pending_slot(sender: Role) -> None:
    """C4: the limit counts pending requests, not requests ever made."""
    pair = _pair(OPEN, max_pending_requests=2)  # request 7 already pending both ways
    _deliver(pair[sender], pair[sender.peer], _request(sender, 1))
    with pytest.raises(RemoteProtocolError) as exc_info:
        _pair_full(sender)[sender.peer].receive_data(_frame(_request(sender, 2)))
    assert exc_info.value.limit == "max_pending_requests"
    _deliver(pair[sender.peer], pair[sender], _answer("error", 1))
    _deliver(pair[sender], pair[sender.peer], _request(sender, 2))


def _pair_full(sender: Role) -> dict[Role, Connection]:
    pair = _pair(OPEN, max_pending_requests=2)
    _deliver(pair[sender], pair[sender.peer], _request(sender, 1))
    return pair


def test_c4_next_request_id_is_fresh() -> None:
    """C4: ``next_request_id`` never repeats."""
    conn = Connection(W)
    ids = [conn.next_request_id() for _ in range(100)]
    assert len(set(ids)) == 100
    assert all(i >= 0 for i in ids)


# -- C5: EOF and non-map bodies ------------------------------------------------------


@pytest.mark.parametrize("role", [S, W], ids=lambda r: r.value)
@pytest.mark.parametrize("state", _STATES, ids=lambda s: s.value)
def test_c5_eof_at_a_frame_boundary_is_connection_closed(
    role: Role, state: ConnectionState
) -> None:
    """C5: ``b""`` between frames closes the connection; later calls raise ProtocolError.

    Sending is remote (the peer is gone); feeding more bytes is local (only our
    own reader could do that after EOF).
    """
    conn = _pair(state)[role]
    assert conn.receive_data(b"") == [ConnectionClosed()]
    assert conn.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError, match="closed"):
        conn.receive_data(b"")
    with pytest.raises(LocalProtocolError, match="closed"):
        conn.receive_data(_frame(Heartbeat(seq=1)))
    with pytest.raises(RemoteProtocolError, match="closed"):
        conn.send(Heartbeat(seq=1))


@settings(max_examples=60, deadline=None)
@given(role=st.sampled_from([S, W]), data=st.data())
def test_c5_eof_inside_a_frame_is_a_protocol_error(role: Role, data: st.DataObject) -> None:
    """C5: the peer died in the middle of a frame: that is a violation, not a clean close."""
    pair = _pair(OPEN)
    frame = pair[role.peer].send(Heartbeat(seq=data.draw(_ids)))
    cut = data.draw(st.integers(1, len(frame) - 1))
    assert pair[role].receive_data(frame[:cut]) == []
    with pytest.raises(RemoteProtocolError, match="middle of a frame"):
        pair[role].receive_data(b"")
    assert pair[role].state is ERROR


_non_maps = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text()
    | st.binary(),
    lambda children: st.lists(children, max_size=3),
    max_leaves=5,
)


@settings(max_examples=60, deadline=None)
@given(role=st.sampled_from([S, W]), body=_non_maps)
def test_c5_non_map_bodies_are_rejected(role: Role, body: Any) -> None:
    """C5: every message is a msgpack map; any other object is a violation."""
    conn = _pair(OPEN)[role]
    with pytest.raises(RemoteProtocolError, match="not a map"):
        conn.receive_data(encode_frame(body))


def test_c5_frame_limits_apply_to_the_connection() -> None:
    """C5: the connection's FrameLimits guard its input (here ``max_frame_size``)."""
    pair = _pair(OPEN, limits=FrameLimits(max_frame_size=128))
    with pytest.raises(RemoteProtocolError) as exc_info:
        pair[S].receive_data(_HEADER.pack(129))
    assert exc_info.value.limit == "max_frame_size"
    with pytest.raises(LocalProtocolError) as exc_info:
        pair[W].send(FLOOD.event_for(FloodItem(seq=0, payload="x" * 128)))
    assert exc_info.value.limit == "max_frame_size"


@pytest.mark.parametrize("sender", [S, W])
def test_c5_a_message_over_a_limit_is_refused_before_it_changes_anything(sender: Role) -> None:
    """C5: ``send`` refuses an answer too large for a frame without answering the
    request or poisoning the connection, so a smaller answer (an error) can follow."""
    pair = _pair(OPEN, limits=FrameLimits(max_frame_size=128))
    with pytest.raises(LocalProtocolError) as exc_info:
        pair[sender].send(Response(id=7, result="x" * 200))
    assert exc_info.value.limit == "max_frame_size"
    assert pair[sender].state is OPEN and 7 in pair[sender.peer].pending_requests(sender.peer)
    _deliver(pair[sender], pair[sender.peer], ErrorReply(id=7, code="too_large", message="m"))
    assert 7 not in pair[sender.peer].pending_requests(sender.peer)


# -- C6: fuzz, poisoning -----------------------------------------------------------

_MODELS: tuple[type[BaseModel], ...] = (
    Hello,
    WorkerRequest,
    Event,
    Welcome,
    SupervisorRequest,
    Cancel,
    Shutdown,
    Response,
    ErrorReply,
    Progress,
    Heartbeat,
)
_field_names = sorted({name for cls in _MODELS for name in cls.model_fields})
_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
_junk_values = st.recursive(
    _leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)
#: Any tag at all, arrays and maps included (see test_c6_unhashable_type_tag_...).
_tags = st.sampled_from([*ALL_TYPES, "spawn", ""]) | _junk_values
_junk_maps = st.builds(
    lambda tag, fields: {**fields, "type": tag},
    _tags,
    st.dictionaries(st.sampled_from(_field_names) | st.text(max_size=6), _junk_values, max_size=6),
)


def _valid_frames(role: Role) -> st.SearchStrategy[bytes]:
    """Frames the peer of ``role`` could legally send in OPEN (so fuzzing gets past them)."""
    peer_messages: list[Message] = [Heartbeat(seq=1), _answer("progress", 7)]
    if role is S:
        peer_messages.append(FLOOD.event_for(FloodItem(seq=1, payload="e")))
    return st.sampled_from([_frame(m) for m in peer_messages])


def _fuzz_pieces(role: Role) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=40),
        st.binary(max_size=24).map(lambda body: _HEADER.pack(len(body)) + body),
        _junk_maps.map(lambda m: _HEADER.pack(len(b := msgpack.packb(m))) + b),
        _valid_frames(role),
        st.just(b""),
    )


@settings(max_examples=300, deadline=None)
@given(
    role=st.sampled_from([S, W]),
    state=st.sampled_from(_STATES),
    small=st.booleans(),
    data=st.data(),
)
def test_c6_arbitrary_bytes_give_messages_or_protocol_error_then_poison(
    role: Role, state: ConnectionState, small: bool, data: st.DataObject
) -> None:
    """C6: any input in any state: messages or RemoteProtocolError; afterwards only errors."""
    limits = FrameLimits(max_frame_size=160, max_nesting=4, max_str_len=24) if small else None
    conn = _pair(state, limits=limits)[role]
    pieces = data.draw(st.lists(_fuzz_pieces(role), min_size=1, max_size=6), label="pieces")
    error: ProtocolError | None = None
    closed = False
    for piece in pieces:
        if error is not None:
            with pytest.raises(RemoteProtocolError) as again:
                conn.receive_data(piece)
            assert again.value is error
            with pytest.raises(RemoteProtocolError) as again:
                conn.send(Heartbeat(seq=0))
            assert again.value is error
            continue
        if closed:
            with pytest.raises(LocalProtocolError):
                conn.receive_data(piece)
            with pytest.raises(RemoteProtocolError):
                conn.send(Heartbeat(seq=0))
            continue
        try:
            out = conn.receive_data(piece)
        except RemoteProtocolError as exc:
            error = exc
            assert conn.state is ERROR
            continue
        for item in out:
            assert isinstance(item, BaseModel | ConnectionClosed)
        closed = any(isinstance(item, ConnectionClosed) for item in out)


@settings(max_examples=50, deadline=None)
@given(role=st.sampled_from([S, W]), state=st.sampled_from(_STATES), junk=st.binary(min_size=1))
def test_c6_a_poisoned_connection_refuses_valid_traffic(
    role: Role, state: ConnectionState, junk: bytes
) -> None:
    """C6: after the first error even a valid frame or a legal send raises the same error."""
    pair = _pair(state)
    conn = pair[role]
    with pytest.raises(RemoteProtocolError) as first:
        conn.receive_data(_HEADER.pack(len(junk) + 1) + b"\xc1" + junk)  # 0xc1: never used
    assert conn.state is ERROR
    for attempt in (
        lambda: conn.receive_data(_frame(Heartbeat(seq=1))),
        lambda: conn.receive_data(b""),
        lambda: conn.send(Heartbeat(seq=1)),
    ):
        with pytest.raises(RemoteProtocolError) as again:
            attempt()
        assert again.value is first.value


def test_c6_local_misuse_poisons_too() -> None:
    """C6: a refused ``send`` also leaves the connection in ERROR, our error kept as raised."""
    pair = _pair(OPEN)
    with pytest.raises(LocalProtocolError) as first:
        pair[W].send(Response(id=99))
    with pytest.raises(LocalProtocolError) as again:
        pair[W].receive_data(_frame(Heartbeat(seq=1)))
    assert again.value is first.value


@pytest.mark.parametrize("role", [S, W], ids=lambda r: r.value)
@pytest.mark.parametrize("tag", [[1], {"a": 1}, ["hello"]], ids=["array", "map", "array-hello"])
def test_c6_unhashable_type_tag_is_a_protocol_error(role: Role, tag: Any) -> None:
    """C6: a frame whose ``type`` is an array or a map is a violation like any other."""
    conn = _pair(OPEN)[role]
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(_frame({"type": tag}))


def test_c1_welcome_must_answer_the_hello_it_follows() -> None:
    """C1: a welcome naming another worker than the hello did is a violation."""
    supervisor, worker = Connection(S), Connection(W)
    assert supervisor.receive_data(worker.send(_hello())) == [_hello()]
    with pytest.raises(RemoteProtocolError, match="answers the hello of 'w-1'"):
        worker.receive_data(_frame(Welcome(protocol_version=PROTOCOL_VERSION, worker_id="w-2")))
