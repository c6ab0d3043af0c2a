"""Control datagrams between the supervisor and its zygote (``protocol/_zygote.py``).

The invariants under test:

- Z1 Every report the zygote sends (ready, spawned, spawn_failed, exited) and
  the spawn request the supervisor sends survive ``encode_control`` and the
  matching decoder unchanged.
- Z2 The two directions do not mix: a spawn request is not a report and a
  report is not a spawn request.
- Z3 Garbage datagrams (empty, undecodable, not a map, wrong tag, wrong
  fields) are a ``RemoteProtocolError``, never another exception type; what
  we cannot encode is a ``LocalProtocolError``.
"""

from __future__ import annotations

from typing import Any, get_args

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from protocol import (
    MAX_CONTROL_DATAGRAM,
    LocalProtocolError,
    RemoteProtocolError,
    ResourceLimits,
    SpawnFailed,
    SpawnWorker,
    WorkerExited,
    WorkerSpawned,
    ZygoteReady,
    ZygoteReport,
    decode_spawn_request,
    decode_zygote_report,
    encode_control,
)

_texts = st.text(st.characters(codec="utf-8"), max_size=40)
_ints = st.integers(-(2**63), 2**63 - 1)
_floats = st.floats(allow_nan=False)  # NaN != NaN would defeat the equality check
_positive = st.floats(min_value=0, exclude_min=True, allow_nan=False)

limits = st.builds(
    ResourceLimits,
    memory_mb=st.none() | _positive,
    cpu_seconds=st.none() | st.integers(1, 2**40),
    address_space_mb=st.none() | st.integers(1, 2**40),
    open_files=st.none() | st.integers(17, 2**20),
    wall_timeout_s=st.none() | _positive,
    idle_timeout_s=st.none() | _positive,
)
spawn_requests = st.builds(SpawnWorker, worker_id=_texts, limits=limits)
_REPORTS: dict[type[BaseModel], st.SearchStrategy[Any]] = {
    ZygoteReady: st.builds(ZygoteReady, pid=_ints),
    WorkerSpawned: st.builds(WorkerSpawned, worker_id=_texts, pid=_ints),
    SpawnFailed: st.builds(SpawnFailed, worker_id=_texts, error=_texts),
    WorkerExited: st.builds(
        WorkerExited,
        worker_id=_texts,
        pid=_ints,
        exit_code=st.none() | st.integers(-255, 255),
        signal=st.none() | st.integers(1, 64),
        cpu_seconds=_floats,
        max_rss_kb=_ints,
    ),
}
reports = st.one_of(*_REPORTS.values())
_REPORT_TYPES = tuple(_REPORTS)


# -- Z1: round trips -------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(report=reports)
def test_z1_every_report_round_trips(report: BaseModel) -> None:
    """Z1: ready/spawned/spawn_failed/exited come back equal and of the same class."""
    decoded = decode_zygote_report(encode_control(report))
    assert decoded == report
    assert type(decoded) is type(report)


def test_z1_the_strategies_cover_every_report_type() -> None:
    """Z1: one strategy per member of ``ZygoteReport``."""
    assert set(_REPORTS) == set(get_args(get_args(ZygoteReport)[0]))


