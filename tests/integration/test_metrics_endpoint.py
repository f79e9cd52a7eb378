"""/metrics as Typha's dashboards read it: parsed with prometheus_client's own parser, with
the quantiles Go Typha exports; runtime/process collectors switchable; HTTPS with client
certificates (PrometheusMetrics{Cert,Key,CA}File, ClientAuth); bound to the configured host."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import HANG, daemon_config, running_daemon
from trio_typha.client.typha import TyphaClient
from trio_typha.config import ConfigError
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryDatastore, MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model.kv import SyncStatus

QUANTILE_SUMMARIES = ("typha_client_latency_secs", "typha_ping_latency", "typha_kvs_per_msg",
                      "typha_client_snapshot_send_secs", "typha_breadcrumb_size")


STORE: dict[int, MemoryStore] = {}


@contextlib.asynccontextmanager
async def metrics_daemon(**extra: str) -> AsyncIterator[Daemon]:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    cfg = daemon_config(**{"DatastoreType": "memory", "PrometheusMetricsEnabled": "true",
                           "PrometheusMetricsPort": "0", "PrometheusMetricsHost": "127.0.0.1",
                           "ServerPingIntervalSecs": "0.05", **extra})
    async with running_daemon(cfg, datastore=MemoryDatastore(store)) as d:
        with trio.fail_after(HANG):
            await d.wait_in_sync()
        STORE[id(d)] = store
        yield d


async def scrape(url: str, **client: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(**client) as http:
        resp = await http.get(url)
    assert resp.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(resp.text)}


async def drain(client: TyphaClient) -> None:
    async for _ in client.batches():
        pass


async def test_summaries_carry_go_quantiles_and_parse(tmp_path: Path) -> None:
    async with metrics_daemon() as d, \
            TyphaClient("127.0.0.1", d.ports["server"], syncer_type="felix") as c, \
            trio.open_nursery() as reader:
        with trio.fail_after(HANG):
            await c.wait_for_status(SyncStatus.IN_SYNC)
        reader.start_soon(drain, c)  # the client answers pings while it reads
        with trio.fail_after(HANG):
            # A few pings and updates, so latencies are observed.
            node = next(o for o in generate("tiny") if o["kind"] == "Node")
            for i in range(5):
                STORE[id(d)].put_all([{**node, "metadata": {
                    **node["metadata"], "labels": {"n": str(i)}}}])
                await trio.sleep(0.06)
            while d.metrics.ping_latency.labels(syncer="felix").count < 2:  # noqa: ASYNC110
                await trio.sleep(0.02)
        families = await scrape(f"http://127.0.0.1:{d.ports['metrics']}/metrics")
        reader.cancel_scope.cancel()
    for name in QUANTILE_SUMMARIES:
        family = families[name]
        assert family.type == "summary"
        felix = [s for s in family.samples if s.labels.get("syncer") == "felix"]
        quantiles = {s.labels["quantile"] for s in felix if "quantile" in s.labels}
        assert quantiles == {"0.5", "0.9", "0.99"}, name
        assert {s.labels["syncer"] for s in family.samples} >= {
            "felix", "bgp", "tunnel-ip-allocation", "node-status"}
    ping = {s.labels.get("quantile"): s.value for s in families["typha_ping_latency"].samples
            if s.labels["syncer"] == "felix"}
    assert 0 < ping["0.5"] <= ping["0.9"] <= ping["0.99"] < 5
    assert any(s.name == "typha_ping_latency_count" and s.labels["syncer"] == "felix"
               and s.value >= 2 for s in families["typha_ping_latency"].samples)
    latency = [s for s in families["typha_client_latency_secs"].samples
               if s.labels["syncer"] == "felix" and s.labels.get("quantile") == "0.99"]
    assert latency and latency[0].value >= 0  # observed: not NaN
    # Process and runtime collectors on by default (Typha's defaults).
    assert "process_resident_memory_bytes" in families
    assert "python_gc_objects_collected" in families and "python_info" in families


async def test_process_and_runtime_collectors_can_be_switched_off() -> None:
    async with metrics_daemon(PrometheusProcessMetricsEnabled="false",
                              PrometheusGoMetricsEnabled="false") as d:
        families = await scrape(f"http://127.0.0.1:{d.ports['metrics']}/metrics")
    assert not [n for n in families if n.startswith(("process_", "python_"))]
    assert "typha_connections_active" in families
    async with metrics_daemon(PrometheusProcessMetricsEnabled="true",
                              PrometheusGoMetricsEnabled="false") as d:
        families = await scrape(f"http://127.0.0.1:{d.ports['metrics']}/metrics")
    assert "process_resident_memory_bytes" in families and "python_info" not in families


@pytest.fixture(scope="module")
def metrics_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("metrics-pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", common_name="typha-metrics")
    paths = {"ca": d / "ca.pem", "cert": d / "cert.pem", "key": d / "key.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    return {"ca": ca, "paths": paths, "scraper": ca.issue_cert("prometheus")}


async def test_metrics_over_https_with_client_certificates(metrics_pki: dict[str, Any]) -> None:
    p = metrics_pki["paths"]
    async with metrics_daemon(PrometheusMetricsCertFile=str(p["cert"]),
                              PrometheusMetricsKeyFile=str(p["key"]),
                              PrometheusMetricsCAFile=str(p["ca"]),
                              PrometheusMetricsClientAuth="RequireAndVerifyClientCert") as d:
        url = f"https://127.0.0.1:{d.ports['metrics']}/metrics"
        good = ssl.create_default_context()
        metrics_pki["ca"].configure_trust(good)
        metrics_pki["scraper"].configure_cert(good)
        families = await scrape(url, verify=good)
        assert "typha_connections_active" in families
        anonymous = ssl.create_default_context()
        metrics_pki["ca"].configure_trust(anonymous)
        with pytest.raises(httpx.HTTPError):
            await scrape(url, verify=anonymous)
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the HTTPS port
            await scrape(url.replace("https", "http"))


async def refused(host: str, port: int) -> bool:
    with trio.socket.socket() as sock:
        try:
            await sock.connect((host, port))
        except ConnectionRefusedError:
            return True
    return False


async def test_metrics_and_health_listen_only_on_their_configured_host() -> None:
    """PrometheusMetricsHost / HealthHost = 127.0.0.2 (Linux routes all of 127/8 to lo):
    served there, and nothing listens on that port at 127.0.0.1."""
    async with metrics_daemon(PrometheusMetricsHost="127.0.0.2", HealthHost="127.0.0.2") as d:
        metrics, health = d.ports["metrics"], d.ports["health"]
        families = await scrape(f"http://127.0.0.2:{metrics}/metrics")
        assert "typha_connections_active" in families
        async with httpx.AsyncClient() as http:
            resp = await http.get(f"http://127.0.0.2:{health}/liveness")
        assert resp.status_code == 200
        assert await refused("127.0.0.1", metrics)
        assert await refused("127.0.0.1", health)


async def test_metrics_tls_misconfiguration_is_a_named_error(metrics_pki: dict[str, Any],
                                                             tmp_path: Path) -> None:
    p = metrics_pki["paths"]
    with pytest.raises(ConfigError, match="TYPHA_PROMETHEUSMETRICSCAFILE"):
        Daemon(daemon_config(DatastoreType="memory", PrometheusMetricsEnabled="true",
                             PrometheusMetricsCertFile=str(p["cert"]),
                             PrometheusMetricsKeyFile=str(p["key"]),
                             PrometheusMetricsClientAuth="RequireAndVerifyClientCert"))
    with pytest.raises(ConfigError, match="TYPHA_PROMETHEUSMETRICSCERTFILE"):
        Daemon(daemon_config(DatastoreType="memory", PrometheusMetricsEnabled="true",
                             PrometheusMetricsCertFile=str(tmp_path / "missing.pem"),
                             PrometheusMetricsKeyFile=str(p["key"])))
