"""trio-typha's benchmark, as a user reruns it:

    python -m bench SCENARIO [--protocol typha|grpc] [--clients N] [--rate WRITES_PER_S]
                             [--seconds S] [--cluster small|medium|large]
                             [--datastore memory|etcdv3|kubernetes] [--workers N] [--drain S]
                             [--workers-list 2,4] [--tls] [--json]

Scenarios (one configuration per run: peak RSS is a process's, so each run is fresh):

* ``storm``: N clients connect at once to the cluster; time until all are in sync and the
  server CPU for it; then the raw-blast baseline for the same protocol
  (``bench/raw_blast.py``: a minimal trio server writing the same precomputed snapshot
  bytes -- gob, or HTTP/2 DATA frames -- to the same clients) and the ratio to it.
* ``steady``: N clients in sync, then ``--rate`` pod writes/s for ``--seconds``, then up
  to ``--drain`` s for the rest to arrive: the share of updates delivered (by the churn's
  end, 1 s after, by the end of the drain), the delay from datastore write to client
  receipt, server CPU, cores used and CPU per delivered update over the churn window
  (sampled from /proc at its start and end; the clients count what they received in it),
  the client fleet's CPU over the same window, and where undelivered updates were when the
  churn ended (sessions behind the cache, kernel socket queues).
* ``memory``: RSS of the server with the cluster loaded, with N clients (``--clients 0``
  for none).
* ``startup``: the cluster in the test bed's Kubernetes API server until every pipeline is
  InSync (``bench/kdd_startup.py``, the daemon in the bench's own process): wall, CPU, peak
  RSS.  With ``--datastore etcdv3`` (a real etcd) or ``kubernetes`` (the test bed's API
  server): each Typha's own process from its start to ready, ``--repeats`` times interleaved
  with Go Typha's when ``--go-typha`` names it (``bench/etcd_startup.py``).
* ``quiet``: what each Typha costs the datastore (``--datastore kubernetes|etcdv3``) in a
  ``--seconds`` window after ``--settle`` (optionally under ``--churn`` writes/s), counted
  at a proxy in front of it: connections, requests, watch streams, PINGs, bytes, datastore
  CPU; Go Typha too with ``--go-typha PATH`` (``bench/quiet.py``).
* ``reconnect``: N gRPC clients in sync drop, ``--rate`` writes land during a ``--seconds``
  outage, and they come back resuming by position, by digest on another replica, by digest
  on a replica started from cold, and with a plain snapshot: bytes per client, time to
  in sync and server CPU of each against the snapshot (``bench/reconnect.py``).
* ``rolling``: ``--replicas`` replicas started cold, then restarted one at a time, each
  warm-started from the others (WarmStartPeers): per restart the LISTs and bytes it cost the
  datastore and its time to ready against its cold start, then the invariant over every
  replica (``bench/rolling.py``); Go Typha's restart beside with ``--go-typha PATH``.
* ``tree``: propagation from datastore write to client through root -> relay -> client
  (``--relays`` relay processes following the root, the clients spread over them) against
  the same clients and churn on the root alone, and the root's connection count
  (``bench/tree.py``).
* ``balance``: how evenly ServerWorkers (SCM_RIGHTS hand-off) spreads N clients over the processes,
  against a prototype passing accepted sockets with SCM_RIGHTS (``bench/balance.py``).

The server is the real daemon in this process (its CPU and RSS are this process's).  On the
memory datastore the churn generator writes into the memory store from this process too;
``--datastore etcdv3`` starts a real etcd, loads the cluster as Calico v3 resources
(``bench/etcd_cluster.py``) and churns it from a separate process.  Clients run in separate
processes: Go's encoding/gob (``gobtool fleet``) for typha, grpcio
for grpc; ``--tls`` makes it mutual TLS (trustme certificates; no raw-blast baseline then).
A table goes to stdout; with ``--json`` the last line is one JSON object with at
least delivered_fraction, delay_p50_ms, delay_p99_ms, delay_max_ms, server_cpu_s,
cores_used, peak_rss_mib and in_sync_s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

import trio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fanout  # noqa: E402
from _common import cpu_seconds, memory_daemon, rss_peak_mib  # noqa: E402

SCENARIOS = ("storm", "steady", "memory", "startup", "balance", "quiet", "reconnect",
             "rolling", "tree")
DEFAULTS: dict[str, dict[str, Any]] = {
    "storm": {"clients": 1000, "cluster": "medium", "rate": 0.0, "seconds": 0.0},
    "steady": {"clients": 1000, "cluster": "medium", "rate": 50.0, "seconds": 60.0},
    "memory": {"clients": 1000, "cluster": "medium", "rate": 0.0, "seconds": 0.0},
    "startup": {"clients": 0, "cluster": "medium", "rate": 0.0, "seconds": 0.0},
    "balance": {"clients": 1000, "cluster": "medium", "rate": 0.0, "seconds": 0.0},
    "quiet": {"clients": 0, "cluster": "medium", "rate": 0.0, "seconds": 60.0},
    # reconnect: --rate is the writes during each outage, --seconds the outage.
    "reconnect": {"clients": 1000, "cluster": "medium", "rate": 100.0, "seconds": 10.0},
    "rolling": {"clients": 0, "cluster": "medium", "rate": 0.0, "seconds": 0.0},
    # tree: --rate pod writes/s for --seconds, through --relays relay tiers and on one.
    "tree": {"clients": 2000, "cluster": "small", "rate": 20.0, "seconds": 10.0},
}


RAW_BLAST_KEYS = ("raw_blast_s", "raw_blast_cpu_s", "raw_blast_clients_in_sync",
                  "raw_blast_keys_min", "raw_blast_errors", "ratio_to_raw_blast")


#: Reported as they are (not in the table: nested).
DETAIL_KEYS = ("server_side", "client_errors", "stuck_clients")


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The keys every scenario reports (None where a scenario does not measure one)."""
    delay = result.get("delay", {})
    expected = result.get("expected_deliveries") or 0
    wall = result.get("churn_wall_s") or 0
    cpu = result.get("churn_cpu_s") if expected else result.get("snapshot_cpu_s")
    in_window = result.get("churn_deliveries") or 0
    fleet_cpu = result.get("fleet_cpu_s")

    def per_delivery(seconds: float | None, n: int) -> float | None:
        return round(seconds * 1e6 / n, 1) if expected and n and seconds is not None else None

    return {
        "scenario": result["scenario"], "protocol": result.get("protocol"),
        "tls": result.get("tls"),
        "clients": result.get("clients"), "cluster": result.get("cluster"),
        "rate": result.get("rate"), "writes": result.get("churn_writes"),
        "delivered_fraction": (round(delay.get("n", 0) / expected, 4) if expected else None),
        **{k: result.get(k) for k in ("delivered_at_churn_end", "delivered_1s_after",
                                      "drain_s")},
        "delay_p50_ms": delay.get("p50_ms"), "delay_p99_ms": delay.get("p99_ms"),
        "delay_max_ms": delay.get("max_ms"),
        "server_cpu_s": cpu,
        "cores_used": round(cpu / wall, 3) if expected and wall else None,
        # Server CPU over the churn window / updates the clients received in it.
        "cpu_us_per_delivery": per_delivery(cpu, in_window),
        # The whole run with clients (snapshot storm, churn, drain) / every update received.
        "cpu_us_per_delivery_whole_run": per_delivery(result.get("server_cpu_with_clients_s"),
                                                      delay.get("n", 0)),
        "fleet_cpu_s": fleet_cpu if expected else None,
        "fleet_cores": round(fleet_cpu / wall, 3) if expected and wall and fleet_cpu else None,
        "fleet_cpu_us_per_delivery": per_delivery(fleet_cpu, in_window),
        # Where undelivered updates wait when the churn ends: upstream of the cache (in
        # the datastore watcher or the pipeline), in the server's sessions (behind the
        # cache), or in the kernel (sent, not yet read by the client).
        "writes_not_in_cache_at_churn_end": result.get("writes_not_in_cache_at_churn_end"),
        "pipeline_pending_at_churn_end": result.get("pipeline_pending_at_churn_end"),
        "sessions_behind_at_churn_end": result.get("sessions_behind_at_churn_end"),
        **result.get("socket_queues_at_churn_end", {}),
        "peak_rss_mib": result.get("server_peak_rss_mib"),
        "rss_with_clients_mib": result.get("server_rss_with_clients_mib"),
        "in_sync_s": result.get("all_in_sync_s"),
        # Clients a gRPC fleet gave up on (their sync timeout ends in_sync_s).
        "clients_not_in_sync": result.get("clients_not_in_sync") or None,
        "server_processes": result.get("server_processes"),
        **{k: result[k] for k in ("churn_breadcrumbs", "worker_churn_cpu_s", "worker_clients")
           if k in result},
        **{k: result[k] for k in RAW_BLAST_KEYS + DETAIL_KEYS if result.get(k) is not None},
    }


