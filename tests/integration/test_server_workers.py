"""ServerWorkers: worker processes share the port and follow the primary's caches.

Real processes: the primary (this test's daemon, memory datastore) starts its workers with
``python -m trio_typha.follower``; the primary accepts on the port and passes each
socket to the least-loaded process (SCM_RIGHTS), and the workers follow the primary over
its private Unix socket.  Clients are Typha gob clients (snappy and legacy) and gRPC
clients.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import trio

from testbed.cluster import v3
from trio_typha.cache.core import Breadcrumb
from trio_typha.client.grpc import apply_event, sync
from trio_typha.client.typha import TyphaClient
from trio_typha.client.view import SyncView
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.protocols.gob import encode_once as gob_encodings
from trio_typha.upstream.wire import ENCODINGS
from trio_typha.workers.control import METRICS

SETTLE = 30  # bound for every wait below (polls: the workers are other processes)


def config(workers: int) -> Any:
    return load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": str(workers),
        "HealthEnabled": "true", "HealthHost": "127.0.0.1", "HealthPort": "0",
        "PrometheusMetricsEnabled": "true", "PrometheusMetricsHost": "127.0.0.1",
        "PrometheusMetricsPort": "0", "ShutdownTimeoutSecs": "2",
        "ShutdownConnectionDropIntervalMaxSecs": "0.05"})


def policy(i: int, port: int) -> dict[str, Any]:
    return v3("GlobalNetworkPolicy", f"w-{i}", {
        "order": 10, "selector": "all()", "types": ["Ingress"],
        "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": [port]}}]})


async def poll(predicate: Any) -> None:
    with trio.fail_after(SETTLE):
        while not predicate():  # noqa: ASYNC110 (other processes: nothing to wait on)
            await trio.sleep(0.1)


async def follow_gob(client: TyphaClient) -> None:
    async for _ in client:
        pass


async def follow_grpc(port: int, view: SyncView, name: str) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async for event in sync(stream, "felix", hostname=name):
        apply_event(view, event)


def values(kvs: dict[str, Any]) -> dict[str, bytes | None]:
    return {k: u.value for k, u in kvs.items()}


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False, timeout=5) as http:
        return await http.get(f"http://127.0.0.1:{port}{path}")


class Recorded(trio.abc.Stream):
    """A client's TCP stream that keeps every byte the server sent."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.received = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.stream.receive_some(max_bytes)
        self.received += data
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


def recording(port: int, into: list[Recorded]) -> Any:
    async def open_stream() -> trio.abc.Stream:
        stream = Recorded(await trio.open_tcp_stream("127.0.0.1", port))
        into.append(stream)
        return stream
    return open_stream


def encodings_built(metrics: str) -> dict[str, float]:
    out = {}
    for line in metrics.splitlines():
        if line.startswith("typha_breadcrumb_encodings_built{"):
            name, _, value = line.rpartition(" ")
            out[name.split('encoding="')[1].split('"')[0]] = float(value)
    return out


def chain(start: Breadcrumb) -> list[Breadcrumb]:
    out = []
    crumb = start
    while crumb.next is not None:
        crumb = crumb.next
        out.append(crumb)
    return out


async def start(nursery: trio.Nursery, workers: int) -> tuple[Daemon, MemoryStore]:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    daemon = await nursery.start(Daemon(config(workers), store=store, listen_port=0).run)
    await daemon.wait_in_sync()
    await poll(lambda: daemon.workers is not None and daemon.workers.ready)
    return daemon, store


async def test_mixed_fleet_over_workers_gets_identical_kv_sets() -> None:
    with trio.fail_after(4 * SETTLE):
        async with trio.open_nursery() as nursery:
            daemon = await mixed_fleet(nursery)
    # Shutdown drained the workers too: their processes are gone.
    assert all(not os.path.exists(f"/proc/{w.pid}")  # noqa: ASYNC240
               for w in daemon.workers.workers)


