"""Message models (``protocol/_messages.py``) on the wire, through ``Connection``.

The invariants under test:

- M1 Every message type of both directions survives ``Connection.send`` on one
  role and ``Connection.receive_data`` on the other unchanged, whatever the
  chunking of the bytes, and both ends then agree on state and pending ids.
- M2 Whole conversations (handshake, requests both ways, answers only to ids
  that were asked, events, heartbeats, cancel, shutdown, EOF) round-trip the
  same way.
- M3 A frame with a valid ``type`` tag but a wrong field type, a missing
  required field or an extra field is a ``ProtocolError`` that names the
  message type and the sender.
- M4 (S-POL-4, DESIGN "one level of delegation is a property of the
  boundary") The worker->supervisor schema is exactly the listed message
  types, request methods and events: nothing in it asks for a process to be
  spawned. Each direction's requests, and the worker's events, are one typed
  table each (``WORKER_METHODS``, ``SUPERVISOR_METHODS``, ``WORKER_EVENTS``).
- M5 Every method's params and result, and every event's data, round-trip
  through the codec; a frame whose params or data has a field of the wrong
  type is refused where it is decoded, naming the field.
- M6 (S-SEC-8) The model's JSON that the supervisor walks (a ``tool.started``
  input, a ``permission.check`` input, an ``mcp.call_tool``'s arguments) holds
  at most ``MAX_JSON_CONTAINERS`` maps and arrays, at any shape: one more and
  the worker's own model refuses it, and a frame that carries it anyway is
  refused by the supervisor's decoder, naming the field and the bound.
  Strings and keys are not counted: a 1 MB text or hundreds of keys pass.
"""

from __future__ import annotations

import itertools
import random
import re
import string
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from protocol import (
    MAX_JSON_CONTAINERS,
    PROTOCOL_VERSION,
    SUPERVISOR_METHODS,
    SUPERVISOR_REQUEST_METHODS,
    WORKER_EVENT_NAMES,
    WORKER_EVENTS,
    WORKER_METHODS,
    WORKER_REQUEST_METHODS,
    AgentOutcome,
    AgentRunRequest,
    AgentRunSpec,
    AgentSteerRequest,
    Allocated,
    AllocateParams,
    BurnCpuParams,
    Cancel,
    ChatMessage,
    Connection,
    ConnectionClosed,
    ConnectionState,
    CoordinatorMessage,
    CoordinatorMessageRequest,
    CpuBurned,
    CrashKind,
    CrashParams,
    EchoParams,
    EchoRequest,
    EchoResult,
    ErrorReply,
    Event,
    FaultMemoryEvent,
    Flooded,
    FloodEvent,
    FloodItem,
    FloodParams,
    ForbiddenFrame,
    ForbiddenParams,
    FrameLimits,
    HangParams,
    Heartbeat,
    Hello,
    InfoParams,
    KernelAllocateRequest,
    KernelAskSupervisorRequest,
    KernelBurnCpuRequest,
    KernelCrashRequest,
    KernelEchoRequest,
    KernelFloodRequest,
    KernelForbiddenRequest,
    KernelHangRequest,
    KernelInfoRequest,
    KernelSleepRequest,
    McpToolCall,
    McpToolCallRequest,
    MemoryHeld,
    Message,
    MessageAppended,
    MessageEvent,
    ModelCallRequest,
    ModelRequest,
    NoAnswer,
    PermissionCheck,
    PermissionCheckRequest,
    ProcessGroupEvent,
    ProcessGroupStarted,
    Progress,
    ProtocolError,
    Response,
    Role,
    Shutdown,
    SleepParams,
    Slept,
    SteerMessage,
    SteerReceipt,
    SupervisorMessage,
    SupervisorRequest,
    ToolFinished,
    ToolFinishedEvent,
    ToolStarted,
    ToolStartedEvent,
    Usage,
    UserQuestion,
    UserQuestionRequest,
    Welcome,
    WorkerInfo,
    WorkerMessage,
    WorkerRequest,
    WorkflowActorDeclaration,
    WorkflowAnswerCheck,
    WorkflowAsk,
    WorkflowAskRequest,
    WorkflowCheckAnswerRequest,
    WorkflowCheckResult,
    WorkflowDeclareActorRequest,
    WorkflowEscalateRequest,
    WorkflowEscalation,
    WorkflowRunRequest,
    WorkflowScriptOutcome,
    WorkflowScriptSpec,
    encode_frame,
)

S, W = Role.SUPERVISOR, Role.WORKER

# -- strategies -----------------------------------------------------------------

