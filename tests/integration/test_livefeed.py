"""The live feed: ``/feed`` on the health port, read by a trio-websocket client."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from trio_websocket import ConnectionRejected, open_websocket_url

from testbed.fleet import AgentGroup, DiscoverySpec, agent_specs
from trio_typha.client.discovery import ReconnectPolicy
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon

HANG = 30  # hang protection only


async def test_feed_streams_replica_numbers(nursery: trio.Nursery) -> None:
    cfg = load_config({}, overrides={
        "DatastoreType": "memory", "MemoryDemoCluster": "tiny", "MemoryChurnRate": "50",
        "ServerHost": "127.0.0.1", "ServerWorkers": "1", "HealthEnabled": "true", "HealthHost": "127.0.0.1",
        "HealthPort": "0"})
    daemon = Daemon(cfg, listen_port=0)
    await nursery.start(daemon.run)
    port, health = daemon.ports["server"], daemon.ports["health"]
    specs = agent_specs(6, grpc_share=0.5, syncers=("felix", "bgp"))
    group = AgentGroup(specs, DiscoverySpec(static=(f"127.0.0.1:{port}",)), ReconnectPolicy())
    await nursery.start(group.run)
    with trio.fail_after(HANG):
        await group.wait_until(lambda g: g.stats()["in_sync"] == 6)

    async with open_websocket_url(f"ws://127.0.0.1:{health}/feed") as ws:
        with trio.fail_after(HANG):
            samples = [json.loads(await ws.get_message()) for _ in range(3)]
    first, last = samples[0], samples[-1]
    assert first["type"] == "replica" and first["replica"] == f"127.0.0.1:{port}"
    assert last["connections"] == 6
    # agent_specs alternates syncers and interleaves protocols: gob gets felix, bgp, felix.
    expected: dict[str, dict[str, int]] = {}
    for s in specs:
        proto = "grpc" if s.protocol == "grpc" else "typha-gob"
        expected.setdefault(proto, {}).setdefault(s.syncer, 0)
        expected[proto][s.syncer] += 1
    assert last["sessions"] == expected
    assert set(last["seq"]) == {"felix", "bgp", "tunnel-ip-allocation", "node-status"}
    assert last["seq"]["felix"] > first["seq"]["felix"]  # churn moves the felix cache on
    assert last["seq"]["felix"] <= daemon.pipelines["felix"].feed.latest.seq
    assert last["updates_per_s"]["felix"] > 5  # 50 writes/s, most of them felix keys
    assert last["bytes_per_s"] > 0
    assert last["lag_p99_ms"] >= last["lag_p50_ms"] >= 0
    # The memory datastore runs no watch streams; the demo's test shows a KDD replica's.
    assert last["watches"] == {"count": 0, "stale": [], "max_silent_s": 0.0}
    assert 0.5 < samples[2]["time"] - samples[1]["time"] < 2  # once a second

    async with httpx.AsyncClient() as http:  # a plain GET is not a WebSocket
        assert (await http.get(f"http://127.0.0.1:{health}/feed")).status_code == 404
        assert (await http.get(f"http://127.0.0.1:{health}/readiness")).status_code == 200


async def test_feed_connections_are_capped(nursery: trio.Nursery,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from trio_typha.observe import httpd
    monkeypatch.setattr(httpd, "_MAX_WEBSOCKETS", 2)
    cfg = load_config({}, overrides={
        "DatastoreType": "memory", "MemoryDemoCluster": "tiny", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
        "HealthEnabled": "true", "HealthHost": "127.0.0.1", "HealthPort": "0"})
    daemon = Daemon(cfg, listen_port=0)
    await nursery.start(daemon.run)
    url = f"ws://127.0.0.1:{daemon.ports['health']}/feed"
    async with open_websocket_url(url) as a, open_websocket_url(url) as b:
        await a.get_message()
        await b.get_message()
        with pytest.raises(ConnectionRejected) as exc:
            async with open_websocket_url(url):
                pass
        assert exc.value.status_code == 503
    async with open_websocket_url(url) as c:  # slots are given back on close
        assert json.loads(await c.get_message())["connections"] == 0
