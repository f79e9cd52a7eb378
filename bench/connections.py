"""Connection-count benchmark: thousands of mixed gob/gRPC clients at once, held, pinged.

    python bench/connections.py --clients 5000 --cluster small --hold 300

The daemon (memory datastore) runs in this process, so its RSS is this process's; the
clients run in separate processes, all started at once: half Go gob clients (``gobtool
fleet`` from tests/gotools, calico-node's decoder), half gRPC clients on trio_typha's own h2
client (``python -m testbed.fleet_bench``).  Reports how long until every client was
accepted and in sync, how many never got there (``not_in_sync_at_sync``), how long each
waited for its first message (``first_message_wait``: a calico-node whose first read waits
30 s, its ``TyphaReadTimeout``, gives up and reconnects into the storm), then holds them for ``--hold`` seconds under light churn with pings
every ``--ping-interval`` and reports pings answered (pongs the server timed), sessions still
connected at the end (none may be dropped), clients not in sync at the end by their own
account (``not_in_sync_at_end``), and server RSS per connection.  Then every
client leaves and the server's RSS is read again (``rss_after_leave_mib``), and again after a
collection and a ``malloc_trim`` done by the bench itself.
"""

from __future__ import annotations

import argparse
import contextlib
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
from fanout import ClientFleet, GcPauses, build_gobtool, fleet_commands  # noqa: E402

from trio_typha.daemon import Daemon  # noqa: E402
from trio_typha.datastore.churn import Churn  # noqa: E402
from trio_typha.server.fdlimit import raise_nofile_limit  # noqa: E402
from trio_typha.server.memtrim import CHECK_INTERVAL, MALLOC_TRIM  # noqa: E402

#: calico-node's default TyphaReadTimeout: a first message later than this is a reconnect.
READ_TIMEOUT_S = 30.0


def first_wait_summary(waits: list[float]) -> dict:
    """The clients' waits for their first message (-1: none came): max, quantiles, how
    many waited at least calico-node's read timeout, how many got nothing."""
    got = sorted(w for w in waits if w >= 0)

    def q(f: float) -> float | None:
        return round(got[min(len(got) - 1, int(f * len(got)))], 2) if got else None

    return {"clients": len(waits), "max_s": round(got[-1], 2) if got else None,
            "p50_s": q(0.5), "p99_s": q(0.99),
            "waited_30s_or_more": sum(w >= READ_TIMEOUT_S for w in got),
            "no_first_message": len(waits) - len(got)}


def tcp_memory_pages() -> tuple[int, int]:
    """The kernel's TCP buffer memory now (pages, every socket on the machine) and its
    pressure threshold (tcp_mem's middle value): past it, the kernel throttles every TCP
    socket's buffers, and a storm's writes and reads crawl."""
    used = pressure = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/net/sockstat") as fh:
            for line in fh:
                if line.startswith("TCP:"):
                    f = line.split()
                    used = int(f[f.index("mem") + 1])
        with open("/proc/sys/net/ipv4/tcp_mem") as fh:
            pressure = int(fh.read().split()[1])
    return used, pressure