_chars = st.characters(codec="utf-8")  # no lone surrogates: msgpack cannot encode them
_texts = st.text(_chars, max_size=24)
_ids = st.integers(min_value=0, max_value=2**64 - 1)
_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_scalars = (
    st.none()
    | st.booleans()
    | _ints
    | st.floats(allow_nan=False)  # NaN != NaN would defeat the equality check
    | _texts
    | st.binary(max_size=24)
)
#: msgpack-able values that decode back equal (lists, not tuples; str keys).
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(_chars, max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_params = st.dictionaries(st.text(_chars, max_size=12), _values, max_size=4)
_names = st.text(_chars, min_size=1, max_size=128)
#: JSON values (what a model writes): no bytes.
_json = st.recursive(
    st.none() | st.booleans() | _ints | st.floats(allow_nan=False) | _texts,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(_chars, max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_json_objects = st.dictionaries(st.text(_chars, max_size=12), _json, max_size=4)
_non_blank = st.text(_chars, min_size=1, max_size=24).filter(lambda t: not t.isspace())
_messages = st.builds(ChatMessage, role=st.sampled_from(["user", "assistant"]), content=_texts)
_seconds = st.floats(min_value=0, max_value=1e6)

#: Params of each worker method (S-POL-4: the table is everything a worker may ask).
WORKER_PARAMS: dict[type[BaseModel], st.SearchStrategy[BaseModel]] = {
    EchoRequest: st.builds(EchoParams, value=_json),
    ModelCallRequest: st.builds(
        ModelRequest, model=_texts, messages=st.lists(_messages, max_size=3).map(tuple)
    ),
    PermissionCheckRequest: st.builds(PermissionCheck, tool=_non_blank, input=_json_objects),
    CoordinatorMessageRequest: st.builds(CoordinatorMessage, text=_non_blank),
    McpToolCallRequest: st.builds(McpToolCall, name=_non_blank, arguments=_json_objects),
    UserQuestionRequest: st.builds(
        UserQuestion, question=_non_blank, options=st.lists(_texts, max_size=3).map(tuple)
    ),
    WorkflowDeclareActorRequest: st.builds(
        WorkflowActorDeclaration,
        name=st.none() | _non_blank,
        system=_texts,
        tools=st.none() | st.lists(_non_blank, max_size=3).map(tuple),
        line=st.integers(0, 10_000),
    ),
    WorkflowAskRequest: st.builds(
        WorkflowAsk,
        actor_id=_non_blank,
        prompt=_non_blank,
        schema_name=st.none() | _non_blank,
        json_schema=st.none() | _json_objects,
    ),
    WorkflowEscalateRequest: st.builds(
        WorkflowEscalation, question=_non_blank, options=st.lists(_texts, max_size=3).map(tuple)
    ),
}

hellos = st.builds(
    Hello,
    protocol_version=st.just(PROTOCOL_VERSION),
    worker_id=_texts,
    pid=_ints,
    pgid=_ints,
    spawn_mode=st.sampled_from(["zygote", "exec"]),
    rlimits=st.dictionaries(_texts, st.lists(_ints, min_size=2, max_size=2), max_size=4),
)
welcomes = st.builds(Welcome, protocol_version=st.just(PROTOCOL_VERSION), worker_id=_texts)
#: Params of each supervisor method (the kernel's test commands included).
SUPERVISOR_PARAMS: dict[type[BaseModel], st.SearchStrategy[BaseModel]] = {
    KernelEchoRequest: st.builds(EchoParams, value=_json),
    KernelSleepRequest: st.builds(SleepParams, seconds=_seconds),
    KernelAllocateRequest: st.builds(
        AllocateParams,
        mb=st.floats(min_value=0.5, max_value=1e6),
        step_mb=st.floats(min_value=0.5, max_value=1e3),
        step_delay_s=_seconds,
    ),
    KernelBurnCpuRequest: st.builds(BurnCpuParams, seconds=st.none() | _seconds),
    KernelCrashRequest: st.builds(
        CrashParams,
        how=st.sampled_from(get_args(CrashKind)),
        code=st.integers(0, 255),
        signal=st.sampled_from(["SIGKILL", "SIGTERM", "SIGSEGV", "SIGUSR1"]),
    ),
    KernelHangRequest: st.builds(HangParams, seconds=_seconds),
    KernelFloodRequest: st.builds(
        FloodParams, count=st.integers(0, 10**6), size=st.integers(0, 10**5)
    ),
    KernelForbiddenRequest: st.builds(
        ForbiddenParams, kind=st.sampled_from(get_args(ForbiddenFrame))
    ),
    KernelInfoRequest: st.builds(InfoParams),
    KernelAskSupervisorRequest: st.builds(EchoParams, value=_json),
    AgentRunRequest: st.builds(
        AgentRunSpec,
        agent_id=_non_blank,
        system=_texts,
        prompt=_texts,
        history=st.lists(_messages, max_size=3).map(tuple),
        pending_messages=st.lists(_texts, max_size=2).map(tuple),
        tools=st.lists(_non_blank, max_size=3).map(tuple),
        max_turns=st.integers(1, 100),
        cwd=_texts,
        model=_texts,
    ),
    AgentSteerRequest: st.builds(SteerMessage, text=_non_blank),
    WorkflowRunRequest: st.builds(
        WorkflowScriptSpec,
        source=_texts,
        filename=_non_blank,
        run_id=_non_blank,
        cwd=_texts,
        model=_texts,
        inputs=_json_objects,
        amends=st.none() | _texts,
    ),
    WorkflowCheckAnswerRequest: st.builds(
        WorkflowAnswerCheck, check_id=st.integers(0, 2**31), text=_texts
    ),
}

#: Results of each supervisor method, as a worker answers them.
_floats = st.floats(allow_nan=False, allow_infinity=False)
SUPERVISOR_RESULTS: dict[str, st.SearchStrategy[BaseModel]] = {
    "echo": st.builds(EchoResult, value=_json),
    "sleep": st.builds(Slept, seconds=_seconds),
    "allocate": st.builds(Allocated, allocated_mb=_floats, rss_mb=_floats),
    "burn_cpu": st.builds(CpuBurned, cpu_seconds=_floats),
    "crash": st.builds(NoAnswer),
    "hang": st.builds(Slept, seconds=_seconds),
    "flood": st.builds(Flooded, count=st.integers(0, 10**6)),
    "forbidden": st.builds(NoAnswer),
    "info": st.builds(
        WorkerInfo,
        pid=st.integers(1, 2**22),
        ppid=st.integers(1, 2**22),
        pgid=st.integers(1, 2**22),
        env=st.dictionaries(_texts, _texts, max_size=3),
        rlimits=st.dictionaries(_texts, st.tuples(_ints, _ints), max_size=3),
        fds=st.dictionaries(_texts, _texts, max_size=3),
        rss_mb=_floats,
    ),
    "ask_supervisor": st.builds(EchoResult, value=_json),
    "agent.run": st.builds(
        AgentOutcome,
        text=_texts,
        status=st.sampled_from(["completed", "partial"]),
        turns=st.integers(0, 100),
        tool_calls=st.integers(0, 100),
        usage=st.builds(Usage, input_tokens=st.integers(0, 10**9)),
    ),
    "agent.steer": st.builds(SteerReceipt, delivered=st.booleans(), reason=_texts),
    "workflow.run": st.builds(WorkflowScriptOutcome, value=_json),
    "workflow.check_answer": st.builds(
        WorkflowCheckResult, problem=st.none() | _non_blank.map(lambda text: text[:4000])
    ),
}

#: Data of each worker event.
WORKER_EVENT_DATA: dict[type[BaseModel], st.SearchStrategy[BaseModel]] = {
    MessageEvent: st.builds(MessageAppended, message=_messages),
    ToolStartedEvent: st.builds(ToolStarted, call_id=_texts, name=_texts, input=_json_objects),
    ToolFinishedEvent: st.builds(
        ToolFinished,
        call_id=_texts,
        name=_texts,
        is_error=st.booleans(),
        output_chars=st.integers(0, 10**9),
    ),
    ProcessGroupEvent: st.builds(ProcessGroupStarted, pgid=st.integers(2, 2**22)),
    FaultMemoryEvent: st.builds(MemoryHeld, held_bytes=st.integers(0, 2**40)),
    FloodEvent: st.builds(FloodItem, seq=st.integers(0, 10**9), payload=_texts),
}
events = st.one_of(*(st.builds(cls, data=data) for cls, data in WORKER_EVENT_DATA.items()))
cancels = st.builds(Cancel, id=_ids)
shutdowns = st.builds(Shutdown, reason=_texts)
heartbeats = st.builds(Heartbeat, seq=_ids)


def requests(sender: Role, request_id: int) -> st.SearchStrategy[Message]:
    """A request ``sender`` may make, with the given id."""
    if sender is W:
        return st.one_of(
            *(
                st.builds(cls, id=st.just(request_id), params=params)
                for cls, params in WORKER_PARAMS.items()
            )
        )
    return st.one_of(
        *(
            st.builds(cls, id=st.just(request_id), params=params)
            for cls, params in SUPERVISOR_PARAMS.items()
        )
    )


def answers(kind: str, request_id: int) -> st.SearchStrategy[Message]:
    """A ``response``/``error``/``progress`` for request ``request_id``."""
    if kind == "response":
        return st.builds(Response, id=st.just(request_id), result=_values)
    if kind == "error":
        return st.builds(ErrorReply, id=st.just(request_id), code=_texts, message=_texts)
    return st.builds(Progress, id=st.just(request_id), data=_json_objects)


def _members(union: Any) -> list[type[BaseModel]]:
    """The message classes of a discriminated union (requests nest one of their own)."""
    args = get_args(union)
    if not args:
        return [union]
    if get_origin(union) is Annotated:
        return _members(args[0])
    return [cls for arg in args for cls in _members(arg)]


def _tags(union: Any) -> set[str]:
    return {member.model_fields["type"].default for member in _members(union)}


WORKER_TAGS = _tags(WorkerMessage)
SUPERVISOR_TAGS = _tags(SupervisorMessage)


def _chunks(data: st.DataObject, wire: bytes) -> list[bytes]:
    """Cut ``wire`` at arbitrary points into non-empty pieces (``b""`` would mean EOF)."""
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=10), label="cuts")
    points = sorted({0, len(wire), *cuts})
    return [wire[a:b] for a, b in itertools.pairwise(points) if b > a]


def _transmit(
    data: st.DataObject, pair: dict[Role, Connection], sender: Role, messages: list[Message]
) -> None:
    """Send ``messages`` from ``sender`` and deliver them to the peer in random pieces."""
    frames = [pair[sender].send(message) for message in messages]
    # ``send`` packs a model's fields directly; the bytes must be model_dump's.
    assert frames == [encode_frame(m.model_dump(mode="python")) for m in messages]
    _deliver(data, pair, sender, b"".join(frames), messages)


def _deliver(
    data: st.DataObject,
    pair: dict[Role, Connection],
    sender: Role,
    wire: bytes,
    messages: list[Message],
) -> None:
    """Feed ``wire`` to the receiver piece by piece; it must yield exactly ``messages``."""
    received: list[Message | ConnectionClosed] = []
    for piece in _chunks(data, wire):
        received += pair[sender.peer].receive_data(piece)
    assert received == messages
    assert [type(m) for m in received] == [type(m) for m in messages]
    # Both ends track the shared state identically (module docstring of _connection).
    assert pair[S].state is pair[W].state
    for role in Role:
        assert pair[S].pending_requests(role) == pair[W].pending_requests(role)


def _answering(pair: dict[Role, Connection], welcome: Welcome) -> Welcome:
    """``welcome`` addressed to the worker whose hello the supervisor received."""
    return welcome.model_copy(update={"worker_id": pair[S].worker_id})


def _handshake(data: st.DataObject, pair: dict[Role, Connection]) -> None:
    _transmit(data, pair, W, [data.draw(hellos, label="hello")])
    _transmit(data, pair, S, [_answering(pair, data.draw(welcomes, label="welcome"))])
    assert pair[S].state is ConnectionState.OPEN


# -- M1: every message type round-trips -----------------------------------------

_EVERY_TYPE = [(W, tag) for tag in sorted(WORKER_TAGS)] + [
    (S, tag) for tag in sorted(SUPERVISOR_TAGS)
]


def test_m1_the_type_lists_cover_both_unions() -> None:
    """M1: the parametrization below covers every member of both unions."""
    assert len(_EVERY_TYPE) == len(get_args(get_args(WorkerMessage)[0])) + len(
        get_args(get_args(SupervisorMessage)[0])
    )


@pytest.mark.parametrize(
    ("sender", "kind"), _EVERY_TYPE, ids=[f"{s.value}-{k}" for s, k in _EVERY_TYPE]
)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_m1_every_message_type_round_trips_in_any_chunking(
    sender: Role, kind: str, data: st.DataObject
) -> None:
    """M1: ``send`` on one role, ``receive_data`` (random pieces) on the other: same message."""
    pair = {S: Connection(S), W: Connection(W)}
    if kind == "hello":
        _transmit(data, pair, W, [data.draw(hellos)])
        assert pair[S].state is ConnectionState.AWAIT_WELCOME
        return
    _transmit(data, pair, W, [data.draw(hellos)])
    if kind == "welcome":
        _transmit(data, pair, S, [_answering(pair, data.draw(welcomes))])
        assert pair[W].state is ConnectionState.OPEN
        return
    _transmit(data, pair, S, [_answering(pair, data.draw(welcomes))])
    if kind == "request":
        message = data.draw(requests(sender, data.draw(_ids)))
    elif kind in ("response", "error", "progress"):
        # Only answer an id the peer really asked for.
        request_id = data.draw(_ids)
        _transmit(data, pair, sender.peer, [data.draw(requests(sender.peer, request_id))])
        message = data.draw(answers(kind, request_id))
    else:
        message = data.draw(
            {"event": events, "cancel": cancels, "shutdown": shutdowns, "heartbeat": heartbeats}[
                kind
            ]
        )
    _transmit(data, pair, sender, [message])


# -- M2: whole conversations ----------------------------------------------------


def _draw_message(data: st.DataObject, conn: Connection) -> Message:
    """A message ``conn`` may send now: requests with fresh ids, answers to asked ids only."""
    me = conn.our_role
    closing = conn.state is ConnectionState.CLOSING
    if me is W:
        # After shutdown the worker still talks (full duplex: a request may cross it).
        options = ["request", "heartbeat", "event"]
    else:
        # After shutdown the supervisor only answers and cancels what is in flight.
        options = ["cancel"] if closing else ["request", "heartbeat", "cancel", "shutdown"]
    asked = sorted(conn.pending_requests(me.peer))
    if asked:
        options += ["response", "error", "progress"]
    kind = data.draw(st.sampled_from(options), label="kind")
    if kind == "request":
        mine = conn.pending_requests(me)
        request_id = data.draw(_ids.filter(lambda i: i not in mine), label="id")
        return data.draw(requests(me, request_id))
    if kind in ("response", "error", "progress"):
        return data.draw(answers(kind, data.draw(st.sampled_from(asked), label="id")))
    return data.draw(
        {"event": events, "cancel": cancels, "shutdown": shutdowns, "heartbeat": heartbeats}[kind]
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_m2_conversations_round_trip_and_both_ends_agree(data: st.DataObject) -> None:
    """M2: random legal conversations, in bursts cut anywhere, arrive intact on both sides."""
    pair = {S: Connection(S), W: Connection(W)}
    _handshake(data, pair)
    for _ in range(data.draw(st.integers(0, 10), label="bursts")):
        sender = data.draw(st.sampled_from([S, W]), label="sender")
        # Each message is drawn against the sender's state after the previous one.
        burst: list[Message] = []
        wire = b""
        for _ in range(data.draw(st.integers(1, 4), label="burst size")):
            message = _draw_message(data, pair[sender])
            burst.append(message)
            wire += pair[sender].send(message)
            if isinstance(message, Shutdown):
                break
        _deliver(data, pair, sender, wire, burst)
    # End of the conversation: shut down, each side answers what it was asked, EOF.
    if pair[S].state is ConnectionState.OPEN:
        _transmit(data, pair, S, [data.draw(shutdowns)])
    for sender in (W, S):
        final = [
            data.draw(answers("response", request_id))
            for request_id in sorted(pair[sender].pending_requests(sender.peer))
        ]
        if final:
            _transmit(data, pair, sender, final)
    assert pair[S].pending_requests(S) == pair[S].pending_requests(W) == frozenset()
    assert pair[S].receive_data(b"") == [ConnectionClosed()]
    assert pair[S].state is ConnectionState.CLOSED


# -- M3: wrong field types, missing and extra fields -----------------------------

#: field -> what kind of value it takes; ``Response.result`` is Any and takes anything.
_FIELD_KINDS: dict[type[BaseModel], dict[str, str]] = {
    Hello: {
        "protocol_version": "int",
        "worker_id": "str",
        "pid": "int",
        "pgid": "int",
        "spawn_mode": "spawn_mode",
        "rlimits": "rlimits",
        "sandbox": "sandbox",
        "nice": "nice",
        "cgroup_error": "str",
    },
    WorkerRequest: {"id": "id", "method": "worker_method", "params": "dict"},
    Event: {"name": "event_name", "data": "dict"},
    Welcome: {"protocol_version": "int", "worker_id": "str"},
    SupervisorRequest: {"id": "id", "method": "supervisor_method", "params": "dict"},
    Cancel: {"id": "id"},
    Shutdown: {"reason": "str"},
    Response: {"id": "id"},
    ErrorReply: {"id": "id", "code": "str", "message": "str"},
    Progress: {"id": "id", "data": "dict"},
    Heartbeat: {"seq": "id"},
}

# Wrong values, including those a lax validator would coerce ("7", 7.0, True for
# an int; msgpack bin for a str): validation is strict (see also
# test_m3_lax_coercions_are_rejected).
_not_int = st.one_of(
    st.none(),
    st.booleans(),
    st.text(string.ascii_letters, min_size=1, max_size=8),
    _ints.map(str),
    st.floats(),
    st.binary(max_size=8),
    st.lists(_ints, max_size=3),
    st.dictionaries(st.text(max_size=4), _ints, max_size=3),
)
_not_str = st.one_of(
    st.none(),
    st.booleans(),
    st.binary(max_size=8),
    _ints,
    st.floats(),
    st.lists(_texts, max_size=3),
    st.dictionaries(st.text(max_size=4), _texts, max_size=3),
)
_not_dict = st.one_of(
    st.none(), st.booleans(), _ints, st.floats(), _texts, st.binary(), st.lists(_values, max_size=3)
)
# None is a valid sandbox (nothing reported); a report claiming an unknown
# mode, or a number as text, is not (S-SBX-2: the claim is checked strictly).
_not_sandbox = st.one_of(
    st.booleans(),
    _ints,
    _texts,
    st.binary(max_size=8),
    st.lists(_ints, max_size=3),
    st.just({"mode": "jail", "network": "deny", "abi": 7}),
    st.just({"mode": "read-only", "network": "deny", "abi": "7"}),
    st.just({"mode": "read-only", "network": "deny", "abi": 7, "writable": [b"/tmp"]}),
)
_WRONG: dict[str, st.SearchStrategy[Any]] = {
    "sandbox": _not_sandbox,
    "int": _not_int,
    # Out of range but still on the wire (msgpack's ints: as ``_ints``).
    "nice": _not_int
    | st.integers(min_value=20, max_value=2**64 - 1)
    | st.integers(min_value=-(2**63), max_value=-21),
    "id": _not_int | st.integers(min_value=-(2**63), max_value=-1),
    "str": _not_str,
    "event_name": _not_str | _texts.filter(lambda s: s not in WORKER_EVENT_NAMES),
    "supervisor_method": _not_str | _texts.filter(lambda s: s not in SUPERVISOR_REQUEST_METHODS),
    "spawn_mode": _not_str | _texts.filter(lambda s: s not in ("zygote", "exec")),
    "worker_method": _not_str | _texts.filter(lambda s: s not in WORKER_REQUEST_METHODS),
    "dict": _not_dict,
    "rlimits": _not_dict
    | st.dictionaries(
        _texts,
        # Not _not_int alone: its lists of ints include [soft, hard], a valid value.
        st.one_of(
            st.tuples(_not_int, _ints).map(list),
            _not_int.filter(lambda v: not (isinstance(v, list) and len(v) == 2)),
        ),
        min_size=1,
        max_size=2,
    ),
}

_VALID: dict[type[BaseModel], st.SearchStrategy[Any]] = {
    Hello: hellos,
    WorkerRequest: requests(W, 1),
    Event: events,
    Welcome: welcomes,
    SupervisorRequest: requests(S, 1),
    Cancel: cancels,
    Shutdown: shutdowns,
    Response: answers("response", 1),
    ErrorReply: answers("error", 1),
    Progress: answers("progress", 1),
    Heartbeat: heartbeats,
}

#: (sender, model) for every model a role may send.
_SENT_BY = [(W, cls) for cls in (Hello, WorkerRequest, Event)] + [
    (S, cls) for cls in (Welcome, SupervisorRequest, Cancel, Shutdown)
]
_SENT_BY += [(role, cls) for cls in (Response, ErrorReply, Progress, Heartbeat) for role in (S, W)]
_SENT_BY_IDS = [f"{role.value}-{cls.__name__}" for role, cls in _SENT_BY]


def test_m3_field_table_matches_the_models() -> None:
    """M3: the field table below names every field of every model (kept in step)."""
    for cls, kinds in _FIELD_KINDS.items():
        untyped = {"type"} | ({"result"} if cls is Response else set())
        assert set(kinds) | untyped == set(cls.model_fields), cls.__name__


def _receiver_for(cls: type[BaseModel], sender: Role) -> Connection:
    """The peer's connection, in the state where a valid ``cls`` would be accepted."""
    sup, wrk = Connection(S), Connection(W)
    if cls is Hello:
        return sup
    hello = Hello(
        protocol_version=PROTOCOL_VERSION, worker_id="w", pid=1, pgid=1, spawn_mode="exec"
    )
    sup.receive_data(wrk.send(hello))
    if cls is Welcome:
        return wrk
    wrk.receive_data(sup.send(Welcome(protocol_version=PROTOCOL_VERSION, worker_id="w")))
    # Id 1 is pending from the receiver, so a valid answer to it would be accepted.
    receiver = sup if sender is W else wrk
    other = wrk if sender is W else sup
    request: Message = (
        KernelEchoRequest(id=1, params=EchoParams())
        if receiver is sup
        else EchoRequest(id=1, params=EchoParams())
    )
    other.receive_data(receiver.send(request))
    return receiver


def _assert_rejected(cls: type[BaseModel], sender: Role, raw: dict[Any, Any], where: str) -> None:
    receiver = _receiver_for(cls, sender)
    tag = cls.model_fields["type"].default
    with pytest.raises(ProtocolError) as exc_info:
        receiver.receive_data(encode_frame(raw))
    text = str(exc_info.value)
    assert text.startswith(f"invalid {tag!r} message from {sender.value}: {where}"), text
    assert receiver.state is ConnectionState.ERROR


def test_m3_the_valid_baseline_is_accepted() -> None:
    """M3: the states used below accept a valid message (so the rejections are about fields)."""
    for sender, cls in _SENT_BY:
        receiver = _receiver_for(cls, sender)
        kwargs: dict[str, Any] = {"id": 1} if "id" in cls.model_fields else {}
        if cls is Hello:
            message: BaseModel = Hello(
                protocol_version=PROTOCOL_VERSION, worker_id="w", pid=1, pgid=1, spawn_mode="exec"
            )
        elif cls is Welcome:
            message = Welcome(protocol_version=PROTOCOL_VERSION, worker_id="w")
        elif cls is Event:
            message = FloodEvent(data=FloodItem(seq=0, payload="e"))
        elif cls is WorkerRequest:
            message = EchoRequest(id=2, params=EchoParams())
        elif cls is SupervisorRequest:
            message = KernelEchoRequest(id=2, params=EchoParams())
        elif cls is ErrorReply:
            message = ErrorReply(id=1, code="c", message="m")
        elif cls is Heartbeat:
            message = Heartbeat(seq=0)
        else:
            message = cls(**kwargs)
        assert receiver.receive_data(encode_frame(message.model_dump())) == [message]


@pytest.mark.parametrize(("sender", "cls"), _SENT_BY, ids=_SENT_BY_IDS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_m3_wrong_field_type_names_the_message_type(
    sender: Role, cls: type[BaseModel], data: st.DataObject
) -> None:
    """M3: a valid tag with a wrongly typed field is a ProtocolError naming type and field."""
    raw = data.draw(_VALID[cls]).model_dump()
    field = data.draw(st.sampled_from(sorted(_FIELD_KINDS[cls])), label="field")
    raw[field] = data.draw(_WRONG[_FIELD_KINDS[cls][field]], label="wrong value")
    _assert_rejected(cls, sender, raw, field)


_REQUIRED = [(s, c) for s, c in _SENT_BY if any(f.is_required() for f in c.model_fields.values())]


@pytest.mark.parametrize(
    ("sender", "cls"), _REQUIRED, ids=[f"{s.value}-{c.__name__}" for s, c in _REQUIRED]
)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_m3_missing_required_field_names_the_message_type(
    sender: Role, cls: type[BaseModel], data: st.DataObject
) -> None:
    """M3: dropping a required field is a ProtocolError naming type and field."""
    raw = data.draw(_VALID[cls]).model_dump()
    required = sorted(name for name, f in cls.model_fields.items() if f.is_required())
    field = data.draw(st.sampled_from(required), label="field")
    del raw[field]
    _assert_rejected(cls, sender, raw, field)


@pytest.mark.parametrize(("sender", "cls"), _SENT_BY, ids=_SENT_BY_IDS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_m3_extra_field_names_the_message_type(
    sender: Role, cls: type[BaseModel], data: st.DataObject
) -> None:
    """M3: an unknown key next to valid fields (models forbid extras) is a ProtocolError."""
    raw = data.draw(_VALID[cls]).model_dump()
    key = data.draw(
        st.text(_chars, max_size=12).filter(lambda k: k not in cls.model_fields), label="key"
    )
    raw[key] = data.draw(_values, label="value")
    _assert_rejected(cls, sender, raw, "")


@pytest.mark.parametrize(
    ("sender", "raw"),
    [
        (W, {"type": "heartbeat", "seq": "7"}),
        (W, {"type": "heartbeat", "seq": 7.0}),
        (S, {"type": "heartbeat", "seq": True}),
        (W, {"type": "event", "name": b"tool_started"}),
    ],
    ids=["int-from-str", "int-from-float", "int-from-bool", "str-from-bin"],
)
def test_m3_lax_coercions_are_rejected(sender: Role, raw: dict[str, Any]) -> None:
    """M3: a field of the wrong msgpack type is a ProtocolError, even if it could be coerced."""
    cls = Heartbeat if raw["type"] == "heartbeat" else Event
    _assert_rejected(cls, sender, raw, next(k for k in raw if k != "type"))


@pytest.mark.parametrize("pair", [[], [1024], [1, 2, 3]], ids=["empty", "one", "three"])
def test_m3_hello_rlimits_are_soft_hard_pairs(pair: list[int]) -> None:
    """M3: each rlimit a worker reports is exactly ``[soft, hard]``."""
    raw = Hello(
        protocol_version=PROTOCOL_VERSION, worker_id="w", pid=1, pgid=1, spawn_mode="exec"
    ).model_dump()
    raw["rlimits"] = {"RLIMIT_NOFILE": pair}
    _assert_rejected(Hello, W, raw, "rlimits")


# -- M4: the worker's schema (S-POL-4) ------------------------------------------

_SPAWNISH = re.compile(r"spawn|fork|launch|delegat|subagent", re.IGNORECASE)


def test_m4_worker_message_types_are_exactly_these() -> None:
    """S-POL-4/M4: a worker can send only these types; none of them starts a process."""
    assert {
        "hello",
        "request",
        "response",
        "error",
        "progress",
        "event",
        "heartbeat",
    } == WORKER_TAGS
    assert {
        "welcome",
        "request",
        "response",
        "error",
        "progress",
        "cancel",
        "heartbeat",
        "shutdown",
    } == SUPERVISOR_TAGS


def test_m4_the_method_table_is_the_schema() -> None:
    """S-POL-4/M4: every method a worker may send has one request class in its union,
    and one params and one result model in ``WORKER_METHODS``."""
    requests = [cls for cls in _members(WorkerMessage) if issubclass(cls, WorkerRequest)]
    assert {cls.model_fields["method"].default for cls in requests} == set(WORKER_REQUEST_METHODS)
    assert tuple(WORKER_METHODS) == WORKER_REQUEST_METHODS
    for name, spec in WORKER_METHODS.items():
        assert spec.name == name
        assert spec.request in requests
        assert spec.request.model_fields["params"].annotation is spec.params
    assert set(WORKER_PARAMS) == set(requests)


def test_m4_no_worker_request_method_asks_for_a_spawn() -> None:
    """S-POL-4/M4: nothing a worker may request of the supervisor spawns or delegates."""
    assert WORKER_REQUEST_METHODS  # the Literal is non-empty, so the check below means something
    assert [m for m in WORKER_REQUEST_METHODS if _SPAWNISH.search(m)] == []
    assert [t for t in WORKER_TAGS if _SPAWNISH.search(t)] == []


def test_m4_the_supervisor_method_table_is_the_schema() -> None:
    """M4: every method the supervisor may ask has one request class in its union, and
    one params and one result model in ``SUPERVISOR_METHODS``; the kernel's commands too."""
    requests = [cls for cls in _members(SupervisorMessage) if issubclass(cls, SupervisorRequest)]
    assert {cls.model_fields["method"].default for cls in requests} == set(
        SUPERVISOR_REQUEST_METHODS
    )
    assert tuple(SUPERVISOR_METHODS) == SUPERVISOR_REQUEST_METHODS
    for name, spec in SUPERVISOR_METHODS.items():
        assert spec.name == name
        assert spec.request in requests
        assert spec.request.model_fields["params"].annotation is spec.params
    assert set(SUPERVISOR_PARAMS) == set(requests)
    assert set(SUPERVISOR_RESULTS) == set(SUPERVISOR_REQUEST_METHODS)


def test_m4_the_event_table_is_the_schema() -> None:
    """M4: every event a worker may send has one class in its union and one data model
    in ``WORKER_EVENTS``; none of them asks for a spawn."""
    classes = [cls for cls in _members(WorkerMessage) if issubclass(cls, Event)]
    assert {cls.model_fields["name"].default for cls in classes} == set(WORKER_EVENT_NAMES)
    assert tuple(WORKER_EVENTS) == WORKER_EVENT_NAMES
    for name, spec in WORKER_EVENTS.items():
        assert spec.name == name
        assert spec.event in classes
        assert spec.event.model_fields["data"].annotation is spec.data
    assert set(WORKER_EVENT_DATA) == set(classes)
    assert [n for n in WORKER_EVENT_NAMES if _SPAWNISH.search(n)] == []


# -- M5: each method's params and result, each event's data --------------------------

_SUPERVISOR_SPECS = sorted(SUPERVISOR_METHODS)
_EVENT_SPECS = sorted(WORKER_EVENTS)


def _open_pair() -> dict[Role, Connection]:
    sup, wrk = Connection(S), Connection(W)
    hello = Hello(
        protocol_version=PROTOCOL_VERSION, worker_id="w", pid=1, pgid=1, spawn_mode="exec"
    )
    sup.receive_data(wrk.send(hello))
    wrk.receive_data(sup.send(Welcome(protocol_version=PROTOCOL_VERSION, worker_id="w")))
    return {S: sup, W: wrk}


def _params_of(method: str) -> st.SearchStrategy[BaseModel]:
    return SUPERVISOR_PARAMS[SUPERVISOR_METHODS[method].request]


def _data_of(name: str) -> st.SearchStrategy[BaseModel]:
    return WORKER_EVENT_DATA[WORKER_EVENTS[name].event]


@pytest.mark.parametrize("method", _SUPERVISOR_SPECS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_m5_every_supervisor_method_round_trips(method: str, data: st.DataObject) -> None:
    """M5: a method's request (params as built) and its answer (the result model) arrive
    equal: the worker gets the params model, the supervisor parses the same result."""
    spec = SUPERVISOR_METHODS[method]
    pair = _open_pair()
    request = spec.request_for(8, data.draw(_params_of(method), label="params"))
    _transmit(data, pair, S, [request])
    result = data.draw(SUPERVISOR_RESULTS[method], label="result")
    # Built as the worker builds it, without validating again: the same message, the same bytes.
    response = Response.answering(8, result)
    assert response == Response(id=8, result=result)
    wire = pair[W].send(response)
    assert wire == encode_frame(response.model_dump(mode="python"))
    [answer] = pair[S].receive_data(wire)
    assert isinstance(answer, Response)
    assert spec.parse_result(answer.result) == result


@pytest.mark.parametrize("name", _EVENT_SPECS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_m5_every_worker_event_round_trips(name: str, data: st.DataObject) -> None:
    """M5: an event, built from its data model, arrives as the same typed event."""
    event = WORKER_EVENTS[name].event_for(data.draw(_data_of(name), label="data"))
    _transmit(data, _open_pair(), W, [event])


#: A value no field of any params or data model takes: a list of a list of bytes
#: that are not UTF-8 (not a string, number, map, model or JSON value).
_NO_FIELD_TAKES = [[b"\xff"]]


def _mutated(body: BaseModel, data: st.DataObject) -> tuple[dict[str, Any], str]:
    """``body`` dumped, one field (or, fieldless, an extra one) set to what it cannot take."""
    raw = body.model_dump(mode="python")
    fields = sorted(type(body).model_fields)
    field = data.draw(st.sampled_from(fields), label="field") if fields else "unexpected"
    raw[field] = _NO_FIELD_TAKES
    return raw, field


@pytest.mark.parametrize("method", _SUPERVISOR_SPECS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_m5_a_wrong_param_is_refused_where_the_worker_decodes_it(
    method: str, data: st.DataObject
) -> None:
    """M5: a supervisor request with a param of the wrong type is a protocol violation of
    the worker's decoder, named by the field (the worker never runs the command)."""
    params, field = _mutated(data.draw(_params_of(method), label="params"), data)
    raw = {"type": "request", "id": 8, "method": method, "params": params}
    worker = _open_pair()[W]
    with pytest.raises(ProtocolError) as exc_info:
        worker.receive_data(encode_frame(raw))
    text = str(exc_info.value)
    assert text.startswith(f"invalid 'request' message from supervisor: params.{field}"), text
    assert worker.state is ConnectionState.ERROR


@pytest.mark.parametrize("name", _EVENT_SPECS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_m5_wrong_event_data_is_refused_naming_the_field(name: str, data: st.DataObject) -> None:
    """M5: an event whose data has a field of the wrong type is the worker's protocol
    violation, named by the field."""
    body, field = _mutated(data.draw(_data_of(name), label="data"), data)
    supervisor = _open_pair()[S]
    with pytest.raises(ProtocolError) as exc_info:
        supervisor.receive_data(encode_frame({"type": "event", "name": name, "data": body}))
    text = str(exc_info.value)
    assert text.startswith(f"invalid 'event' message from worker: data.{field}"), text
    assert supervisor.state is ConnectionState.ERROR


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_m5_an_unknown_event_name_is_refused_naming_it(data: st.DataObject) -> None:
    """M5: a valid event under a name the table lacks is refused, naming ``name``."""
    event = data.draw(events, label="event")
    raw = event.model_dump(mode="python")
    raw["name"] = data.draw(_texts.filter(lambda n: n not in WORKER_EVENT_NAMES), label="name")
    supervisor = _open_pair()[S]
    with pytest.raises(ProtocolError) as exc_info:
        supervisor.receive_data(encode_frame(raw))
    assert str(exc_info.value).startswith("invalid 'event' message from worker: name: "), str(
        exc_info.value
    )


# -- M6: the model's JSON the supervisor walks is bounded ------------------------------

#: Where each message carries the model's JSON: its model, the frame that carries
#: ``value``, and the field a refusal names.
_MODEL_JSON: dict[str, tuple[Callable[[Any], BaseModel], Callable[[Any], dict[str, Any]], str]] = {
    "permission.check": (
        lambda value: PermissionCheck(tool="Bash", input=value),
        lambda value: {
            "type": "request",
            "id": 8,
            "method": "permission.check",
            "params": {"tool": "Bash", "input": value},
        },
        "params.input",
    ),
    "mcp.call_tool": (
        lambda value: McpToolCall(name="mcp__s__t", arguments=value),
        lambda value: {
            "type": "request",
            "id": 8,
            "method": "mcp.call_tool",
            "params": {"name": "mcp__s__t", "arguments": value},
        },
        "params.arguments",
    ),
    "workflow.ask": (
        lambda value: WorkflowAsk(actor_id="a", prompt="p", json_schema=value),
        lambda value: {
            "type": "request",
            "id": 8,
            "method": "workflow.ask",
            "params": {"actor_id": "a", "prompt": "p", "json_schema": value},
        },
        "params.json_schema",
    ),
    "supervisor.echo": (
        lambda value: EchoParams(value=value),
        lambda value: {
            "type": "request",
            "id": 8,
            "method": "supervisor.echo",
            "params": {"value": value},
        },
        "params.value",
    ),
    "tool.started": (
        lambda value: ToolStarted(call_id="c", name="Bash", input=value),
        lambda value: {
            "type": "event",
            "name": "tool.started",
            "data": {"call_id": "c", "name": "Bash", "input": value},
        },
        "data.input",
    ),
}


def _carried(message: Message | ConnectionClosed, field: str) -> Any:
    """What ``message`` carries at ``field`` (``params.input``, ``data.input``...)."""
    assert isinstance(message, Event | WorkerRequest)
    body = message.data if isinstance(message, Event) else message.params
    return getattr(body, field.split(".")[1])


def _json_of(containers: int, rng: random.Random) -> dict[str, Any]:
    """A JSON object of exactly ``containers`` maps and arrays (itself included), each
    new one put in a container drawn at random: a flat list, a deep chain or any tree,
    within the frame's nesting limit (the frame and its body are two levels more).

    ``rng`` picks the shape (hypothesis draws its seed: drawing each choice would
    make thousands of draws per example)."""
    root: dict[str, Any] = {}
    made: list[tuple[dict[str, Any] | list[Any], int]] = [(root, 1)]
    deepest = FrameLimits().max_nesting - 2
    for index in range(containers - 1):
        child: dict[str, Any] | list[Any] = {} if rng.random() < 0.5 else []
        parent, depth = rng.choice(made[-3:] if rng.random() < 0.5 else made)
        if depth == deepest:
            parent, depth = root, 1
        if isinstance(parent, dict):
            parent[f"k{index}"] = child
        else:
            parent.append(child)
        if rng.random() < 0.3:
            scalar = rng.choice([None, True, 7, 2.5, "text"])
            if isinstance(child, dict):
                child["v"] = scalar
            else:
                child.append(scalar)
        made.append((child, depth + 1))
    return root


@pytest.mark.parametrize("carrier", sorted(_MODEL_JSON))
@settings(max_examples=25, deadline=None)
@given(
    containers=st.integers(1, 8)
    | st.integers(MAX_JSON_CONTAINERS - 4, MAX_JSON_CONTAINERS + 4)
    | st.integers(MAX_JSON_CONTAINERS + 5, 20 * MAX_JSON_CONTAINERS),
    shape=st.integers(0, 2**32),
)
def test_m6_s_sec_8_the_model_json_the_supervisor_walks_holds_at_most_the_bound(
    carrier: str, containers: int, shape: int
) -> None:
    """M6, S-SEC-8: a tool input, MCP arguments, a workflow ask's schema or an echo's value
    of up to MAX_JSON_CONTAINERS maps and arrays, of any shape, pass both the worker's
    model and the supervisor's decoder; one more is refused by both, the supervisor's
    refusal (a protocol violation) naming the field and the bound."""
    build, frame, field = _MODEL_JSON[carrier]
    value = _json_of(containers, random.Random(shape))
    supervisor = _open_pair()[S]
    if containers <= MAX_JSON_CONTAINERS:
        build(value)
        [message] = supervisor.receive_data(encode_frame(frame(value)))
        assert _carried(message, field) == value
        return
    with pytest.raises(ValidationError, match=rf"MAX_JSON_CONTAINERS \({MAX_JSON_CONTAINERS}\)"):
        build(value)
    with pytest.raises(ProtocolError) as exc_info:
        supervisor.receive_data(encode_frame(frame(value)))
    text = str(exc_info.value)
    kind = frame(value)["type"]
    assert text.startswith(f"invalid {kind!r} message from worker: {field}: "), text
    assert f"MAX_JSON_CONTAINERS ({MAX_JSON_CONTAINERS})" in text
    assert supervisor.state is ConnectionState.ERROR


@pytest.mark.parametrize("carrier", sorted(_MODEL_JSON))
@pytest.mark.parametrize(
    "value",
    [
        {"file_path": "/p/notes.md", "content": "x" * 1_000_000},
        {f"key{index}": index for index in range(500)},
        {"rows": list(range(100_000))},
    ],
    ids=["1MB-string", "500-keys", "100k-numbers"],
)
def test_m6_s_sec_8_control_large_flat_json_passes(carrier: str, value: dict[str, Any]) -> None:
    """M6, S-SEC-8 control: strings, keys and numbers are not counted: a 1 MB text, 500
    keys or 100,000 numbers in one list pass the worker's model and the supervisor."""
    build, frame, field = _MODEL_JSON[carrier]
    build(value)
    [message] = _open_pair()[S].receive_data(encode_frame(frame(value)))
    assert _carried(message, field) == value
