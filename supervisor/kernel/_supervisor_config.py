"""Supervisor settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol import ResourceLimits

from ._budget import EventBudgetLimits
from ._byte_budget import FLEET_ANSWERING_FRAMES

__all__ = ["Placement", "SpawnMode", "SupervisorConfig"]

SpawnMode = Literal["zygote", "exec"]
#: Where zygote workers run: on this machine, or on the nodes of a Ray cluster.
Placement = Literal["local", "ray"]


class SupervisorConfig(BaseModel):
    """How a ``Supervisor`` starts, watches and caps its workers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spawn_mode: SpawnMode = "zygote"
    #: ``ray``: zygote workers run on the nodes of the Ray cluster at
    #: ``ray_address``, each node's through its node host (S-DIST-1); exec
    #: workers stay here.
    placement: Placement = "local"
    #: ``auto`` (the cluster this machine belongs to) or ``host:port`` of its head.
    ray_address: str = "auto"
    #: Workers alive at once; further spawns wait for a slot.
    max_workers: int = Field(default=64, ge=1)
    #: Workers this supervisor may start in its lifetime (``None``: no cap).
    max_total_workers: int | None = Field(default=None, ge=1)
    #: How long a spawn may wait for a free slot (``None``: forever).
    spawn_timeout_s: float | None = Field(default=None, gt=0)
    handshake_timeout_s: float = Field(default=10.0, gt=0)
    zygote_start_timeout_s: float = Field(default=30.0, gt=0)
    #: Workers the zygote keeps forked and started, waiting for a spawn.
    zygote_standby: int = Field(default=2, ge=0, le=64)
    #: Every worker's nice value (and ``SCHED_BATCH``): under load the
    #: supervisor, which serves every agent, runs first (``worker.lower_priority``).
    #: 0: workers compete with it as equals.
    worker_nice: int = Field(default=10, ge=0, le=19)
    #: How often each worker is judged: its tree against its caps (S-SEC-4), and
    #: its wall and idle deadlines (a timeout acts within this of its deadline).
    sample_interval_s: float = Field(default=0.25, gt=0)
    #: Time between SIGTERM and SIGKILL when a worker is stopped.
    kill_grace_s: float = Field(default=2.0, ge=0)
    #: How long a write to a worker may make no progress (it reads nothing of
    #: its pipe) before the worker is stopped for it: a frame half written cannot
    #: be abandoned, so whatever waits to write to it would wait for ever.
    write_stall_s: float = Field(default=30.0, gt=0)
    #: Events buffered per worker before its reader stops reading (backpressure).
    event_buffer: int = Field(default=1024, ge=1)
    #: What all workers' requests together may make the supervisor hold, in frames of
    #: ``max_frame_size``, past each worker's own reserve (S-SEC-8, ``_byte_budget``):
    #: a reader past it reads no more of its worker's pipe until bytes are freed.
    fleet_answering_frames: int = Field(default=FLEET_ANSWERING_FRAMES, ge=2)
    #: What one worker may make the supervisor record before it is stopped (S-SEC-8).
    event_budget: EventBudgetLimits = EventBudgetLimits()
    default_limits: ResourceLimits = ResourceLimits()
    #: Directories no worker may reach, in any sandbox mode (S-SEC-1): the
    #: ``Subvisor`` puts its home here (keys in config, the database, sockets,
    #: every session's output). Resolved to real paths when the zygote starts.
    hidden_paths: tuple[str, ...] = ()
    #: User-level files and dirs subvisor trusts more than a project's (user
    #: profile dirs, its config and trust store, user plugin dirs): wherever
    #: one resolves into a worker's writable root, the worker gets it
    #: read-only (S-SEC-3, S-SBX-3; ``_user_files``). Resolved on every spawn.
    protected_paths: tuple[str, ...] = ()
    #: Caps over each worker's whole process tree (S-SEC-4): ``auto`` uses a
    #: cgroup per worker where one can be made, else samples the tree;
    #: ``sampling`` always samples. Both enforce; cgroups act at once.
    tree_caps: Literal["auto", "sampling"] = "auto"