def fanout_args(args: argparse.Namespace) -> argparse.Namespace:
    impl = "go" if args.protocol == "typha" else "grpcio"
    return argparse.Namespace(
        protocol=args.protocol, client_impl=impl, clients=args.clients,
        procs=min(2, max(args.clients, 1)), cluster=args.cluster, syncer="felix",
        rate=args.rate, seconds=args.seconds, port=0, wake_interval=0.0,
        datastore=args.datastore, workers=args.workers,
        tls=fanout.BenchPKI() if args.tls else None,
        snapshot_reuse=1.0, drain=args.drain, gobtool=fanout.build_gobtool() if impl == "go" else None)


async def baseline(args: argparse.Namespace, fa: argparse.Namespace) -> dict[str, Any]:
    """The raw-blast server for ``args.protocol``: the same snapshot bytes to the same
    client fleet, in this process (bench/raw_blast.py)."""
    from raw_blast import GrpcRawBlast, RawBlast

    async with memory_daemon(args.cluster) as server:
        daemon = server.daemon
        crumb = daemon.pipelines["felix"].feed.snapshot_point()
        blast: RawBlast | GrpcRawBlast
        if args.protocol == "typha":
            blast = RawBlast(crumb.snapshot())
        else:  # the same message batches the daemon's Sync service sends
            blast = GrpcRawBlast(crumb, daemon.ctx.settings.normalized().max_message_size)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(blast.serve)
        cpu0 = cpu_seconds()
        t0 = trio.current_time()
        fleet = fanout.ClientFleet(fanout.fleet_commands(
            args.protocol, fa.client_impl, port, fa.clients, fa.procs, gobtool=fa.gobtool))
        lines = await fleet.in_sync()
        out = {"raw_blast_s": round(trio.current_time() - t0, 2),
               "raw_blast_cpu_s": round(cpu_seconds() - cpu0, 2),
               "raw_blast_clients_in_sync": blast.in_sync,
               "raw_blast_keys_min": min((r["keys_min"] for r in lines if "keys_min" in r),
                                         default=None),
               "raw_blast_errors": [e for r in lines for e in r.get("errors", [])][:5]}
        await fleet.done()
        nursery.cancel_scope.cancel()
    return out


