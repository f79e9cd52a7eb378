"""What the hop through a ServerWorkers worker costs a client: the delay from the primary's
publication of a breadcrumb to its receipt, for clients the kernel gave the primary and for
clients it gave a worker.

    python bench/worker_latency.py [--cluster small] [--rate 50] [--seconds 10]
                                   [--workers 2] [--clients 20] [--json]

The daemon (the primary) and the clients (the test bed's agents on trio-typha's gob client)
run in this process, so publication and receipt are read from one clock; the workers are real processes.  Which
process serves a client is read from the workers' ``/connections``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import trio
from _common import memory_daemon

from testbed.fleet import Agent, AgentGroup, AgentSpec, DiscoverySpec
from trio_typha.client.discovery import ReconnectPolicy
from trio_typha.datastore.churn import Churn
from trio_typha.model.kv import SerializedUpdate


async def run(args: argparse.Namespace) -> dict[str, Any]:
    received: dict[str, list[tuple[str, bytes | None, float]]] = {}

    def note(agent: Agent, updates: Sequence[SerializedUpdate]) -> None:
        now = trio.current_time()
        received.setdefault(agent.spec.name, []).extend((u.key, u.value, now) for u in updates)

    async with memory_daemon(args.cluster, ServerWorkers=str(args.workers),
                             LogSeverityScreen="WARNING", HealthEnabled="true",
                             HealthHost="127.0.0.1", HealthPort="0") as server, \
            trio.open_nursery() as nursery:
        daemon = server.daemon
        while daemon.workers is not None and not daemon.workers.ready:  # noqa: ASYNC110
            await trio.sleep(0.2)
        port = daemon.ports["server"]
        feed = daemon.pipelines["felix"].feed
        clients = AgentGroup([AgentSpec(f"c{i}", "typha") for i in range(args.clients)],
                             DiscoverySpec(static=(f"127.0.0.1:{port}",)),
                             ReconnectPolicy(startup_delay_max=0.0), reconnect=False,
                             receipts=False, delays=False, on_updates=note)
        await nursery.start(clients.run)
        await clients.wait_until(lambda g: all(a.in_sync for a in g.agents))
        start = feed.latest
        with trio.move_on_after(args.seconds):
            await Churn(server.store, args.rate, policy_fraction=0.0).run()
        await trio.sleep(2)
        published: dict[tuple[str, bytes | None], float] = {}
        crumb = start
        while crumb.next is not None:
            crumb = crumb.next
            for u in crumb.updates:
                published[(u.key, u.value)] = crumb.timestamp
        served_by: dict[str, int] = {}
        if daemon.workers is not None:
            served_by.update({row["hostname"]: row["worker"]
                              for row in await daemon.workers.connection_rows()})
        nursery.cancel_scope.cancel()
    delays: dict[str, list[float]] = {"on_primary": [], "on_workers": []}
    for host, got in received.items():
        side = "on_workers" if host in served_by else "on_primary"
        delays[side].extend(t - published[(k, v)] for k, v, t in got if (k, v) in published)
    result: dict[str, Any] = {"cluster": args.cluster, "rate": args.rate,
                              "workers": args.workers, "clients": args.clients,
                              "clients_on_workers": len(served_by)}
    for side, ds in delays.items():
        ds.sort()
        result[side] = ({"n": len(ds), "p50_ms": round(ds[len(ds) // 2] * 1000, 1),
                         "p99_ms": round(ds[int(len(ds) * 0.99)] * 1000, 1)} if ds
                        else {"n": 0})
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="small")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = trio.run(run, args)
    for key, value in result.items():
        print(f"{key:<20} {value}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