async def sample_tcp_memory(out: dict, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Keep ``out["tcp_mem_peak_mib"]`` at the highest TCP buffer memory seen."""
    page = os.sysconf("SC_PAGE_SIZE")
    _, pressure = tcp_memory_pages()
    out["tcp_mem_pressure_mib"] = round(pressure * page / 2**20, 1)
    out["tcp_mem_peak_mib"] = 0.0
    task_status.started()
    while True:
        used, _ = tcp_memory_pages()
        out["tcp_mem_peak_mib"] = max(out["tcp_mem_peak_mib"], round(used * page / 2**20, 1))
        await trio.sleep(0.5)


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
                    "max_snapshot_sends": args.max_snapshot_sends,
                    "ping_interval_s": args.ping_interval, "churn_rate": args.rate}
    gobtool = build_gobtool()
    async with memory_daemon(args.cluster, ServerPingIntervalSecs=str(args.ping_interval),
                             CacheWakeIntervalSecs=str(args.wake_interval),
                             MaxConnectionsUpperLimit=str(max(10000, 2 * args.clients)),
                             LogSeverityScreen="WARNING",
                             **({"ServerMaxSnapshotSends": str(args.max_snapshot_sends)}
                                if args.max_snapshot_sends is not None else {})) as server:
        daemon, store = server.daemon, server.store
        result["objects"] = server.objects
        port = daemon.ports["server"]
        rss_idle = current_rss_mib()
        result["server_rss_before_clients_mib"] = round(rss_idle, 1)
        t0 = trio.current_time()
        cpu0 = cpu_seconds()
        gob_commands = fleet_commands("typha", "go", port, gob, args.procs, gobtool=gobtool,
                                      hostname="gob")
        gob_procs = len(gob_commands)
        fleet = ClientFleet(gob_commands
                            + fleet_commands("grpc", "h2", port, grpc, args.procs,
                                             hostname="grpc"))
        pauses = GcPauses()
        tcp: dict = {}
        async with trio.open_nursery() as sampling:
            await sampling.start(sample_tcp_memory, tcp)
            lines = await fleet.in_sync()
            sampling.cancel_scope.cancel()
        result["all_in_sync_s"] = round(trio.current_time() - t0, 2)
        result["connect_cpu_s"] = round(cpu_seconds() - cpu0, 2)
        result["connect_gc_pauses"] = pauses.summary()
        result["connect_tcp_memory"] = tcp
        result["client_errors_at_sync"] = [e for line in lines
                                           for e in line.get("errors", [])][:10]
        result["not_in_sync_at_sync"] = sum(line.get("not_in_sync", 0) for line in lines)
        result["first_message_wait"] = {
            name: first_wait_summary([w for line in group for w in line.get("first_waits", [])])
            for name, group in (("all", lines), ("gob", lines[:gob_procs]),
                                ("grpc", lines[gob_procs:]))}
        result["sessions_in_sync"] = len(daemon.ctx.sessions)
        result["connections_accepted"] = len(daemon.connections)
        rss_loaded = current_rss_mib()
        result["server_rss_with_clients_mib"] = round(rss_loaded, 1)
        result["rss_per_connection_kib"] = result["rss_per_conn_kib"] = round(
            (rss_loaded - rss_idle) * 1024 / max(len(daemon.connections), 1), 1)
        pongs0 = _pongs(daemon)
        # No churn at --rate 0 (Churn refuses a rate that is not positive).
        churn = Churn(store, args.rate, policy_fraction=0.0) if args.rate > 0 else None
        low = len(daemon.ctx.sessions)
        with trio.move_on_after(args.hold):
            async with trio.open_nursery() as hold:
                if churn is not None:
                    hold.start_soon(churn.run)
                while True:
                    await trio.sleep(1)
                    low = min(low, len(daemon.ctx.sessions))
        result["churn_writes"] = churn.writes if churn is not None else 0
        result["pongs_during_hold"] = _pongs(daemon) - pongs0
        result["pongs_expected_about"] = int(args.clients * args.hold / args.ping_interval)
        result["sessions_min_during_hold"] = low
        result["sessions_at_end"] = len(daemon.ctx.sessions)
        result["dropped"] = args.clients - result["sessions_at_end"]
        result["server_rss_end_mib"] = round(current_rss_mib(), 1)
        done = await fleet.done()
        result["client_errors"] = [e for d in done for e in d.get("errors", [])][:10]
        result["not_in_sync_at_end"] = args.clients - sum(d.get("in_sync_at_end", 0)
                                                          for d in done)
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
    p.add_argument("--max-snapshot-sends", type=int,
                   help="the server's ServerMaxSnapshotSends (default: its own; 0: no limit)")
    p.add_argument("--leave-wait", type=float, default=2 * CHECK_INTERVAL + 1,
                   help="seconds after the last client left before RSS is read")
    report(trio.run(run, p.parse_args()))


if __name__ == "__main__":
    main()
