"""Warm start from a sibling, against the test bed's API server (KDD) and a real etcd.

A replica started with WarmStartPeers takes its sibling's caches, trackers and watch resume
points over the sync port, then watches the datastore from there.  The invariant checker
(reading the datastore afresh) proves its caches equal what a cold start builds, under
churn after the transfer; the API server's request log (and, for etcd, a counting proxy)
shows what the start cost the datastore.  ``fail_after`` only guards against hangs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import kubernetes
import pytest
import trio
import trustme

from testbed import churn as ch
from testbed import invariant as inv
from testbed.apiserver import ApiServer, open_apiserver
from tests.e2e.harness import HANG, daemon_config, running_daemon
from tests.integration.request_log import RequestLog
from tests.integration.test_churn_invariant import MIX, place_pods
from trio_typha.config import Config
from trio_typha.daemon import Daemon
from trio_typha.datastore.k8s_api import resource_path
from trio_typha.datastore.k8s_config import KubeClientConfig, load_kube_client_config
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.syncers import DatastoreMode


def list_requests(requests: list[tuple[str, dict[str, str]]]) -> list[str]:
    """The paths of the LISTs of watched kinds among ``requests``."""
    kinds = {resource_path(k) for k in inv.watched_kinds(DatastoreMode.KDD, K.CALICO_CRD_GROUP)}
    return [p for p, q in requests if p in kinds and "watch" not in q]


@dataclass
class Bed:
    """The test bed's API server and what the tests here read it with."""

    srv: ApiServer
    config: KubeClientConfig
    log: RequestLog
    client: kubernetes.client.ApiClient

    def read(self) -> inv.DatastoreContents:
        return inv.read_kubernetes(self.client)


@asynccontextmanager
async def kdd_bed(tmp_path: Path, pods: int = 0) -> AsyncIterator[Bed]:
    """The API server, with ``pods`` pods placed in namespace churn-0."""
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as srv:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        config = load_kube_client_config(Config(kubeconfig=str(kubeconfig)))
        with ch.api_client(kubeconfig) as client:
            if pods:
                await trio.to_thread.run_sync(place_pods, kubernetes.client.CoreV1Api(client),
                                              "churn-0", pods)
            yield Bed(srv, config, RequestLog(srv), client)


async def watching_all(daemon: Daemon) -> None:
    """Until every kind's loop watches (or found its kind not served): what the start
    cost the API server is then all in the request log, before the checker's own lists."""
    with trio.fail_after(HANG):
        # Polled: the watch loops signal nothing when they get there.
        while not all(w.reflector.resume_rv is not None or w._absent  # noqa: ASYNC110
                      for t in daemon.pipelines
                      for w in daemon.datastore._watchers.get(t, ())):  # type: ignore[attr-defined]
            await trio.sleep(0.01)


@asynccontextmanager
async def warm_started(config: object, peer: str, log: RequestLog
                       ) -> AsyncIterator[tuple[Daemon, list[str]]]:
    """A replica warm-started from ``peer``, once its watches run, and the LISTs it made."""
    before = len(log.requests)
    async with kdd_daemon(config, WarmStartPeers=peer) as daemon:
        with trio.fail_after(HANG):
            await daemon.wait_in_sync()
        assert daemon.warm is not None and daemon.warm.source == peer
        await watching_all(daemon)
        yield daemon, list_requests(log.requests[before:])


def caches(*daemons: tuple[str, Daemon]) -> list[tuple[str, str, object]]:
    return [(f"{name} {t}", t, p) for name, d in daemons for t, p in d.pipelines.items()]


@asynccontextmanager
async def kdd_daemon(config: object, **env: str) -> AsyncIterator[Daemon]:
    async with open_kubernetes_datastore(config) as ds, \
            running_daemon(daemon_config(DatastoreType="kubernetes", **env),
                           datastore=ds) as daemon:
        yield daemon


