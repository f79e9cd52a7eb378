"""Shared pieces of the benchmarks: stats, reporting, and the grpcio fleet's side of the
runner's JSON-lines contract (the Python agents' side is ``python -m testbed.fleet_bench``)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import statistics
import sys
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from testbed.fleet import churn_delay


def churn_delays(values: Iterable[bytes | None], now_ns: int) -> list[float]:
    """Seconds from each stamped write to ``now_ns``, for the values that carry a stamp."""
    return [d for value in values if (d := churn_delay(value, now_ns)) is not None]


@dataclass
class MemoryDaemon:
    daemon: Any  # trio_typha.daemon.Daemon
    store: Any  # trio_typha.datastore.memory.MemoryStore
    objects: int  # resources of the synthetic cluster in the store


@contextlib.asynccontextmanager
async def memory_daemon(cluster: str, **overrides: str) -> AsyncIterator[MemoryDaemon]:
    """The real daemon in this process on the memory datastore holding the synthetic
    ``cluster``, in sync (one process, on loopback, any port unless ``overrides`` say
    otherwise); shut down when the block ends.  (Imported here: the client fleets import this
    module too, and need none of the server.)"""
    import trio

    from trio_typha.config_sources import load_config
    from trio_typha.daemon import Daemon
    from trio_typha.datastore.memory import MemoryStore
    from trio_typha.datastore.synthetic import generate

    store = MemoryStore()
    objects = store.put_all(generate(cluster))
    cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
        **overrides})
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
        await daemon.wait_in_sync()
        yield MemoryDaemon(daemon, store, objects)
        daemon.shutdown()


def _line(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def count_line(stamped: int) -> None:
    """The answer to a line on stdin: churn-stamped updates received in sync so far."""
    _line({"event": "count", "stamped": stamped})


def process_cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU of processes (all their threads) from /proc/PID/stat; a process
    that has gone counts 0."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def socket_queues(port: int) -> dict[str, int]:
    """Bytes waiting in the kernel on loopback TCP connections to ``port``: the server's
    send queues (written, not yet read by the peer) and the clients' receive queues
    (arrived, not yet read by the client), from /proc/net/tcp and tcp6."""
    out = {"server_send_queue_bytes": 0, "client_recv_queue_bytes": 0,
           "clients_with_unread_bytes": 0}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            local, remote, state = int(f[1].rsplit(":", 1)[1], 16), \
                int(f[2].rsplit(":", 1)[1], 16), f[3]
            tx, rx = (int(x, 16) for x in f[4].split(":"))
            if state != "01":  # ESTABLISHED only
                continue
            if local == port:
                out["server_send_queue_bytes"] += tx
            elif remote == port:
                out["client_recv_queue_bytes"] += rx
                out["clients_with_unread_bytes"] += rx > 0
    return out


def rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    """This process's resident set now (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    values = sorted(values)
    def q(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))]
    return {"n": len(values), "p50_ms": round(q(0.50) * 1e3, 2),
            "p99_ms": round(q(0.99) * 1e3, 2), "max_ms": round(values[-1] * 1e3, 2),
            "mean_ms": round(statistics.fmean(values) * 1e3, 2)}


def report(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2))
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps(result) + "\n")
    sys.stdout.flush()
