"""Control messages between the supervisor and its zygote (fork server).

They travel as one msgpack datagram each over a ``SOCK_SEQPACKET`` Unix socket
pair, so no framing is needed; file descriptors ride along as ``SCM_RIGHTS``
ancillary data (a worker's two pipe ends, from the supervisor to the zygote).
What we cannot encode is a ``LocalProtocolError``; a datagram we cannot read
is a ``RemoteProtocolError``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ._errors import LocalProtocolError, RemoteProtocolError
from ._messages import ResourceLimits
from ._sandbox import SandboxPolicy

__all__ = [
    "MAX_CONTROL_DATAGRAM",
    "SpawnFailed",
    "SpawnWorker",
    "WorkerExited",
    "WorkerSpawned",
    "ZygoteReady",
    "ZygoteReport",
    "decode_spawn_request",
    "decode_zygote_report",
    "encode_control",
]

MAX_CONTROL_DATAGRAM = 64 * 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpawnWorker(_Frozen):
    """Fork a worker; its read and write pipe ends are attached as two fds.

    ``cgroups`` more fds may follow them: ``cgroup.procs`` files the worker
    writes itself into first, before anything else (S-SEC-4), then closes.
    The worker applies ``sandbox`` to itself before its ``hello`` (S-SBX-1).
    The zygote makes ``sandbox.temp_dir`` (mode 0700) before it forks, unless
    it is there already as a directory of this user's; otherwise it answers
    ``SpawnFailed``.
    """

    type: Literal["spawn"] = "spawn"
    worker_id: str
    limits: ResourceLimits = ResourceLimits()
    sandbox: SandboxPolicy = SandboxPolicy()
    cgroups: int = Field(default=0, ge=0, le=8)


class ZygoteReady(_Frozen):
    """The zygote imported the worker stack and is accepting spawn requests."""

    type: Literal["ready"] = "ready"
    pid: int


class WorkerSpawned(_Frozen):
    """A worker was forked and put in its own process group (pgid == pid)."""

    type: Literal["spawned"] = "spawned"
    worker_id: str
    pid: int


class SpawnFailed(_Frozen):
    """The zygote could not fork the worker."""

    type: Literal["spawn_failed"] = "spawn_failed"
    worker_id: str
    error: str


class WorkerExited(_Frozen):
    """A worker was reaped: its wait status and resource usage."""

    type: Literal["exited"] = "exited"
    worker_id: str
    pid: int
    exit_code: int | None
    signal: int | None
    cpu_seconds: float
    max_rss_kb: int


ZygoteReport = Annotated[
    ZygoteReady | WorkerSpawned | SpawnFailed | WorkerExited, Field(discriminator="type")
]
_report_adapter: TypeAdapter[ZygoteReport] = TypeAdapter(ZygoteReport)


def encode_control(message: BaseModel) -> bytes:
    """One control datagram; refuses what the receiver could not read whole."""
    try:
        data: bytes = msgpack.packb(message.model_dump(mode="python"), use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode control datagram: {exc}") from exc
    if len(data) > MAX_CONTROL_DATAGRAM:
        raise LocalProtocolError(
            f"control datagram of {len(data)} bytes exceeds {MAX_CONTROL_DATAGRAM}",
            limit="max_control_datagram",
        )
    return data


def _decode(data: bytes) -> Any:
    if not data:
        raise RemoteProtocolError("empty control datagram")
    try:
        return msgpack.unpackb(data, raw=False, max_ext_len=0)
    except Exception as exc:
        raise RemoteProtocolError(f"undecodable control datagram: {exc}") from exc


def decode_zygote_report(data: bytes) -> ZygoteReport:
    """Parse a datagram the zygote sent."""
    try:
        return _report_adapter.validate_python(_decode(data))
    except ValidationError as exc:
        raise RemoteProtocolError(f"invalid zygote report: {exc.errors()[0]['msg']}") from None


def decode_spawn_request(data: bytes) -> SpawnWorker:
    """Parse a datagram the supervisor sent to the zygote."""
    try:
        return SpawnWorker.model_validate(_decode(data))
    except ValidationError as exc:
        raise RemoteProtocolError(f"invalid spawn request: {exc.errors()[0]['msg']}") from None
