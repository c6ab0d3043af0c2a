"""A real Ray cluster of three nodes on this machine (``ray.cluster_utils.Cluster``).

One cluster serves every test here (starting one takes seconds and ~270 MB
a node); it is shut down after the last of them, whatever happened, so the
rest of the suite does not run beside its idle processes. A
test that needs a node of its own to remove adds one and removes it. Its
cleanup removes it gracefully, so that Ray forgets it at once: a node killed
outright stays listed as alive until Ray's health checks give up on it
(~15 s), and the next test's supervisor would wait that long for a host there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.environment import environ_restored

#: Every test here needs Ray; a machine that cannot run it skips them, saying so.
RAY = "Ray and a local three-node cluster (pip install 'subvisor[ray]')"
NODES = 3
#: The smallest object store Ray accepts: subvisor puts nothing in it.
_OBJECT_STORE_BYTES = 80 * 1024 * 1024


def node_args() -> dict[str, Any]:
    """Arguments of one test node: one CPU (node hosts take none), a small object store."""
    return {"num_cpus": 1, "object_store_memory": _OBJECT_STORE_BYTES}


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[Any]:
    """A started three-node cluster; skips (as ``machine_may_lack``) where Ray cannot run.

    Importing Ray sets ``RAY_CLIENT_MODE`` in this process's environment: it is removed
    again with the cluster, so that it reaches no later test's ``subvisor`` child."""
    with environ_restored():
        yield from _started_cluster()


def _started_cluster() -> Iterator[Any]:
    try:
        from ray.cluster_utils import Cluster
    except ImportError as exc:
        pytest.skip(f"Ray is not installed ({exc})")
    try:
        cluster = Cluster(initialize_head=True, head_node_args=node_args())
    except Exception as exc:
        pytest.skip(f"a Ray head node cannot start here ({type(exc).__name__}: {exc})")
    try:
        for _ in range(NODES - 1):
            cluster.add_node(**node_args())
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
