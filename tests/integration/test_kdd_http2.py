"""The Kubernetes client over one HTTP/2 connection, against the test bed API server.

The test bed speaks HTTP/2 as kube-apiserver does (TLS ALPN ``h2``) and also h2c with
prior knowledge in plaintext; each test reads the server's own count of what the client
cost it (``ApiServer.traffic``): every list and every watch of every kind on one
connection, and HTTP/1.1 only when the server does not speak HTTP/2.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from testbed.apiserver import ApiServer, open_apiserver
from tests.e2e.harness import HANG, daemon_config, running_daemon
from trio_typha.datastore.base import DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_errors import ApiError
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import KubernetesDatastore
from trio_typha.model import kinds as K

KINDS = [K.NAMESPACE, K.POD, K.SERVICE_ACCOUNT, K.NODE,
         K.calico_kind("IPPool", K.CALICO_CRD_GROUP)]
FAST = WatchTuning(min_watch_interval=0.001, backoff_initial=0.01, backoff_max=0.05)


@asynccontextmanager
async def tls_apiserver(*, http2: bool = True, **options: Any) -> AsyncIterator[ApiServer]:
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    async with open_apiserver(ssl_context=ctx, ca_pem=ca.cert_pem.bytes(),
                              http2=http2, **options) as server:
        yield server


@asynccontextmanager
async def synced(server: ApiServer, config: KubeClientConfig, tuning: WatchTuning = FAST
                 ) -> AsyncIterator[trio.MemoryReceiveChannel[DatastoreEvent]]:
    """Watch KINDS; yields once every kind is listed and watched."""
    send, recv = trio.open_memory_channel[DatastoreEvent](10_000)
    async with KubeApi(config, stall_deadline=tuning.stall_deadline) as api, \
            trio.open_nursery() as nursery:
        ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=tuning,
                                 random=random.Random(4).random)
        await nursery.start(ds.watch, KINDS, send)
        with trio.fail_after(HANG):
            seen: set[str] = set()
            while len(seen) < len(KINDS):
                event = await recv.receive()
                if isinstance(event, KindSynced):
                    seen.add(event.kind.plural)
            await server.wait_for_watches(lambda n: n == len(KINDS))
        yield recv
        nursery.cancel_scope.cancel()


async def arrives(recv: trio.MemoryReceiveChannel[DatastoreEvent], name: str) -> None:
    with trio.fail_after(HANG):
        async for event in recv:
            if isinstance(event, ResourceEvent) and event.name == name:
                return


def config_for(server: ApiServer, tmp_path_factory: pytest.TempPathFactory | None = None
               ) -> KubeClientConfig:
    ca_file = None
    if server.ca_pem is not None:
        assert tmp_path_factory is not None
        path = tmp_path_factory.mktemp("ca") / "ca.pem"
        path.write_bytes(server.ca_pem)
        ca_file = str(path)
    return KubeClientConfig(server=server.url, source="test", ca_file=ca_file)


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls-alpn"])
async def test_every_list_and_watch_shares_one_http2_connection(
        tls: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    opener = tls_apiserver() if tls else open_apiserver()
    async with opener as server, synced(server, config_for(server, tmp_path_factory)) as recv:
        traffic = server.traffic
        assert traffic.connections == traffic.h2_connections == 1
        assert traffic.watches == len(KINDS)  # as streams of that connection
        assert traffic.requests >= 2 * len(KINDS)  # lists and watches
        server.store.create(K.NAMESPACE, {"metadata": {"name": "later"}})
        await arrives(recv, "later")
        assert traffic.connections == 1


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls-alpn"])
async def test_a_kdd_typha_opens_exactly_one_connection(tls: bool, tmp_path: Path) -> None:
    """The whole daemon, built from its configuration as in production: API-group
    discovery (no CALICO_API_GROUP), the datastore's initialisation, connection
    rebalancing's reads, and every syncer's lists and watches share one HTTP/2 connection."""
    options: dict[str, Any] = {"calico_groups": (K.CALICO_V3_GROUP,)}
    opener = tls_apiserver(**options) if tls else open_apiserver(**options)
    async with opener as server:
        cfg = daemon_config(DatastoreType="kubernetes",
                            Kubeconfig=str(server.kubeconfig_path(tmp_path)),
                            ConnectionRebalancingMode="kubernetes",
                            K8sServicePollIntervalSecs="3600")
        async with running_daemon(cfg) as daemon:
            with trio.fail_after(HANG):
                await daemon.wait_in_sync()
            # Discovered, not assumed: without an answer it would be the v1 CRDs' group.
            assert daemon.datastore.calico_group == K.CALICO_V3_GROUP
            assert daemon.rebalancer is not None
            await daemon.rebalancer.poll_once()
            traffic = server.traffic
            assert traffic.connections == traffic.h2_connections == 1
            assert traffic.watches >= len(daemon.pipelines)
            print(f"one connection carried {traffic.requests} requests and "
                  f"{traffic.watches} watch streams")


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
async def test_discovery_falls_back_to_http1_as_the_rest_does(tls: bool,
                                                              tmp_path: Path) -> None:
    options: dict[str, Any] = {"calico_groups": (K.CALICO_V3_GROUP,), "http2": False}
    opener = tls_apiserver(**options) if tls else open_apiserver(**options)
    async with opener as server:
        cfg = daemon_config(DatastoreType="kubernetes",
                            Kubeconfig=str(server.kubeconfig_path(tmp_path)))
        async with running_daemon(cfg) as daemon:
            with trio.fail_after(HANG):
                await daemon.wait_in_sync()
            assert daemon.datastore.calico_group == K.CALICO_V3_GROUP
            assert server.traffic.h2_connections == 0


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
async def test_a_server_without_http2_gets_http1(
        tls: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    """TLS: ALPN picks http/1.1; plaintext: the h2c preface is answered as bad HTTP/1.1.
    Either way the client falls back for good and works as before."""
    opener = tls_apiserver(http2=False) if tls else open_apiserver(http2=False)
    async with opener as server, synced(server, config_for(server, tmp_path_factory)) as recv:
        assert server.traffic.h2_connections == 0
        assert server.traffic.connections > len(KINDS)  # a connection per watch
        server.store.create(K.NAMESPACE, {"metadata": {"name": "later"}})
        await arrives(recv, "later")


async def test_errors_over_http2_are_the_same_api_errors() -> None:
    async with open_apiserver() as server:
        server.forbid("pods")
        async with KubeApi(KubeClientConfig(server=server.url, source="test")) as api:
            with pytest.raises(ApiError) as info:
                await api.list_page(K.POD, limit=10)
            assert (info.value.code, info.value.reason) == (403, "Forbidden")
            with pytest.raises(ApiError) as watch_info:
                async with api.watch(K.POD, resource_version="1"):
                    pass
            assert watch_info.value.code == 403
            assert (await api.get_json("/api/v1/namespaces"))["kind"] == "NamespaceList"
        assert server.traffic.h2_connections == 1 == server.traffic.connections


@pytest.mark.parametrize("http2", [True, False], ids=["http2", "http1"])
async def test_a_quiet_cluster_costs_no_cross_checks_over_http2(http2: bool) -> None:
    """Nothing changes and no bookmarks come: over HTTP/2 (the connection's PINGs prove
    it alive, no stream is silent while another delivers) nothing is probed; over
    HTTP/1.1 each silent stream is cross-checked once per interval (1 s of a 1.5 s
    deadline here: real time, so the counts are lower bounds)."""
    tuning = WatchTuning(min_watch_interval=0.001, stall_deadline=1.5)
    async with open_apiserver(http2=http2, bookmark_interval=3600) as server, \
            synced(server, config_for(server), tuning):
        watches = server.traffic.watches
        await trio.sleep(3.5)
        probes = server.traffic.watches - watches
        if http2:
            assert probes == 0
            assert server.traffic.pings > 0  # idle: the PINGs carry the liveness
        else:
            assert probes >= len(KINDS)