def run_startup(args: argparse.Namespace) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, os.path.join(HERE, "kdd_startup.py"), "--clusters", args.cluster,
         "--churn-cluster", "none"], check=True, stdout=subprocess.PIPE, text=True)
    text = done.stdout
    r, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    return {"scenario": "startup", "cluster": args.cluster,
            "all_in_sync_s": r["startup"]["all_in_sync_s"],
            "snapshot_cpu_s": r["startup"].get("cpu_s"),
            "server_peak_rss_mib": r.get("daemon_peak_rss_mib"), "detail": r}


def table(row: dict[str, Any]) -> str:
    keys = [k for k, v in row.items()
            if v is not None and k not in DETAIL_KEYS]
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}}  {row[k]}" for k in keys)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("--protocol", choices=("typha", "grpc"), default="typha")
    p.add_argument("--clients", type=int)
    p.add_argument("--rate", type=float, help="pod writes per second (steady)")
    p.add_argument("--seconds", type=float, help="churn duration (steady)")
    p.add_argument("--cluster", choices=("tiny", "small", "medium", "large"))
    p.add_argument("--datastore", choices=("memory", "etcdv3", "kubernetes"),
                   help="memory (default) or etcdv3; quiet: kubernetes (default) or etcdv3")
    p.add_argument("--churn", type=float, default=0.0,
                   help="quiet: datastore writes per second during the window")
    p.add_argument("--settle", type=float, default=20.0,
                   help="quiet: seconds after a Typha starts (or until it is ready, if "
                   "later) before the window")
    p.add_argument("--go-typha", metavar="PATH",
                   help="quiet, startup --datastore etcdv3|kubernetes: Go Typha's binary, measured "
                   "beside trio-typha in the same run")
    p.add_argument("--baseline", metavar="TREE",
                   help="startup --datastore etcdv3|kubernetes: another trio-typha source tree run in "
                   "the same rotation (before/after in one sitting)")
    p.add_argument("--repeats", type=int, default=3,
                   help="startup --datastore etcdv3|kubernetes: runs of each Typha (interleaved)")
    p.add_argument("--replicas", type=int, default=3, help="rolling: replicas to roll")
    p.add_argument("--relays", type=int, default=4,
                   help="tree: relay tiers between the root and the clients")
    p.add_argument("--workers", type=int, default=1,
                   help="ServerWorkers: processes serving the port (CPU and RSS are summed)")
    p.add_argument("--workers-list", default="2,4",
                   type=lambda s: [int(x) for x in s.split(",")],
                   help="balance: the ServerWorkers counts to compare (bench/balance.py)")
    p.add_argument("--drain", type=float, default=fanout.DRAIN_S,
                   help="steady: after the churn, wait up to this long for the clients to "
                   "receive every update (delivered_fraction counts what came by then)")
    p.add_argument("--tls", action="store_true",
                   help="mutual TLS (trustme certificates) between server and clients")
    p.add_argument("--json", action="store_true", help="end with one JSON line")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.scenario].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.datastore is None:
        args.datastore = ("kubernetes" if args.scenario in ("quiet", "rolling")
                          else "memory")
    allowed = (("kubernetes", "etcdv3") if args.scenario in ("quiet", "rolling")
               else ("memory", "etcdv3", "kubernetes") if args.scenario == "startup"
               else ("memory", "etcdv3"))
    if args.datastore not in allowed:
        p.error(f"{args.scenario} takes --datastore {' or '.join(allowed)}")
    if args.scenario == "steady" and (args.rate <= 0 or args.seconds <= 0):
        p.error("steady needs --rate and --seconds above 0")
    from trio_typha.logs import setup_logging
    setup_logging(args.log_level)
    if args.scenario == "quiet":
        import quiet
        result = quiet.main(args)
        if args.json:
            print(json.dumps(result))
        return
    if args.scenario == "rolling":
        import rolling
        if args.replicas < 2:
            p.error("rolling needs --replicas 2 or more (a restarted one warm-starts from "
                    "the others)")
        result = rolling.main(args)
        if args.json:
            print(json.dumps(result))
        return
    if args.scenario in ("reconnect", "tree"):  # each its own module's trio run(args)
        import importlib
        result = trio.run(importlib.import_module(args.scenario).run, args)
        print(json.dumps(result, indent=1) if not args.json else "")
        if args.json:
            print(json.dumps(result))
        return
    if args.scenario == "balance":
        import balance
        result = balance.run(args)
        print(balance.table(result))
        if args.json:
            print(json.dumps(result))
        return
    if args.scenario == "startup" and args.datastore in ("etcdv3", "kubernetes"):
        import etcd_startup
        result = etcd_startup.main(args)
        if args.json:
            print(json.dumps(result))
        return
    if args.scenario == "startup":
        result = run_startup(args)
    else:
        fa = fanout_args(args)
        result = trio.run(fanout.run, fa)
        result["scenario"] = args.scenario
        if args.scenario == "storm" and args.clients and not args.tls:
            # (the raw-blast baselines speak plain TCP only)
            result.update(trio.run(baseline, args, fa))
            if result["raw_blast_s"]:
                result["ratio_to_raw_blast"] = round(
                    result["all_in_sync_s"] / result["raw_blast_s"], 2)
    result.setdefault("server_peak_rss_mib", round(rss_peak_mib(), 1))
    row = summary(result)
    print(table(row))
    if args.json:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
