"""A supervisor with workers on a Ray cluster, to be killed from outside (S-DIST-2).

``python -m tests.support.remote_fleet ADDRESS N``: spawns N workers on the
cluster at ADDRESS, prints one JSON line (its tree id, the workers' pids and
node ids, the node hosts' and zygotes' pids), then waits to be killed.
"""

from __future__ import annotations

import json
import sys

import trio

from supervisor import Supervisor, SupervisorConfig


async def _main(address: str, count: int) -> None:
    config = SupervisorConfig(placement="ray", ray_address=address)
    async with Supervisor(config) as sup:
        handles = [await sup.spawn() for _ in range(count)]
        nodes = sup.remote_nodes
        report = {
            "tree_id": sup.tree_id,
            "workers": [{"pid": h.pid, "node": h.node} for h in handles],
            "hosts": [welcome.host_pid for welcome in nodes.values()],
            "zygotes": [welcome.zygote_pid for welcome in nodes.values()],
        }
        print(json.dumps(report), flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], int(sys.argv[2]))
