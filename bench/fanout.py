"""Fan-out benchmark: N clients take a synthetic cluster's snapshot, then live churn.

    python bench/fanout.py --protocol grpc --clients 100 --cluster medium --rate 50 --seconds 60

The server (the real daemon, memory datastore) runs in this process so its CPU time and peak
RSS are this process's; clients run in separate processes.  Reports: time until every client
is in sync, server CPU seconds (total and during the churn), peak RSS, and the p50/p99 delay
from the datastore write (which stamps the pod with the wall clock) to client receipt.

Typha-protocol clients are Go by default (``gobtool fleet`` from tests/gotools: encoding/gob
and snappy in goroutines, the shape of calico-node's client); ``--client-impl python`` runs
trio_typha's own client instead (bench/typha_clients.py).  gRPC clients are grpcio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import trio

sys.path.insert(0, os.path.dirname(__file__))
from _common import (  # noqa: E402
    cpu_seconds,
    current_rss_mib,
    percentiles,
    report,
    rss_peak_mib,
)

from trio_typha.config import load_config  # noqa: E402
from trio_typha.daemon import Daemon  # noqa: E402
from trio_typha.datastore.churn import Churn  # noqa: E402
from trio_typha.datastore.memory import MemoryStore  # noqa: E402
from trio_typha.datastore.synthetic import generate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def build_gobtool() -> str:
    """Build the Go fleet (tests/gotools) and return the binary's path."""
    script = os.path.join(HERE, os.pardir, "tests", "gotools", "build.sh")
    done = subprocess.run(["bash", script], check=True, stdout=subprocess.PIPE, text=True)
    return done.stdout.strip().splitlines()[-1]


def client_command(protocol: str, impl: str, port: int, n: int, syncer: str,
                   gobtool: str | None = None) -> list[str]:
    """One client process's command line; every kind prints the same JSON lines."""
    if protocol == "grpc" and impl == "h2":
        return [sys.executable, os.path.join(HERE, "h2_clients.py"),
                "--port", str(port), "--n", str(n), "--syncer", syncer]
    if protocol == "grpc":
        return [sys.executable, os.path.join(HERE, "grpc_clients.py"),
                "--target", f"127.0.0.1:{port}", "--n", str(n), "--syncer", syncer]
    if impl == "go":
        assert gobtool is not None
        return [gobtool, "fleet", "-addr", f"127.0.0.1:{port}", "-n", str(n),
                "-syncer", syncer]
    return [sys.executable, os.path.join(HERE, "typha_clients.py"),
            "--port", str(port), "--n", str(n), "--syncer", syncer]


def snapshot_sizes(daemon: Daemon, syncer: str) -> dict:
    """The syncer's snapshot as gob (plain, streamed) and as the snappy-compressed stream."""
    from trio_typha.protocols.gob import encode_once
    snap = daemon.pipelines[syncer].feed.snapshot_point().snapshot()
    raw = encode_once.build_streamed_snapshot(snap, 1000)
    compressed = encode_once.build_compressed_snapshot(snap)
    return {"snapshot_keys": len(snap), "snapshot_gob_bytes": len(raw),
            "snapshot_snappy_bytes": len(compressed),
            "snapshot_value_bytes": sum(len(u.value or b"") for u in snap)}


