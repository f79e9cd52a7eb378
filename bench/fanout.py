"""Fan-out benchmark: N clients take a synthetic cluster's snapshot, then live churn.

    python bench/fanout.py --protocol grpc --clients 100 --cluster medium --rate 50 --seconds 60

The server (the real daemon, memory datastore) runs in this process so its CPU time and peak
RSS are this process's; clients run in separate processes.  Reports: time until every client
is in sync, server CPU seconds (total and during the churn), peak RSS, and the p50/p99 delay
from the datastore write (which stamps the pod with the wall clock) to client receipt.

Typha-protocol clients are Go by default (``gobtool fleet`` from tests/gotools: encoding/gob
and snappy in goroutines, the shape of calico-node's client); ``--client-impl python`` runs
the test bed's agents on trio_typha's own client instead (``python -m testbed.fleet_bench``).
gRPC clients are grpcio, or with ``--client-impl h2`` the same agents on trio_typha's h2
client.  ``--tls`` serves mutual TLS (trustme certificates) to any of them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import trio

sys.path.insert(0, os.path.dirname(__file__))
from _common import (  # noqa: E402
    current_rss_mib,
    percentiles,
    process_cpu_seconds,
    report,
    rss_peak_mib,
    socket_queues,
)

from trio_typha.config_sources import load_config  # noqa: E402
from trio_typha.daemon import Daemon  # noqa: E402
from trio_typha.datastore.churn import Churn  # noqa: E402
from trio_typha.datastore.memory import MemoryStore  # noqa: E402
from trio_typha.datastore.synthetic import generate  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
#: How long after the churn the clients may take to receive the rest of it.
DRAIN_S = 10.0


def build_gobtool() -> str:
    """Build the Go fleet (tests/gotools) and return the binary's path."""
    script = os.path.join(HERE, os.pardir, "tests", "gotools", "build.sh")
    done = subprocess.run(["bash", script], check=True, stdout=subprocess.PIPE, text=True)
    return done.stdout.strip().splitlines()[-1]


class BenchPKI:
    """``--tls``: a CA, a server and a client certificate (trustme) in a temporary
    directory; the server requires the client's (mutual TLS, ClientCN), as Typha does."""

    SERVER_NAME = "typha-server"
    CLIENT_CN = "typha-client"

    def __init__(self) -> None:
        import tempfile

        import trustme
        self.dir = tempfile.mkdtemp(prefix="bench-tls-")
        ca = trustme.CA()
        server = ca.issue_cert(self.SERVER_NAME)
        client = ca.issue_cert(self.CLIENT_CN, common_name=self.CLIENT_CN)
        blobs = {"ca": ca.cert_pem, "server_cert": server.cert_chain_pems[0],
                 "server_key": server.private_key_pem,
                 "client_cert": client.cert_chain_pems[0],
                 "client_key": client.private_key_pem}
        self.paths = {name: os.path.join(self.dir, f"{name}.pem") for name in blobs}
        for name, blob in blobs.items():
            blob.write_to_path(self.paths[name])

    def server_overrides(self) -> dict[str, str]:
        p = self.paths
        return {"ServerCertFile": p["server_cert"], "ServerKeyFile": p["server_key"],
                "CAFile": p["ca"], "ClientCN": self.CLIENT_CN}

    def client_flags(self, dash: str) -> list[str]:
        p = self.paths
        return [f"{dash}ca", p["ca"], f"{dash}cert", p["client_cert"], f"{dash}key",
                p["client_key"], f"{dash}server-name", self.SERVER_NAME]


def client_command(protocol: str, impl: str, port: int, n: int, syncer: str,
                   gobtool: str | None = None, tls: BenchPKI | None = None, *,
                   hostname: str = "bench") -> list[str]:
    """One client process's command line; every kind prints the same JSON lines."""
    if protocol == "grpc" and impl == "grpcio":
        return [sys.executable, os.path.join(HERE, "grpc_clients.py"),
                "--target", f"127.0.0.1:{port}", "--n", str(n), "--syncer", syncer,
                *(tls.client_flags("--") if tls else [])]
    if impl == "go":
        assert gobtool is not None
        return [gobtool, "fleet", "-addr", f"127.0.0.1:{port}", "-n", str(n),
                "-syncer", syncer, "-hostname", hostname,
                *(tls.client_flags("-") if tls else [])]
    return [sys.executable, "-m", "testbed.fleet_bench", "--protocol", protocol,
            "--addr", f"127.0.0.1:{port}", "--n", str(n), "--syncer", syncer,
            "--hostname", hostname, *(tls.client_flags("--") if tls else [])]