@pytest.mark.parametrize("cls", _REPORT_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_z1_each_report_type_round_trips(cls: type[BaseModel], data: st.DataObject) -> None:
    """Z1: every report type individually (so none is skipped by chance)."""
    report = data.draw(_REPORTS[cls])
    assert decode_zygote_report(encode_control(report)) == report


@settings(max_examples=100, deadline=None)
@given(request=spawn_requests)
def test_z1_spawn_requests_round_trip_with_their_limits(request: SpawnWorker) -> None:
    """Z1: the spawn request, limits included, comes back equal."""
    assert decode_spawn_request(encode_control(request)) == request


def test_z1_a_default_spawn_request_fits_in_one_datagram() -> None:
    """Z1: an ordinary spawn request is far below ``MAX_CONTROL_DATAGRAM``."""
    datagram = encode_control(SpawnWorker(worker_id="agent-" + "f" * 32))
    assert len(datagram) < MAX_CONTROL_DATAGRAM


# -- Z2: directions --------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(request=spawn_requests, report=reports)
def test_z2_requests_and_reports_do_not_mix(request: SpawnWorker, report: BaseModel) -> None:
    """Z2: a spawn request is rejected as a report, and a report as a spawn request."""
    with pytest.raises(RemoteProtocolError, match="invalid zygote report"):
        decode_zygote_report(encode_control(request))
    with pytest.raises(RemoteProtocolError, match="invalid spawn request"):
        decode_spawn_request(encode_control(report))


# -- Z3: garbage -----------------------------------------------------------------

_leaf = (
    st.none() | st.booleans() | _ints | st.floats() | st.text(max_size=10) | st.binary(max_size=10)
)
_values = st.recursive(
    _leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)
_tags = st.sampled_from(["ready", "spawned", "spawn_failed", "exited", "spawn", "x"]) | _leaf
_field_names = st.sampled_from(
    sorted({name for cls in (*_REPORT_TYPES, SpawnWorker) for name in cls.model_fields})
)
_junk_maps = st.builds(
    lambda tag, fields: {**fields, "type": tag},
    _tags,
    st.dictionaries(_field_names | st.text(max_size=6), _values, max_size=8),
)
_datagrams = st.one_of(
    st.binary(max_size=64),
    _values.map(lambda v: msgpack.packb(v)),
    _junk_maps.map(lambda m: msgpack.packb(m)),
)


@settings(max_examples=300, deadline=None)
@given(datagram=_datagrams)
def test_z3_garbage_reports_are_protocol_errors(datagram: bytes) -> None:
    """Z3: any datagram is either a valid report or a RemoteProtocolError, nothing else."""
    try:
        report = decode_zygote_report(datagram)
    except RemoteProtocolError:
        return
    assert isinstance(report, _REPORT_TYPES)
    assert decode_zygote_report(encode_control(report)) == report


@settings(max_examples=300, deadline=None)
@given(datagram=_datagrams)
def test_z3_garbage_spawn_requests_are_protocol_errors(datagram: bytes) -> None:
    """Z3: any datagram is either a valid spawn request or a RemoteProtocolError, nothing else."""
    try:
        request = decode_spawn_request(datagram)
    except RemoteProtocolError:
        return
    assert isinstance(request, SpawnWorker)


@pytest.mark.parametrize(
    "datagram",
    [
        b"",
        b"\xc1",  # a byte msgpack never uses
        b"\x92\x01",  # an array cut short
        msgpack.packb({"type": "ready", "pid": 1}) + b"\x00",  # trailing data
        msgpack.packb([1, 2]),
        msgpack.packb("ready"),
        msgpack.packb({"type": "spawned", "pid": 1}),  # worker_id missing
        msgpack.packb({"type": "ready", "pid": [1]}),
        msgpack.packb({"type": "ready", "pid": 1, "extra": 1}),
        msgpack.packb({"type": "reaped", "pid": 1}),
        msgpack.packb({1: "ready"}),  # non-string key
        msgpack.packb({"type": msgpack.ExtType(1, b"x")}),
        b"\x91" * 2000 + b"\xc0",  # nested deeper than msgpack's stack
    ],
    ids=[
        "empty",
        "reserved-byte",
        "truncated",
        "trailing-data",
        "array",
        "string",
        "missing-field",
        "wrong-field-type",
        "extra-field",
        "unknown-tag",
        "int-key",
        "ext-type",
        "deep",
    ],
)
def test_z3_specific_garbage_reports(datagram: bytes) -> None:
    """Z3: the usual ways a datagram goes wrong, each a RemoteProtocolError."""
    with pytest.raises(RemoteProtocolError):
        decode_zygote_report(datagram)
    with pytest.raises(RemoteProtocolError):
        decode_spawn_request(datagram)


_REQUIRED = [
    (cls, name)
    for cls in (*_REPORT_TYPES, SpawnWorker)
    for name, field in cls.model_fields.items()
    if field.is_required()
]


@pytest.mark.parametrize(
    ("cls", "field"), _REQUIRED, ids=[f"{c.__name__}-{f}" for c, f in _REQUIRED]
)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_z3_every_required_field_is_required_on_the_wire(
    cls: type[BaseModel], field: str, data: st.DataObject
) -> None:
    """Z3: a datagram missing any required field is refused (no silent default)."""
    strategy = spawn_requests if cls is SpawnWorker else _REPORTS[cls]
    raw = data.draw(strategy).model_dump()
    del raw[field]
    decode = decode_spawn_request if cls is SpawnWorker else decode_zygote_report
    with pytest.raises(RemoteProtocolError, match=r"invalid (zygote report|spawn request)"):
        decode(msgpack.packb(raw))


def test_z3_the_required_fields_are_these() -> None:
    """Z3: what a zygote report must carry (so a worker's exit is never half-reported)."""
    assert {(c.__name__, f) for c, f in _REQUIRED} == {
        ("ZygoteReady", "pid"),
        ("WorkerSpawned", "worker_id"),
        ("WorkerSpawned", "pid"),
        ("SpawnFailed", "worker_id"),
        ("SpawnFailed", "error"),
        ("WorkerExited", "worker_id"),
        ("WorkerExited", "pid"),
        ("WorkerExited", "exit_code"),
        ("WorkerExited", "signal"),
        ("WorkerExited", "cpu_seconds"),
        ("WorkerExited", "max_rss_kb"),
        ("SpawnWorker", "worker_id"),
    }


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "spawn", "worker_id": 7},
        {"type": "spawn", "worker_id": "w", "limits": {"open_files": 3}},  # must be > 16
        {"type": "spawn", "worker_id": "w", "limits": {"memory_mb": -1}},
        {"type": "spawn", "worker_id": "w", "limits": {"nice": 5}},
        {"type": "spawned", "worker_id": "w"},
    ],
    ids=["worker-id-int", "open-files-low", "memory-negative", "unknown-limit", "wrong-tag"],
)
def test_z3_invalid_spawn_requests(raw: dict[str, Any]) -> None:
    """Z3: a spawn request with bad limits or fields is refused by the zygote."""
    with pytest.raises(RemoteProtocolError, match="invalid spawn request"):
        decode_spawn_request(msgpack.packb(raw))


def test_z3_unencodable_report_is_a_protocol_error() -> None:
    """Z3: what cannot be encoded is a LocalProtocolError, like ``encode_frame``."""
    with pytest.raises(LocalProtocolError):
        encode_control(SpawnFailed(worker_id="w", error="cannot open /tmp/\udcff"))


def test_z3_encode_control_refuses_datagrams_over_the_limit() -> None:
    """Z3: a datagram the receiver cannot read whole is refused when it is built."""
    with pytest.raises(LocalProtocolError):
        encode_control(SpawnFailed(worker_id="w", error="x" * MAX_CONTROL_DATAGRAM))