async def run(args: argparse.Namespace) -> dict:
    store = MemoryStore()
    t_load = time.monotonic()
    objects = store.put_all(generate(args.cluster))
    load_s = time.monotonic() - t_load
    cfg = load_config({}, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1",
        "SnapshotReuseAgeSecs": str(args.snapshot_reuse),
        "CacheWakeIntervalSecs": str(args.wake_interval),
        "ServerPingIntervalSecs": "10"})
    result: dict = {"bench": "fanout", "wake_interval": args.wake_interval,
                    "protocol": args.protocol,
                    "client_impl": args.client_impl, "clients": args.clients,
                    "cluster": args.cluster, "objects": objects, "rate": args.rate,
                    "churn_seconds": args.seconds, "store_load_s": round(load_s, 2)}
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(Daemon(cfg, store=store, listen_port=args.port).run)
        t0 = trio.current_time()
        await daemon.wait_in_sync()
        result["server_in_sync_s"] = round(trio.current_time() - t0, 2)
        result["felix_keys"] = len(daemon.pipelines["felix"].feed.cache)
        port = daemon.ports["server"]
        cpu0 = cpu_seconds()
        per_proc = [args.clients // args.procs + (i < args.clients % args.procs)
                    for i in range(args.procs)]
        procs = [subprocess.Popen(  # noqa: ASYNC220
                     client_command(args.protocol, args.client_impl, port, n, args.syncer,
                                    args.gobtool),
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for n in per_proc if n]
        t_start = trio.current_time()
        in_sync = [json.loads(await trio.to_thread.run_sync(p.stdout.readline))
                   for p in procs]
        result["all_in_sync_s"] = round(trio.current_time() - t_start, 2)
        result["snapshot_cpu_s"] = round(cpu_seconds() - cpu0, 2)
        result["client_errors"] = [e for r in in_sync for e in r.get("errors", [])]
        result["clients_not_in_sync"] = sum(r.get("not_in_sync", 0) for r in in_sync)
        result["stuck_clients"] = [s for r in in_sync for s in r.get("stuck", [])]
        cpu1 = cpu_seconds()
        wall1 = trio.current_time()
        churn = Churn(store, args.rate if args.rate > 0 else 1.0, policy_fraction=0.0)
        if args.seconds > 0 and args.rate > 0:
            with trio.move_on_after(args.seconds):
                await churn.run()
        result["churn_writes"] = churn.writes
        result["churn_cpu_s"] = round(cpu_seconds() - cpu1, 2)
        result["churn_wall_s"] = round(trio.current_time() - wall1, 2)
        result["server_rss_with_clients_mib"] = round(current_rss_mib(), 1)
        await trio.sleep(1)  # let the last writes arrive
        result["bytes_sent_total"] = sum(i.bytes_sent for i in daemon.ctx.sessions.values())
        result["sessions_at_end"] = len(daemon.ctx.sessions)
        result.update(snapshot_sizes(daemon, args.syncer))
        delays: list[float] = []
        for p in procs:
            p.stdin.close()
            line = await trio.to_thread.run_sync(p.stdout.readline)
            done = json.loads(line)
            delays.extend(done["delays"])
            result["client_errors"] += done.get("errors", [])
            await trio.to_thread.run_sync(p.wait)
        result["delay"] = percentiles(delays)
        result["expected_deliveries"] = churn.writes * args.clients
        result["server_cpu_total_s"] = round(cpu_seconds(), 2)
        result["server_peak_rss_mib"] = round(rss_peak_mib(), 1)
        daemon.shutdown()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--protocol", choices=("grpc", "typha"), default="grpc")
    p.add_argument("--client-impl", choices=("go", "python", "grpcio", "h2"), default=None,
                   help="typha protocol clients: go (gobtool fleet, default) or python; "
                   "grpc clients: grpcio (default) or h2 (trio_typha's own client)")
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument("--cluster", default="medium")
    p.add_argument("--syncer", default="felix")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--wake-interval", type=float, default=0.0,
                   help="CacheWakeIntervalSecs for the server (0: wake clients per update)")
    p.add_argument("--snapshot-reuse", type=float, default=1.0,
                   help="SnapshotReuseAgeSecs for the server")
    p.add_argument("--log-level", default="WARNING", help="server log level (to stderr)")
    args = p.parse_args()
    from trio_typha.logs import setup_logging
    setup_logging(args.log_level)
    if args.protocol == "grpc":
        args.client_impl = args.client_impl or "grpcio"
        if args.client_impl not in ("grpcio", "h2"):
            p.error("gRPC clients are grpcio or h2")
    else:
        args.client_impl = args.client_impl or "go"
        if args.client_impl not in ("go", "python"):
            p.error("typha-protocol clients are go or python")
    args.gobtool = build_gobtool() if args.client_impl == "go" else None
    report(trio.run(run, args))


if __name__ == "__main__":
    main()