async def test_kdd_warm_start_equals_cold_start_and_lists_nothing(tmp_path: Path) -> None:
    async with kdd_bed(tmp_path, pods=3) as bed:
        config, log, client = bed.config, bed.log, bed.client
        churn = ch.Churn(client, ch.ChurnConfig(rate=200, mix=MIX, seed=5,
                                                pods_per_namespace=2))
        await trio.to_thread.run_sync(churn.setup)
        async with kdd_daemon(config) as cold:
            with trio.fail_after(HANG):
                await cold.wait_in_sync()
            assert "cold start" in cold.warm.describe()
            cold_lists = len(list_requests(log.requests))
            await ch.run_in_trio(churn, writes=60)
            peer = f"127.0.0.1:{cold.ports['server']}"
            async with warm_started(config, peer, log) as (warm, lists):
                await ch.run_in_trio(churn, writes=60)
                reports = await inv.wait_converged(
                    bed.read, lambda: caches(("cold", cold), ("warm", warm)), within=HANG)
                assert all(r.ok for r in reports)
                felix = next(r for r in reports if r.subject == "warm felix")
                assert felix.expected_keys > 20
                # The cold start listed every kind; the warm one only asked again
                # for the two kinds this API server does not serve (404, no objects).
                assert cold_lists > 20
                assert sorted(p.rsplit("/", 1)[1] for p in lists) == [
                    "clusternetworkpolicies", "virtualmachineinstancemigrations"]
                _, _, body = warm.health.handle("/readiness")
                assert b"warm start from sibling " + peer.encode() in body


