"""The benchmark's clusters on a real etcd: Calico v3 resources as calicoctl stores them.

``--datastore etcdv3`` starts an etcd (``tests/etcd_server.py``), writes the cluster's
Nodes, Profiles, NetworkPolicies and WorkloadEndpoints (the test bed's
``etcd_cluster_objects``: the shapes and counts of the memory datastore's synthetic cluster,
one WorkloadEndpoint per pod), and churns from a separate
process (``python bench/etcd_cluster.py churn``) so the datastore's writes happen at their
rate whatever the server does: relabelling random WorkloadEndpoints with ``churn-ts`` (wall
clock ns at the write), which the clients read back from the endpoint's labels.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from testbed.cluster import etcd_cluster_objects, etcd_endpoint  # noqa: E402

CHURN_LABEL = "churn-ts"


async def load(client: Any, cluster: str, concurrency: int = 32) -> int:
    """Write the cluster into etcd (``tests.etcd_server.EtcdClient``); returns the count."""
    import trio
    objs = list(etcd_cluster_objects(cluster))
    it = iter(objs)

    async def worker() -> None:
        for obj in it:
            await client.put_resource(obj)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return len(objs)


def churn(url: str, cluster: str, rate: float, seconds: float) -> int:
    """Relabel random WorkloadEndpoints at ``rate`` writes/s (blocking; own process), over
    one gRPC connection to etcd."""
    import trio

    from trio_typha.datastore.etcd_client import EtcdClient
    from trio_typha.datastore.etcd_config import EtcdConfig
    from trio_typha.datastore.etcd_layout import object_key
    from trio_typha.datastore.synthetic import SIZES
    size = SIZES[cluster]
    rng = random.Random(7)
    interval = 1.0 / rate

    async def run() -> int:
        writes = 0
        async with EtcdClient(EtcdConfig(endpoints=(url,))) as client:
            start = deadline = time.monotonic()
            while time.monotonic() - start < seconds:
                obj = etcd_endpoint(rng.randrange(size.pods), size)
                obj["metadata"]["labels"][CHURN_LABEL] = str(time.time_ns())
                value = json.dumps(obj, separators=(",", ":")).encode()
                await client.put(object_key(obj).encode(), value)
                writes += 1
                deadline += interval
                pause = deadline - time.monotonic()
                if pause > 0:
                    await trio.sleep(pause)
        return writes

    return trio.run(run)


def main() -> None:
    p = argparse.ArgumentParser(description="churn a benchmark cluster in etcd")
    p.add_argument("command", choices=["churn"])
    p.add_argument("--url", required=True)
    p.add_argument("--cluster", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    args = p.parse_args()
    print(json.dumps({"writes": churn(args.url, args.cluster, args.rate, args.seconds)}),
          flush=True)


if __name__ == "__main__":
    main()
