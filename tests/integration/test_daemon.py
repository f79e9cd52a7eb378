"""The whole daemon in-process: memory datastore, both protocols on one port, health, metrics."""

from __future__ import annotations

import httpx
import pytest
import trio

from testbed.cluster import k8s_namespace
from trio_typha.client import grpc as g
from trio_typha.client.view import SyncView
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model.kv import SYNCER_TYPES, SyncStatus


def config(**extra: str):
    overrides = {"DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
                 "HealthEnabled": "true", "HealthPort": "0", "HealthHost": "127.0.0.1",
                 "PrometheusMetricsEnabled": "true", "PrometheusMetricsPort": "0",
                 "PrometheusMetricsHost": "127.0.0.1", "ShutdownTimeoutSecs": "5",
                 "ServerDrainTimeoutSecs": "2", **extra}
    return load_config({}, config_file=None, overrides=overrides)


async def grpc_view(port: int, syncer: str, *, stop_when_in_sync: bool = True) -> SyncView:
    view = SyncView()
    stream = await g.open_stream("127.0.0.1", port)
    async with stream:
        async for ev in g.sync(stream, syncer, hostname="test"):
            g.apply_event(view, ev)
            if stop_when_in_sync and view.snapshot_done and view.in_sync:
                break
    return view


@pytest.fixture
async def daemon(nursery):
    store = MemoryStore()
    store.put_all(generate("tiny"))
    d = Daemon(config(), store=store, listen_port=0)
    await nursery.start(d.run)
    with trio.fail_after(10):
        await d.wait_in_sync()
    yield d
    d.shutdown()


async def test_health_readiness_and_metrics(daemon) -> None:
    async with httpx.AsyncClient() as http:
        ready = await http.get(f"http://127.0.0.1:{daemon.ports['health']}/readiness")
        live = await http.get(f"http://127.0.0.1:{daemon.ports['health']}/liveness")
        missing = await http.get(f"http://127.0.0.1:{daemon.ports['health']}/other")
        metrics = await http.get(f"http://127.0.0.1:{daemon.ports['metrics']}/metrics")
    assert ready.status_code == 200 and live.status_code == 200 and missing.status_code == 404
    for syncer in SYNCER_TYPES:
        assert f"{syncer}-cache" in ready.text
    assert "reporting ready" in ready.text
    body = metrics.text
    assert 'typha_cache_size{syncer="felix"}' in body
    assert "typha_connections_accepted " in body  # Typha's name, no _total suffix
    assert "typha_updates_total{" in body


async def test_every_syncer_serves_its_snapshot_over_grpc(daemon) -> None:
    port = daemon.ports["server"]
    for syncer in SYNCER_TYPES:
        with trio.fail_after(10):
            view = await grpc_view(port, syncer)
        cache = daemon.pipelines[syncer].feed.cache
        assert view.status is SyncStatus.IN_SYNC
        assert view.as_dict() == cache.values_by_key()


async def test_updates_flow_after_snapshot(daemon) -> None:
    port = daemon.ports["server"]
    view = SyncView()
    stream = await g.open_stream("127.0.0.1", port)
    async with stream:
        events = g.sync(stream, "felix", hostname="test")
        with trio.fail_after(10):
            async for ev in events:
                g.apply_event(view, ev)
                if view.snapshot_done:
                    break
            before = len(view.kvs)
            daemon.store.put(k8s_namespace("brand-new", labels={"x": "y"}))
            async for ev in events:
                g.apply_event(view, ev)
                if len(view.kvs) > before:
                    break
    cache = daemon.pipelines["felix"].feed.cache
    assert view.as_dict() == cache.values_by_key()


async def test_readiness_503_before_sync(nursery) -> None:
    from trio_typha.observe.health import Health, Report
    h = Health()
    h.register("felix-cache", lambda: Report(live=True, ready=False, detail="syncer status x"))
    status, _, body = h.handle("/readiness")
    assert status == 503 and b"reporting non-ready" in body and b"syncer status x" in body


async def typha_view(port: int, syncer: str, *, compression: bool = True) -> dict:
    from trio_typha.client.typha import TyphaClient
    async with TyphaClient("127.0.0.1", port, syncer_type=syncer, hostname="test",
                           compression=compression) as client:
        await client.wait_for_status(SyncStatus.IN_SYNC)
        return {k: u.value for k, u in client.kvs.items()}


async def test_mixed_fleet_gob_and_grpc_get_identical_kvs(daemon) -> None:
    """Both protocols on port 5473 deliver the same keys and value bytes for every syncer."""
    port = daemon.ports["server"]
    for syncer in SYNCER_TYPES:
        with trio.fail_after(20):
            grpc_kvs = (await grpc_view(port, syncer)).as_dict()
            gob_kvs = await typha_view(port, syncer)
            legacy_kvs = await typha_view(port, syncer, compression=False)
        expected = daemon.pipelines[syncer].feed.cache.values_by_key()
        assert grpc_kvs == gob_kvs == legacy_kvs == expected
        assert expected  # every syncer has something to serve in the tiny cluster
    m = daemon.metrics
    for syncer in SYNCER_TYPES:
        # each syncer: one compressed snapshot built, three snapshots sent (gRPC, gob, legacy)
        assert m.snapshots_generated.labels(syncer=syncer)._value.get() == 1
        sent = m.client_snapshot_send_secs.labels(syncer=syncer).count
        assert sent == 3


async def test_shutdown_drains_connected_clients(nursery) -> None:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    d = Daemon(config(ShutdownConnectionDropIntervalMaxSecs="0.1"), store=store, listen_port=0)
    done = trio.Event()

    async def run_daemon(task_status=trio.TASK_STATUS_IGNORED) -> None:
        await d.run(task_status=task_status)
        done.set()

    await nursery.start(run_daemon)
    with trio.fail_after(10):
        await d.wait_in_sync()
    port = d.ports["server"]
    from trio_typha.client.typha import TyphaClient, TyphaDisconnected
    client = TyphaClient("127.0.0.1", port, syncer_type="bgp", hostname="t")
    stream = await g.open_stream("127.0.0.1", port)
    grpc_events = g.sync(stream, "felix")
    with trio.fail_after(10):
        await client.wait_for_status(SyncStatus.IN_SYNC)
        async for ev in grpc_events:
            if isinstance(ev, g.Finished):
                break
    d.shutdown()
    with trio.fail_after(10):
        with pytest.raises(g.GrpcError) as grpc_end:
            async for _ in grpc_events:
                pass
        with pytest.raises(TyphaDisconnected):
            async for _ in client.batches():
                pass
        await done.wait()
    assert grpc_end.value.code.name == "UNAVAILABLE"
    assert len(d.connections) == 0
    await stream.aclose()
    await client.aclose()