async def test_kdd_a_warm_start_landing_on_a_worker_is_served_by_the_primary(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With ServerWorkers the sibling's port hands connections to worker processes, which
    hold no tracker or watch state: a worker passes the warm start on to its primary."""
    from trio_typha.client.typha import TyphaClient

    caplog.set_level(logging.INFO)
    async with kdd_bed(tmp_path, pods=2) as bed, \
            kdd_daemon(bed.config, ServerWorkers="2") as sibling:
        with trio.fail_after(HANG):
            await sibling.wait_in_sync()
            while not (sibling.workers is not None  # noqa: ASYNC110 (processes)
                       and sibling.workers.ready):
                await trio.sleep(0.05)
        port = sibling.ports["server"]
        # The primary takes the first connection (least loaded, ties to the primary),
        # so the warm start after it goes to the worker.
        async with TyphaClient(("127.0.0.1", port), syncer_type="felix",
                               hostname="first") as client:
            await client.wait_for_status()
            async with warm_started(bed.config, f"127.0.0.1:{port}", bed.log
                                    ) as (warm, lists):
                assert sorted(p.rsplit("/", 1)[1] for p in lists) == [
                    "clusternetworkpolicies", "virtualmachineinstancemigrations"]
                assert sibling.warm_server is not None and sibling.warm_server.served == 1
                assert any("to a connection forwarded by a worker" in r.getMessage()
                           for r in caplog.records)
                await inv.wait_converged(bed.read, lambda: caches(("warm", warm)),
                                         within=HANG)


# --- a sibling that dies mid-transfer -------------------------------------------------------

@asynccontextmanager
async def cutting_proxy(nursery: trio.Nursery, port: int, after: int) -> AsyncIterator[str]:
    """A loopback proxy to ``port`` that passes the first ``after`` bytes of the answer and
    then drops the connection (a sibling dying mid-transfer, as its peer sees it)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    passed: list[int] = []

    async def handle(client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream("127.0.0.1", port) as server, \
                trio.open_nursery() as inner:
            async def up() -> None:
                while data := await client.receive_some(65536):
                    await server.send_all(data)

            inner.start_soon(up)
            sent = 0
            while sent < after and (data := await server.receive_some(after - sent)):
                await client.send_all(data)
                sent += len(data)
            passed.append(sent)
            inner.cancel_scope.cancel()

    inner_scope = trio.CancelScope()

    async def serve() -> None:
        with inner_scope:
            await trio.serve_listeners(handle, listeners)

    nursery.start_soon(serve)
    try:
        yield f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    finally:
        inner_scope.cancel()
    assert passed == [after]


async def test_kdd_sibling_dying_mid_transfer_means_a_cold_start_that_says_so(
        tmp_path: Path) -> None:
    async with kdd_bed(tmp_path, pods=3) as bed:
        config, log = bed.config, bed.log
        async with kdd_daemon(config) as sibling, trio.open_nursery() as nursery:
            with trio.fail_after(HANG):
                await sibling.wait_in_sync()
            async with cutting_proxy(nursery, sibling.ports["server"], 3000) as dying:
                before = len(log.requests)
                async with kdd_daemon(config, WarmStartPeers=dying) as starting:
                    with trio.fail_after(HANG):
                        await starting.wait_in_sync()
                    assert starting.warm is not None and not starting.warm.states
                    why = starting.warm.describe()
                    assert why.startswith("cold start: listed from the datastore")
                    assert f"sibling {dying}: the sibling closed the connection after " \
                           f"3000 bytes, before the end" in why
                    _, _, body = starting.health.handle("/readiness")
                    assert b"cold start: listed from the datastore" in body
                    await watching_all(starting)
                    assert len(list_requests(log.requests[before:])) > 20
                    await inv.wait_converged(bed.read, lambda: caches(("cold", starting)),
                                             within=HANG)
            nursery.cancel_scope.cancel()


async def test_kdd_a_second_sibling_serves_when_the_first_dies(tmp_path: Path) -> None:
    async with kdd_bed(tmp_path) as bed:
        config = bed.config
        async with kdd_daemon(config) as sibling, trio.open_nursery() as nursery:
            with trio.fail_after(HANG):
                await sibling.wait_in_sync()
            good = f"127.0.0.1:{sibling.ports['server']}"
            async with cutting_proxy(nursery, sibling.ports["server"], 100) as dying, \
                    kdd_daemon(config, WarmStartPeers=f"{dying},{good}") as starting:
                with trio.fail_after(HANG):
                    await starting.wait_in_sync()
                assert starting.warm is not None and starting.warm.source == good
                assert starting.warm.failures == [
                    f"sibling {dying}: the sibling closed the connection after 100 "
                    f"bytes, before the end"]
                await inv.wait_converged(bed.read, lambda: caches(("warm", starting)),
                                         within=HANG)
            nursery.cancel_scope.cancel()


# --- a sibling behind the datastore's compaction ------------------------------------------

async def test_kdd_kinds_behind_the_compaction_relist_the_rest_resume(tmp_path: Path) -> None:
    """The sibling's resume point of every kind but NetworkPolicy is older than the
    compaction: those kinds list, NetworkPolicy is watched from where the sibling was, and
    the result equals a cold start."""
    async with kdd_bed(tmp_path, pods=2) as bed:
        srv, config, log, client = bed.srv, bed.config, bed.log, bed.client
        net = kubernetes.client.NetworkingV1Api(client)
        async with kdd_daemon(config) as sibling:
            with trio.fail_after(HANG):
                await sibling.wait_in_sync()
            policy = await trio.to_thread.run_sync(partial(
                net.create_namespaced_network_policy, "churn-0",
                {"metadata": {"name": "p1"}, "spec": {"podSelector": {}}}))
            rv = policy.metadata.resource_version
            watching = sibling.datastore.export_watch("felix")
            assert watching is not None
            np_kind = str(K.K8S_NETWORK_POLICY)
            with trio.fail_after(HANG):
                while watching["kinds"][np_kind]["resume_rv"] != rv:
                    await trio.sleep(0.01)
                    watching = sibling.datastore.export_watch("felix")
                    assert watching is not None
            srv.store.compact(int(rv))
            # A change after the compaction, which the resumed watch must bring.
            await trio.to_thread.run_sync(partial(
                net.patch_namespaced_network_policy, "p1", "churn-0",
                {"metadata": {"labels": {"after": "compaction"}}}))
            peer = f"127.0.0.1:{sibling.ports['server']}"
            async with warm_started(config, peer, log) as (starting, lists):
                await inv.wait_converged(
                    bed.read, lambda: caches(("sibling", sibling), ("warm", starting)),
                    within=HANG)
                assert "/api/v1/pods" in lists and "/api/v1/namespaces" in lists
                assert "/apis/networking.k8s.io/v1/networkpolicies" not in lists
                # Watched from the sibling's resume point, at or after the compaction.
                assert int(log.watches(K.K8S_NETWORK_POLICY)[-1]["resourceVersion"]) \
                    >= int(rv)


# --- a sibling with the wrong identity ------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    paths = {"ca": d / "ca.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    for name in ("typha-server", "someone-else"):
        cert = ca.issue_cert(name, common_name=name)
        paths[f"{name}-cert"] = d / f"{name}-cert.pem"
        paths[f"{name}-key"] = d / f"{name}-key.pem"
        cert.cert_chain_pems[0].write_to_path(str(paths[f"{name}-cert"]))
        cert.private_key_pem.write_to_path(str(paths[f"{name}-key"]))
    return paths


def tls_env(pki: dict[str, Path], who: str) -> dict[str, str]:
    return {"ServerCertFile": str(pki[f"{who}-cert"]), "ServerKeyFile": str(pki[f"{who}-key"]),
            "CAFile": str(pki["ca"]), "ClientCN": "typha-client",
            "WarmStartPeerCN": "typha-server"}


async def test_tls_sibling_identity_decides(tmp_path: Path, pki: dict[str, Path],
                                            caplog: pytest.LogCaptureFixture) -> None:
    """Under TLS both sides check WarmStartPeerCN: a starting replica whose certificate
    carries another CN is refused (one log line names it) and starts cold; one with the
    right certificate starts warm."""
    caplog.set_level(logging.INFO)
    async with kdd_bed(tmp_path) as bed:
        config = bed.config
        async with kdd_daemon(config, **tls_env(pki, "typha-server")) as sibling:
            with trio.fail_after(HANG):
                await sibling.wait_in_sync()
            peer = f"127.0.0.1:{sibling.ports['server']}"
            async with kdd_daemon(config, WarmStartPeers=peer,
                                  **tls_env(pki, "someone-else")) as wrong:
                with trio.fail_after(HANG):
                    await wrong.wait_in_sync()
                assert wrong.warm is not None and not wrong.warm.states
                assert "cold start" in wrong.warm.describe()
                refused = [r.getMessage() for r in caplog.records
                           if "warm-start peer refused" in r.getMessage()]
                assert len(refused) == 1, refused
                assert "CN ['someone-else']" in refused[0]
                assert "wanted CN 'typha-server'" in refused[0]
                await inv.wait_converged(bed.read, lambda: caches(("wrong", wrong)),
                                         within=HANG)
            async with kdd_daemon(config, WarmStartPeers=peer,
                                  **tls_env(pki, "typha-server")) as right:
                with trio.fail_after(HANG):
                    await right.wait_in_sync()
                assert right.warm is not None and right.warm.source == peer
                await inv.wait_converged(bed.read, lambda: caches(("right", right)),
                                         within=HANG)


def test_config_errors_name_the_variable() -> None:
    from trio_typha.config import ConfigError
    from trio_typha.config_sources import load_config
    with pytest.raises(ConfigError, match="TYPHA_WARMSTARTPEERS: invalid value 'nope'"):
        load_config({"TYPHA_WARMSTARTPEERS": "nope"}, config_file=None)
    with pytest.raises(ConfigError, match="TYPHA_WARMSTARTPEERS / TYPHA_WARMSTARTDISCOVERY"):
        load_config({"TYPHA_WARMSTARTPEERS": "10.0.0.1:5473",
                     "TYPHA_DATASTORETYPE": "memory"}, config_file=None)
    with pytest.raises(ConfigError, match="TYPHA_WARMSTARTPEERCN"):
        load_config({"TYPHA_WARMSTARTPEERS": "10.0.0.1:5473",
                     "TYPHA_DATASTORETYPE": "kubernetes", "TYPHA_SERVERCERTFILE": "/x",
                     "TYPHA_SERVERKEYFILE": "/y", "TYPHA_CAFILE": "/z",
                     "TYPHA_CLIENTCN": "c"}, config_file=None)


# --- etcd ---------------------------------------------------------------------------------

@asynccontextmanager
async def etcd_daemon(url: str, **env: str) -> AsyncIterator[Daemon]:
    cfg = daemon_config({"TYPHA_DATASTORETYPE": "etcdv3", "TYPHA_ETCDENDPOINTS": url}, **env)
    async with running_daemon(cfg) as daemon:
        yield daemon


@pytest.mark.etcd
async def test_etcd_warm_start_equals_cold_start_and_ranges_nothing(tmp_path: Path) -> None:
    from bench.datastore_proxy import CountingProxy
    from tests.e2e.test_etcd_e2e import GNP, NODE, NP, POOL, PROFILE, WEP
    from tests.etcd_server import run_etcd

    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            trio.open_nursery() as nursery:
        for obj in (NODE, POOL, PROFILE, WEP):
            await c.put_resource(obj)
        read = partial(inv.read_etcd, etcd.url)
        cold_proxy = CountingProxy(etcd.client_port)
        warm_proxy = CountingProxy(etcd.client_port)
        await nursery.start(cold_proxy.serve)
        await nursery.start(warm_proxy.serve)
        async with etcd_daemon(f"http://127.0.0.1:{cold_proxy.port}") as cold:
            with trio.fail_after(HANG):
                await cold.wait_in_sync()
            await c.put_resource(NP)
            peer = f"127.0.0.1:{cold.ports['server']}"
            async with etcd_daemon(f"http://127.0.0.1:{warm_proxy.port}",
                                   WarmStartPeers=peer) as warm:
                with trio.fail_after(HANG):
                    await warm.wait_in_sync()
                assert warm.warm is not None and warm.warm.source == peer
                await c.put_resource(GNP)
                await c.delete_resource(K.calico_kind("Profile"), "", "kns.prod")
                reports = await inv.wait_converged(
                    read, lambda: caches(("cold", cold), ("warm", warm)), within=HANG)
                felix = next(r for r in reports if r.subject == "warm felix")
                assert felix.expected_keys >= 6
                # One range per kind per syncer for the cold start; none for the warm one,
                # whose four watches start from the sibling's revision.
                assert cold_proxy.counts.etcd_ranges >= 20
                assert warm_proxy.counts.etcd_ranges == 0
                assert warm_proxy.counts.watch_streams == 4
        nursery.cancel_scope.cancel()


@pytest.mark.etcd
async def test_etcd_sibling_behind_the_compaction_relists(tmp_path: Path) -> None:
    """The sibling lost etcd (its state stops at an old revision) and etcd compacted past
    it: the starting replica's watches are refused as compacted and it lists, sending only
    differences from the sibling's state; it ends equal to a cold start."""
    from bench.datastore_proxy import CountingProxy
    from tests.e2e.test_etcd_e2e import GNP, NODE, NP, POOL, PROFILE, WEP
    from tests.etcd_server import run_etcd
    from tests.fault_proxy import open_fault_proxy

    async with run_etcd(tmp_path) as etcd, etcd.client() as c, \
            open_fault_proxy(etcd.client_port) as fault, trio.open_nursery() as nursery:
        for obj in (NODE, POOL, PROFILE, WEP):
            await c.put_resource(obj)
        read = partial(inv.read_etcd, etcd.url)
        counting = CountingProxy(etcd.client_port)
        await nursery.start(counting.serve)
        async with etcd_daemon(f"http://127.0.0.1:{fault.port}") as sibling:
            with trio.fail_after(HANG):
                await sibling.wait_in_sync()
            fault.cut()  # the sibling sees no more changes
            behind = sibling.datastore.export_watch("felix")
            assert behind is not None
            for obj in (NP, GNP):
                await c.put_resource(obj)
            await c.delete_resource(K.calico_kind("Profile"), "", "kns.prod")
            await c.compact(await c.revision())
            peer = f"127.0.0.1:{sibling.ports['server']}"
            async with etcd_daemon(f"http://127.0.0.1:{counting.port}",
                                   WarmStartPeers=peer) as starting:
                with trio.fail_after(HANG):
                    await starting.wait_in_sync()
                assert starting.warm is not None and starting.warm.source == peer
                assert starting.warm.states["felix"].watch["revision"] == behind["revision"]
                await inv.wait_converged(read, lambda: caches(("warm", starting)),
                                         within=HANG)
                assert counting.counts.etcd_ranges > 0  # it listed
                fault.heal()
                # The sibling, back, is compacted past too: it lists and converges as well.
                await inv.wait_converged(
                    read, lambda: caches(("sibling", sibling), ("warm", starting)),
                    within=HANG)
        nursery.cancel_scope.cancel()
