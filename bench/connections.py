"""Connection-count benchmark: thousands of mixed gob/gRPC clients at once, held, pinged.

    python bench/connections.py --clients 5000 --cluster small --hold 300

The daemon (memory datastore) runs in this process, so its RSS is this process's; the
clients run in separate processes, all started at once: half Go gob clients (``gobtool
fleet`` from tests/gotools, calico-node's decoder), half gRPC clients on trio_typha's own h2
client (``python -m testbed.fleet_bench``).  Reports how long until every client was
accepted and in sync, then holds them for ``--hold`` seconds under light churn with pings
every ``--ping-interval`` and reports pings answered (pongs the server timed), sessions still
connected at the end (none may be dropped), and server RSS per connection.  Then every
client leaves and the server's RSS is read again (``rss_after_leave_mib``), and again after a
collection and a ``malloc_trim`` done by the bench itself.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

import trio

sys.path.insert(0, os.path.dirname(__file__))
from _common import (  # noqa: E402
    cpu_seconds,
    current_rss_mib,
    memory_daemon,
    report,
    rss_peak_mib,
)
from fanout import ClientFleet, build_gobtool, fleet_commands  # noqa: E402

from trio_typha.daemon import Daemon  # noqa: E402
from trio_typha.datastore.churn import Churn  # noqa: E402
from trio_typha.server.fdlimit import raise_nofile_limit  # noqa: E402
from trio_typha.server.memtrim import CHECK_INTERVAL, MALLOC_TRIM  # noqa: E402


def _pongs(daemon: Daemon) -> int:
    """Pong round trips the server has timed, over every syncer (typha_ping_latency count)."""
    total = 0.0
    for family in daemon.metrics.ping_latency.collect():
        total += sum(s.value for s in family.samples if s.name.endswith("_count"))
    return int(total)


async def run(args: argparse.Namespace) -> dict:
    raise_nofile_limit()  # the children inherit the raised limit
    gob = args.clients // 2
    grpc = args.clients - gob
    result: dict = {"bench": "connections", "clients": args.clients, "gob": gob, "grpc": grpc,
                    "cluster": args.cluster, "hold_s": args.hold,
                    "ping_interval_s": args.ping_interval, "churn_rate": args.rate}
    gobtool = build_gobtool()
    async with memory_daemon(args.cluster, ServerPingIntervalSecs=str(args.ping_interval),
                             CacheWakeIntervalSecs=str(args.wake_interval),
                             MaxConnectionsUpperLimit=str(max(10000, 2 * args.clients)),
                             LogSeverityScreen="WARNING") as server:
        daemon, store = server.daemon, server.store
        result["objects"] = server.objects
        port = daemon.ports["server"]
        rss_idle = current_rss_mib()
        result["server_rss_before_clients_mib"] = round(rss_idle, 1)
        t0 = trio.current_time()
        cpu0 = cpu_seconds()
        fleet = ClientFleet(
            fleet_commands("typha", "go", port, gob, args.procs, gobtool=gobtool,
                           hostname="gob")
            + fleet_commands("grpc", "h2", port, grpc, args.procs, hostname="grpc"))
        errors_at_sync = await fleet.in_sync_errors()
        result["all_in_sync_s"] = round(trio.current_time() - t0, 2)
        result["connect_cpu_s"] = round(cpu_seconds() - cpu0, 2)
        result["client_errors_at_sync"] = errors_at_sync[:10]
        result["sessions_in_sync"] = len(daemon.ctx.sessions)
        result["connections_accepted"] = len(daemon.connections)
        rss_loaded = current_rss_mib()
        result["server_rss_with_clients_mib"] = round(rss_loaded, 1)
        result["rss_per_connection_kib"] = result["rss_per_conn_kib"] = round(
            (rss_loaded - rss_idle) * 1024 / max(len(daemon.connections), 1), 1)
        pongs0 = _pongs(daemon)
        churn = Churn(store, args.rate, policy_fraction=0.0)
        low = len(daemon.ctx.sessions)
        with trio.move_on_after(args.hold):
            async with trio.open_nursery() as hold:
                if args.rate > 0:
                    hold.start_soon(churn.run)
                while True:
                    await trio.sleep(1)
                    low = min(low, len(daemon.ctx.sessions))
        result["churn_writes"] = churn.writes
        result["pongs_during_hold"] = _pongs(daemon) - pongs0
        result["pongs_expected_about"] = int(args.clients * args.hold / args.ping_interval)
        result["sessions_min_during_hold"] = low
        result["sessions_at_end"] = len(daemon.ctx.sessions)
        result["dropped"] = args.clients - result["sessions_at_end"]
        result["server_rss_end_mib"] = round(current_rss_mib(), 1)
        result["client_errors"] = [e for done in await fleet.done()
                                   for e in done.get("errors", [])][:10]
        result.update(await leave_and_measure(daemon, rss_idle, args.leave_wait))
        result["server_cpu_total_s"] = round(cpu_seconds(), 2)
        result["server_peak_rss_mib"] = round(rss_peak_mib(), 1)
    return result


async def leave_and_measure(daemon: Daemon, rss_idle: float, wait: float) -> dict:
    """Once every client has gone: the server's resident set after ``wait`` seconds (what
    it gives back on its own), then after a full collection and after ``malloc_trim`` done
    here (what either would add)."""
    out: dict = {"rss_peak_mib": round(rss_peak_mib(), 1)}
    with trio.move_on_after(60):
        while len(daemon.connections):  # noqa: ASYNC110 - polls a count
            await trio.sleep(0.1)
    out["sessions_after_leave"] = len(daemon.ctx.sessions)
    await trio.sleep(wait)
    out["rss_after_leave_mib"] = round(current_rss_mib(), 1)
    out["rss_kept_after_leave_mib"] = round(out["rss_after_leave_mib"] - rss_idle, 1)
    gc.collect()
    out["rss_after_leave_and_gc_mib"] = round(current_rss_mib(), 1)
    if MALLOC_TRIM is not None:
        MALLOC_TRIM()
    out["rss_after_leave_gc_and_trim_mib"] = round(current_rss_mib(), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=5000)
    p.add_argument("--procs", type=int, default=2, help="client processes per protocol")
    p.add_argument("--cluster", default="small")
    p.add_argument("--hold", type=float, default=300.0, help="seconds to hold the clients")
    p.add_argument("--ping-interval", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=5.0, help="churn writes/s while holding")
    p.add_argument("--wake-interval", type=float, default=0.2)
    p.add_argument("--leave-wait", type=float, default=2 * CHECK_INTERVAL + 1,
                   help="seconds after the last client left before RSS is read")
    report(trio.run(run, p.parse_args()))


if __name__ == "__main__":
    main()