async def mixed_fleet(nursery: trio.Nursery) -> Daemon:
    daemon, store = await start(nursery, 3)  # the primary and two workers
    port = daemon.ports["server"]
    streams: list[list[Recorded]] = [[] for _ in range(12)]
    gob = [TyphaClient("127.0.0.1", port, hostname=f"gob-{i}", compression=i % 2 == 0,
                       open_stream=recording(port, streams[i]))
           for i in range(12)]
    felix = daemon.pipelines["felix"].feed
    views = [SyncView() for _ in range(6)]
    async with trio.open_nursery() as clients:
        for c in gob:
            clients.start_soon(follow_gob, c)
        for i, v in enumerate(views):
            clients.start_soon(follow_grpc, port, v, f"grpc-{i}")
        cache = felix.cache

        def converged() -> bool:
            want = cache.values_by_key()
            return (all(values(c.kvs) == want for c in gob)
                    and all(values(v.kvs) == want for v in views))

        await poll(converged)  # every client has its snapshot: the writes come as deltas
        before_writes = felix.latest
        for i in range(20):
            store.put(policy(i % 5, 1000 + i))
            await trio.sleep(0.01)
        await poll(converged)
        # Spread over more than one process, and the primary counts all of them.
        await poll(lambda: sum(w.open for w in daemon.workers.workers) > 0)
        doc = (await get(daemon.ports["health"], "/connections")).json()
        served_by = {row.get("worker") for row in doc["connections"]}
        assert len(served_by) >= 2
        # Each worker reports its count on its channel as a connection comes or goes.
        await poll(lambda: sum(w.open for w in daemon.workers.workers)
                   + len(daemon.connections) == 18)
        # The primary passes each connection to the least-loaded process: 6 each (+-1).
        doc = (await get(daemon.ports["health"], "/connections")).json()
        per_process = [sum(row.get("worker") == w for row in doc["connections"])
                       for w in (None, 1, 2)]
        assert sum(per_process) == 18 and max(per_process) - min(per_process) <= 2, \
            per_process
        # The primary asks every worker for its metrics when it is scraped: already exact.
        metrics = (await get(daemon.ports["metrics"], "/metrics")).text
        active = [line for line in metrics.splitlines()
                  if line.startswith("typha_connections_active ")]
        assert active == ["typha_connections_active 18.0"]
        assert (await get(daemon.ports["health"], "/readiness")).status_code == 200
        await workers_send_the_primarys_encodings(daemon, doc, gob, streams,
                                                  chain(before_writes))
        clients.cancel_scope.cancel()
    for c in gob:
        await c.aclose()
    daemon.shutdown()
    return daemon


async def workers_send_the_primarys_encodings(
        daemon: Daemon, doc: dict[str, Any], gob: list[TyphaClient],
        streams: list[list[Recorded]], crumbs: list[Breadcrumb]) -> None:
    """The workers build no delta encoding: they send the bytes the primary built (for
    every enabled protocol, whether or not the primary has clients of it)."""
    changes = [c for c in crumbs if c.updates]
    assert len(changes) >= 10  # 20 writes (the pipeline may fold a few into one)
    names = {e.name for e in ENCODINGS}
    for w in daemon.workers.workers:
        assert w.link is not None
        exposition = await w.link.query(METRICS)
        assert exposition is not None
        built = encodings_built(exposition.decode())
        assert built == dict.fromkeys(names, 0.0), f"worker {w.index} encoded {built}"
    own = encodings_built((await get(daemon.ports["metrics"], "/metrics")).text)
    assert set(own) == names and all(own[n] >= len(changes) for n in names), own
    # Each process holds its share of the replica's connection limit (10000 over 3).
    documents = await daemon.workers.documents()
    assert sorted(documents) == [1, 2]
    assert all(doc["connection_limit"] == 3334 for doc in documents.values())
    # A new limit for the replica (as Kubernetes rebalancing sets it) reaches every worker
    # on its control channel: its new share.
    assert daemon.governor is not None
    daemon.governor.set_limit(900)
    with trio.fail_after(SETTLE):
        while {doc["connection_limit"] for doc in documents.values()} != {300}:
            await trio.sleep(0.05)
            documents = await daemon.workers.documents()
    # Byte for byte: a worker's client got the primary's encodings of these breadcrumbs.
    on_worker = {row["hostname"] for row in doc["connections"] if row.get("worker")}
    checked = 0
    for client, recorded in zip(gob, streams, strict=True):
        if client.hostname not in on_worker:
            continue
        received = bytes(recorded[-1].received)
        per_crumb = (gob_encodings.deltas_chunks if client.compression
                     else gob_encodings.deltas)
        assert all(per_crumb(c) in received for c in changes)
        checked += 1
    assert checked > 0


async def test_killed_worker_is_restarted_and_its_clients_lose_nothing(nursery) -> None:
    daemon, store = await start(nursery, 2)
    port = daemon.ports["server"]
    pool = daemon.workers
    assert pool is not None
    clients = [TyphaClient("127.0.0.1", port, hostname=f"c-{i}", reconnect=True)
               for i in range(16)]
    async with trio.open_nursery() as following:
        for c in clients:
            following.start_soon(follow_gob, c)
        cache = daemon.pipelines["felix"].feed.cache
        await poll(lambda: all(values(c.kvs) == cache.values_by_key() for c in clients))
        await poll(lambda: pool.workers[0].open > 0)  # the worker has some
        old_pid = pool.workers[0].pid
        assert pool.kill(1) == old_pid
        # Readiness reflects the dead worker until it is back.
        await poll(lambda: not pool.ready)
        assert (await get(daemon.ports["health"], "/readiness")).status_code == 503
        for i in range(10):  # changes while its clients are reconnecting
            store.put(policy(i, 2000 + i))
            await trio.sleep(0.02)
        await poll(lambda: pool.ready and pool.workers[0].pid != old_pid)
        assert pool.workers[0].restarts == 1
        assert (await get(daemon.ports["health"], "/readiness")).status_code == 200
        await poll(lambda: all(values(c.kvs) == cache.values_by_key() for c in clients))
        following.cancel_scope.cancel()
    for c in clients:
        await c.aclose()
    daemon.shutdown()