def fleet_commands(protocol: str, impl: str, port: int, clients: int, procs: int,
                   syncer: str = "felix", gobtool: str | None = None,
                   tls: BenchPKI | None = None, *, hostname: str = "bench") -> list[list[str]]:
    """``clients`` spread evenly over ``procs`` client processes (none left empty); process
    ``i``'s agents are named ``{hostname}{i}-<n>``."""
    per = [clients // procs + (i < clients % procs) for i in range(procs)]
    return [client_command(protocol, impl, port, n, syncer, gobtool, tls,
                           hostname=f"{hostname}{i}") for i, n in enumerate(per) if n]


def snapshot_sizes(daemon: Daemon, syncer: str) -> dict:
    """The syncer's snapshot as gob (plain, streamed) and as the snappy-compressed stream."""
    from trio_typha.protocols.gob import encode_once
    snap = daemon.pipelines[syncer].feed.snapshot_point().snapshot()
    raw = encode_once.build_streamed_snapshot(snap, 1000)
    compressed = encode_once.build_compressed_snapshot(snap)
    return {"snapshot_keys": len(snap), "snapshot_gob_bytes": len(raw),
            "snapshot_snappy_bytes": len(compressed),
            "snapshot_value_bytes": sum(len(u.value or b"") for u in snap)}


class GcPauses:
    """Durations of the server process's garbage collections, by generation."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def summary(self) -> dict:
        gc.callbacks.remove(self._callback)
        return {f"gen{g}": {"n": len(p), "max_ms": round(max(p, default=0) * 1e3, 1),
                            "total_ms": round(sum(p) * 1e3, 1)} for g, p in self.pauses.items()}


class RoundLag:
    """Server-side delay: from a datastore event's receipt to the end of the broadcast
    round that wrote it (the rest of the measured delay is the clients' and the kernel's)."""

    def __init__(self, feed: object, pipeline: object) -> None:
        self.lags: list[float] = []
        self.backlog: list[int] = []
        self._pipeline = pipeline
        self.durations: list[float] = []
        self.deliveries = 0
        self._feed = feed
        self._inner = feed.on_round
        feed.on_round = self._on_round

    def _on_round(self, result: object) -> None:
        now = trio.current_time()
        # Datastore events not in the cache yet when the round ends: the cache keeping
        # pace means this stays small, far below the decoupler's capacity.
        self.backlog.append(self._pipeline.pending_events)
        for d in result.delivered:
            self.lags.append(now - d.crumbs[0].origin)
        self.deliveries += result.deliveries
        if self._inner is not None:
            self._inner(result)

    def summary(self) -> dict:
        self._feed.on_round = self._inner
        return {"broadcast_deliveries": self.deliveries, "rounds": len(self.backlog),
                "max_backlog": max(self.backlog, default=0),
                "decoupler_capacity": self._pipeline.channel_size,
                "event_to_round_end": percentiles(self.lags)}


class CacheIngest:
    """Updates the pipeline put into the cache (``CacheFeed.apply``), to tell a cache that
    lags the datastore from clients that lag the cache."""

    def __init__(self, feed: object) -> None:
        self.updates = 0
        self._feed = feed
        self._inner = feed.apply
        feed.apply = self._apply

    def _apply(self, updates: list, origin: float | None = None) -> list:
        self.updates += len(updates)
        return self._inner(updates, origin)

    def close(self) -> int:
        self._feed.apply = self._inner
        return self.updates


class ServerProcesses:
    """CPU and memory of the server: this process plus its ServerWorkers workers."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def pids(self) -> list[int]:
        workers = self.daemon.workers.workers if self.daemon.workers is not None else []
        return [os.getpid(), *(w.pid for w in workers if w.pid and w.running)]

    def cpu(self) -> float:
        """CPU seconds of the server's processes so far (/proc/PID/stat, all threads)."""
        return process_cpu_seconds(self.pids())

    def worker_cpu(self) -> list[float]:
        """CPU seconds of each worker process so far (0.0 for one that is gone)."""
        return [process_cpu_seconds([pid]) for pid in self.pids()[1:]]

    def _status(self, key: str) -> float:
        out = 0.0
        for pid in self.pids()[1:]:
            try:
                with open(f"/proc/{pid}/status") as fh:
                    for line in fh:
                        if line.startswith(key):
                            out += int(line.split()[1]) / 1024
            except OSError:
                pass
        return out

    def rss(self) -> float:
        return current_rss_mib() + self._status("VmRSS:")

    def peak_rss(self) -> float:
        return rss_peak_mib() + self._status("VmHWM:")


class ClientFleet:
    """The client processes and the runner's side of their JSON-lines contract: an
    ``in_sync`` line from each, a ``count`` line for each line sent, a ``done`` line once
    stdin closes."""

    def __init__(self, commands: list[list[str]]) -> None:
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True) for cmd in commands]

    async def _line(self, p: subprocess.Popen) -> dict:
        return json.loads(await trio.to_thread.run_sync(p.stdout.readline))

    async def in_sync(self) -> list[dict]:
        return [await self._line(p) for p in self.procs]

    async def in_sync_errors(self) -> list[str]:
        """Wait for every process's ``in_sync`` line; the errors they report."""
        return [e for line in await self.in_sync() for e in line.get("errors", [])]

    async def stamped(self) -> int:
        """Churn-stamped updates the clients have received in sync so far (a count line)."""
        for p in self.procs:
            p.stdin.write("\n")
            p.stdin.flush()
        return sum([(await self._line(p))["stamped"] for p in self.procs])

    def cpu(self) -> float:
        return process_cpu_seconds(p.pid for p in self.procs)

    async def done(self) -> list[dict]:
        out = []
        for p in self.procs:
            p.stdin.close()
            out.append(await self._line(p))
            await trio.to_thread.run_sync(p.wait)
        return out


