"""``python -m bench tree --relays R --clients N``: propagation through a relay tier.

Two phases on loopback, with the same cluster (memory datastore, this process) and the same
churn (``--rate`` pod writes/s for ``--seconds``):

* **tree**: the root (the daemon, in this process) and R relay tiers, each its own
  ``trio-typha serve`` process with ``DatastoreType=typha`` following the root over its
  feed; the N Go gob clients (``gobtool fleet``) are spread evenly over the relays.
* **single**: the same N clients on the root alone.

Each phase reports the delay from the datastore write (the churn stamps the wall-clock time
into the pod) to a client's receipt: p50, p99, max over every delivery; the share of
updates delivered; and the root's connection count and CPU over the churn.  Both phases run
the root with ServerWorkers=1 so the comparison is of tiers, not of processes.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(__file__))
from _common import percentiles, process_cpu_seconds  # noqa: E402
from fanout import ClientFleet, MemoryCluster, build_gobtool, drain, fleet_commands  # noqa: E402

from trio_typha.config_sources import load_config  # noqa: E402
from trio_typha.daemon import Daemon  # noqa: E402

#: Bound on each phase (start, storm, churn, drain).
PHASE_LIMIT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _relay_process(root_port: int, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TYPHA_DATASTORETYPE": "typha",
           "TYPHA_UPSTREAMTYPHAADDRS": f"127.0.0.1:{root_port}",
           "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(port),
           "TYPHA_HEALTHENABLED": "false", "TYPHA_LOGSEVERITYSCREEN": "WARNING",
           "TYPHA_LOGSEVERITYSYS": "none",
           "TYPHA_SERVERPINGINTERVALSECS": "10"}
    return subprocess.Popen([sys.executable, "-m", "trio_typha", "serve"], env=env)


async def _listening(port: int) -> None:
    """A relay opens its port once its caches hold the root's snapshot."""
    while True:
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            await trio.sleep(0.1)
            continue
        await stream.aclose()
        return


async def _phase(args: argparse.Namespace, cluster: MemoryCluster, relays: int
                 ) -> dict[str, Any]:
    cfg = load_config({}, overrides={"DatastoreType": "memory", "ServerHost": "127.0.0.1",
                                     "ServerWorkers": "1", "ServerPingIntervalSecs": "10"})
    result: dict[str, Any] = {"relays": relays}
    procs: list[subprocess.Popen[bytes]] = []
    with trio.fail_after(PHASE_LIMIT_S):
        async with trio.open_nursery() as nursery:
            root = await nursery.start(Daemon(cfg, store=cluster.store, listen_port=0).run)
            await root.wait_in_sync()
            root_port = root.ports["server"]
            try:
                ports = [root_port]
                if relays:
                    ports = [_free_port() for _ in range(relays)]
                    procs = [_relay_process(root_port, p) for p in ports]
                    for p in ports:
                        await _listening(p)
                commands = [cmd for i, p in enumerate(ports)
                            for cmd in fleet_commands("typha", "go", p,
                                                      args.clients // len(ports)
                                                      + (i < args.clients % len(ports)),
                                                      1, "felix", args.gobtool,
                                                      hostname=f"tree{i}-")]
                fleet = ClientFleet(commands)
                t0 = trio.current_time()
                in_sync = await fleet.in_sync()
                result["all_in_sync_s"] = round(trio.current_time() - t0, 2)
                result["clients_not_in_sync"] = sum(r.get("not_in_sync", 0) for r in in_sync)
                result["root_connections"] = len(root.connections)
                cpu0 = process_cpu_seconds([os.getpid()])
                relay_cpu0 = process_cpu_seconds(p.pid for p in procs) if procs else 0.0
                stamped0 = await fleet.stamped()
                cluster.writes = 0
                await cluster.churn(args.rate, args.seconds)
                result["root_churn_cpu_s"] = round(process_cpu_seconds([os.getpid()]) - cpu0, 2)
                if procs:
                    result["relays_churn_cpu_s"] = round(
                        process_cpu_seconds(p.pid for p in procs) - relay_cpu0, 2)
                result["churn_writes"] = cluster.writes
                expected = cluster.writes * args.clients + stamped0
                result.update(await drain(fleet, expected, args.drain))
                delays: list[float] = []
                for done in await fleet.done():
                    delays.extend(done["delays"])
                result["delay"] = percentiles(delays)
                result["deliveries"] = len(delays)
            finally:
                for proc in procs:
                    proc.terminate()
                for proc in procs:
                    await trio.to_thread.run_sync(proc.wait)
                root.shutdown()
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    args.gobtool = build_gobtool()
    cluster = MemoryCluster(args.cluster)
    result: dict[str, Any] = {"scenario": "tree", "bench": "tree", "protocol": "typha",
                              "clients": args.clients, "cluster": args.cluster,
                              "objects": cluster.objects, "rate": args.rate,
                              "churn_seconds": args.seconds, "relays": args.relays}
    result["tree"] = await _phase(args, cluster, args.relays)
    result["single"] = await _phase(args, cluster, 0)
    t, s = result["tree"]["delay"], result["single"]["delay"]
    if t.get("n") and s.get("n"):
        result["p50_ratio_tree_to_single"] = round(t["p50_ms"] / s["p50_ms"], 2)
        result["p99_ratio_tree_to_single"] = round(t["p99_ms"] / s["p99_ms"], 2)
    return result