async def drain(fleet: ClientFleet, expected: int, limit: float) -> dict:
    """After the churn: wait up to ``limit`` s for the clients to receive every update,
    noting what had arrived by the churn's end, 1 s after it, and when the last came."""
    t0 = trio.current_time()
    at_end = got = await fleet.stamped()
    one_s = None
    while True:
        elapsed = trio.current_time() - t0
        if one_s is None and elapsed >= 1.0:
            one_s = got
        if got >= expected or elapsed >= limit:
            break
        await trio.sleep(0.1)
        got = await fleet.stamped()
    frac = (lambda n: round(n / expected, 4) if expected else None)  # noqa: E731
    return {"delivered_at_churn_end": frac(at_end),
            "delivered_1s_after": frac(one_s if one_s is not None else got),
            "drain_s": round(trio.current_time() - t0, 2) if got >= expected else None,
            "drain_limit_s": limit}


class MemoryCluster:
    """The synthetic cluster in the memory datastore, churned in this process."""

    def __init__(self, cluster: str) -> None:
        self.store = MemoryStore()
        self.objects = self.store.put_all(generate(cluster))
        self.overrides = {"DatastoreType": "memory"}
        self.writes = 0

    async def churn(self, rate: float, seconds: float) -> None:
        churn = Churn(self.store, rate, policy_fraction=0.0)
        try:
            with trio.move_on_after(seconds):
                await churn.run()
        finally:
            self.writes = churn.writes


class EtcdCluster:
    """The cluster as Calico v3 resources in a real etcd, churned by another process."""

    def __init__(self, cluster: str, etcd: object, objects: int) -> None:
        self.cluster = cluster
        self.url = etcd.url
        self.objects = objects
        self.store = None
        self.overrides = {"DatastoreType": "etcdv3", "EtcdEndpoints": etcd.url}
        self.writes = 0

    async def churn(self, rate: float, seconds: float) -> None:
        done = await trio.run_process(
            [sys.executable, os.path.join(HERE, "etcd_cluster.py"), "churn", "--url",
             self.url, "--cluster", self.cluster, "--rate", str(rate), "--seconds",
             str(seconds)], capture_stdout=True)
        self.writes = json.loads(done.stdout)["writes"]


@contextlib.asynccontextmanager
async def datastore(args: argparse.Namespace) -> AsyncIterator[MemoryCluster | EtcdCluster]:
    if getattr(args, "datastore", "memory") == "memory":
        yield MemoryCluster(args.cluster)
        return
    sys.path.insert(0, os.path.dirname(HERE))
    import etcd_cluster

    from tests.etcd_server import run_etcd
    async with run_etcd() as etcd, etcd.client() as client:
        objects = await etcd_cluster.load(client, args.cluster)
        yield EtcdCluster(args.cluster, etcd, objects)


async def run(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    async with datastore(args) as cluster:
        return await _run(args, cluster, time.monotonic() - started)


async def _run(args: argparse.Namespace, cluster: MemoryCluster | EtcdCluster,
               load_s: float) -> dict:
    cfg = load_config({}, overrides={
        **cluster.overrides, "ServerHost": "127.0.0.1",
        "SnapshotReuseAgeSecs": str(args.snapshot_reuse),
        "CacheWakeIntervalSecs": str(args.wake_interval),
        "ServerPingIntervalSecs": "10",
        "ServerWorkers": str(getattr(args, "workers", 1)),
        **(args.tls.server_overrides() if getattr(args, "tls", None) else {})})
    result: dict = {"bench": "fanout", "wake_interval": args.wake_interval,
                    "protocol": args.protocol, "datastore": cluster.overrides["DatastoreType"],
                    "client_impl": args.client_impl, "clients": args.clients,
                    "tls": bool(getattr(args, "tls", None)),
                    "cluster": args.cluster, "objects": cluster.objects, "rate": args.rate,
                    "churn_seconds": args.seconds, "store_load_s": round(load_s, 2)}
    async with trio.open_nursery() as nursery:
        daemon = await nursery.start(Daemon(cfg, store=cluster.store,
                                            listen_port=args.port).run)
        t0 = trio.current_time()
        await daemon.wait_in_sync()
        while daemon.workers is not None and not daemon.workers.ready:  # noqa: ASYNC110 (polled)
            await trio.sleep(0.1)
        procs_of = ServerProcesses(daemon)
        result["server_in_sync_s"] = round(trio.current_time() - t0, 2)
        result["felix_keys"] = len(daemon.pipelines["felix"].feed.cache)
        port = daemon.ports["server"]
        cpu0 = procs_of.cpu()
        fleet = ClientFleet(fleet_commands(args.protocol, args.client_impl, port,
                                           args.clients, args.procs, args.syncer,
                                           args.gobtool, getattr(args, "tls", None)))
        t_start = trio.current_time()
        in_sync = await fleet.in_sync()
        result["all_in_sync_s"] = round(trio.current_time() - t_start, 2)
        result["snapshot_cpu_s"] = round(procs_of.cpu() - cpu0, 2)
        result["client_errors"] = [e for r in in_sync for e in r.get("errors", [])]
        result["clients_not_in_sync"] = sum(r.get("not_in_sync", 0) for r in in_sync)
        result["stuck_clients"] = [s for r in in_sync for s in r.get("stuck", [])]
        if daemon.workers is not None:
            result["worker_clients"] = [w.open for w in daemon.workers.workers]
        workers_cpu1 = procs_of.worker_cpu()
        seq1 = daemon.pipelines[args.syncer].feed.latest.seq
        gc_pauses = GcPauses()
        rounds = RoundLag(daemon.pipelines[args.syncer].feed, daemon.pipelines[args.syncer])
        # The churn window: CPU of the server (and of the clients) and the updates the
        # clients received between its start and its end, sampled at both ends.
        cpu1, fleet_cpu1, wall1 = procs_of.cpu(), fleet.cpu(), trio.current_time()
        stamped1 = await fleet.stamped()
        ingest = CacheIngest(daemon.pipelines[args.syncer].feed)
        if args.seconds > 0 and args.rate > 0:
            await cluster.churn(args.rate, args.seconds)
        cpu2, fleet_cpu2, wall2 = procs_of.cpu(), fleet.cpu(), trio.current_time()
        result["churn_deliveries"] = await fleet.stamped() - stamped1
        result["churn_writes"] = cluster.writes
        result["churn_cpu_s"] = round(cpu2 - cpu1, 2)
        result["churn_wall_s"] = round(wall2 - wall1, 2)
        result["fleet_cpu_s"] = round(fleet_cpu2 - fleet_cpu1, 2)
        result["socket_queues_at_churn_end"] = socket_queues(port)
        result["sessions_behind_at_churn_end"] = sum(
            1 for i in daemon.ctx.sessions.values() if i.lag()[0] > 0)
        # Writes not in the cache when the churn ends (each pod write is one felix update),
        # and of those, the events the pipeline holds (the rest wait in the watcher).
        result["writes_not_in_cache_at_churn_end"] = cluster.writes - ingest.close()
        result["pipeline_pending_at_churn_end"] = daemon.pipelines[args.syncer].pending_events
        result["churn_breadcrumbs"] = daemon.pipelines[args.syncer].feed.latest.seq - seq1
        if workers_cpu1:
            # A worker's own cost per breadcrumb (its clients' writes included).
            result["worker_churn_cpu_s"] = [
                round(b - a, 2) for a, b in zip(workers_cpu1, procs_of.worker_cpu(), strict=False)]
        result["gc_during_churn"] = gc_pauses.summary()
        result["server_side"] = rounds.summary()
        result["server_rss_with_clients_mib"] = round(procs_of.rss(), 1)
        result["expected_deliveries"] = cluster.writes * args.clients
        if result["expected_deliveries"]:
            result.update(await drain(fleet, result["expected_deliveries"], args.drain))
        else:
            await trio.sleep(1)
        result["bytes_sent_total"] = sum(i.bytes_sent for i in daemon.ctx.sessions.values())
        result["sessions_at_end"] = len(daemon.ctx.sessions)
        # Storm, churn and drain: everything the clients cost the server.  Read before the
        # clients' delay lists (millions of floats at 1000 x 200) are parsed in this process.
        result["server_cpu_with_clients_s"] = round(procs_of.cpu() - cpu0, 2)
        result["server_cpu_total_s"] = round(procs_of.cpu(), 2)
        result["server_peak_rss_mib"] = round(procs_of.peak_rss(), 1)
        delays: list[float] = []
        for done in await fleet.done():
            delays.extend(done["delays"])
            result["client_errors"] += done.get("errors", [])
        result.update(snapshot_sizes(daemon, args.syncer))
        result["delay"] = percentiles(delays)
        result["server_processes"] = len(procs_of.pids())
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
    p.add_argument("--workers", type=int, default=1, help="ServerWorkers for the server")
    p.add_argument("--datastore", choices=("memory", "etcdv3"), default="memory",
                   help="etcdv3: a real etcd is started, loaded and churned from another "
                   "process")
    p.add_argument("--syncer", default="felix")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--drain", type=float, default=DRAIN_S,
                   help="after the churn, wait up to this long for the clients to receive "
                   "every update")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--wake-interval", type=float, default=0.0,
                   help="CacheWakeIntervalSecs for the server (0: wake clients per update)")
    p.add_argument("--snapshot-reuse", type=float, default=1.0,
                   help="SnapshotReuseAgeSecs for the server")
    p.add_argument("--log-level", default="WARNING", help="server log level (to stderr)")
    p.add_argument("--tls", action="store_true",
                   help="mutual TLS with trustme certificates")
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
    args.tls = BenchPKI() if args.tls else None
    args.gobtool = build_gobtool() if args.client_impl == "go" else None
    report(trio.run(run, args))


if __name__ == "__main__":
    main()
