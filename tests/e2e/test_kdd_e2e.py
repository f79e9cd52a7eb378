"""End to end on the Kubernetes datastore: API writes -> trio-typha -> a real grpcio client.

The test bed API server and the whole daemon run in this process on loopback sockets.  Objects
are written with the official ``kubernetes`` client (blocking, so in a worker thread), the
way kubectl or a controller would; grpcio clients (also in threads) must end up holding
exactly what the daemon's caches hold, including the keys derived from each object.

The daemon gets its datastore both ways a deployment can: from the environment
(``TYPHA_DATASTORETYPE=kubernetes``, ``KUBECONFIG``, ``CALICO_API_GROUP``) and injected, after
API-group discovery, with :func:`open_kubernetes_datastore`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import trio

from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import (
    in_calico_group,
    k8s_namespace,
    k8s_network_policy,
    k8s_node,
    k8s_pod,
    v3,
)
from tests.e2e.harness import (
    HANG,
    converge,
    daemon_config,
    running_daemon,
    wait_readiness,
)
from tests.grpcio_sync import GrpcioSync, grpcio_sync
from trio_typha.config import Config
from trio_typha.daemon import Daemon
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.protocols.grpc import typha_pb2 as pb

# Retries after a refused watch come quickly, so recovery is prompt in the 403 test.
FAST = WatchTuning(min_watch_interval=0.01, backoff_initial=0.02, backoff_max=0.2)

NS = "e2e"
NODE = "node-1"
POD_IP = "10.244.1.5"
WEP_KEY = f"/calico/v1/host/{NODE}/workload/k8s/{NS}%2fweb-1/endpoint/eth0"
PROFILE_KEYS = (f"/calico/v1/policy/profile/kns.{NS}/labels",
                f"/calico/v1/policy/profile/kns.{NS}/rules",
                f"/calico/resources/v3/projectcalico.org/profiles/kns.{NS}")
KNP_KEY = f"/calico/v1/policy/KubernetesNetworkPolicy/{NS}/allow-web"
GNP_KEY = "/calico/v1/policy/GlobalNetworkPolicy//gnp1"
POOL_KEY = "/calico/v1/ipam/v4/pool/10.250.0.0-16"
NODE_KEYS = (f"/calico/v1/host/{NODE}/bird_ip",
             f"/calico/resources/v3/projectcalico.org/nodes/{NODE}")


# --- the official Kubernetes client, in a worker thread ------------------------------------

class Kube:
    """Blocking ``kubernetes`` client calls, run in worker threads from trio."""

    def __init__(self, kubeconfig: Path, calico_group: str) -> None:
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(kubeconfig),
                                           client_configuration=cfg)
        self.api = kubernetes.client.ApiClient(cfg)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.net = kubernetes.client.NetworkingV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.group = calico_group
        self.version = "v1" if calico_group == K.CALICO_CRD_GROUP else "v3"

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
        """Run one client call; returns time.monotonic() just before it was sent."""
        def call() -> float:
            t = time.monotonic()
            fn(*args, **kwargs)
            return t
        return await trio.to_thread.run_sync(call)

    def calico(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return in_calico_group(v3(kind, name, spec), self.group)[1]

    async def create_calico(self, plural: str, obj: dict[str, Any]) -> float:
        return await self(self.custom.create_cluster_custom_object, self.group, self.version,
                          plural, obj)

    async def patch_calico(self, plural: str, name: str, patch: dict[str, Any]) -> float:
        return await self(self.custom.patch_cluster_custom_object, self.group, self.version,
                          plural, name, patch)

    async def delete_calico(self, plural: str, name: str) -> float:
        return await self(self.custom.delete_cluster_custom_object, self.group, self.version,
                          plural, name)

    async def set_pod_ip(self, name: str, ip: str) -> float:
        # As the kubelet does once the CNI plugin has set the pod up.
        return await self(self.core.patch_namespaced_pod_status, name, NS,
                          {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}},
                          _content_type="application/merge-patch+json")

    def close(self) -> None:
        self.api.close()


def pod(name: str, **labels: str) -> dict[str, Any]:
    return k8s_pod(name, NS, labels=labels, node=NODE, containers=[
        {"name": "main", "image": "nginx", "ports": [{"name": "http", "containerPort": 8080}]}])


NODE_OBJ = k8s_node(NODE, "10.0.0.11")
KNP = k8s_network_policy("allow-web", namespace=NS, app="web", port=8080,
                         from_labels={"role": "fe"})


# --- the cluster under test -----------------------------------------------------------------

@dataclass
class Cluster:
    srv: ApiServer
    daemon: Daemon
    kube: Kube


@asynccontextmanager
async def kdd_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, group: str,
                      via_config: bool) -> AsyncIterator[Cluster]:
    """Test bed API server serving Calico's ``group``, and the daemon, in sync, on it."""
    async with open_apiserver(calico_groups=(group,)) as srv:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        kube = Kube(kubeconfig, group)
        try:
            if via_config:
                # Typha's KDD client reads the Calico client environment, not TYPHA_*.
                cfg = daemon_config({"TYPHA_DATASTORETYPE": "kubernetes",
                                     "KUBECONFIG": str(kubeconfig),
                                     "CALICO_API_GROUP": f"{group}/{kube.version}"})
                async with running_daemon(cfg) as daemon:
                    assert daemon.datastore.name == "kubernetes"
                    assert getattr(daemon.datastore, "calico_group", None) == group
                    yield await _in_sync(Cluster(srv, daemon, kube))
                # The daemon leaves closing a datastore it built to its owner.
                await daemon.datastore.aclose()  # type: ignore[attr-defined]
            else:
                config = load_kube_client_config(Config(kubeconfig=str(kubeconfig)))
                async with open_kubernetes_datastore(config, tuning=FAST) as ds:
                    assert ds.calico_group == group  # discovered: only this group is served
                    cfg = daemon_config(DatastoreType="kubernetes")
                    async with running_daemon(cfg, datastore=ds) as daemon:
                        yield await _in_sync(Cluster(srv, daemon, kube))
        finally:
            kube.close()


async def _in_sync(cluster: Cluster) -> Cluster:
    with trio.fail_after(HANG):
        await cluster.daemon.wait_in_sync()
    return cluster


async def synced_client(cluster: Cluster, syncer_type: str, client: GrpcioSync) -> GrpcioSync:
    with trio.fail_after(HANG):
        await client.wait_until(lambda: client.in_sync)
    assert client.header is not None and client.header.syncer_type == syncer_type
    await converge(client, cluster.daemon)
    return client


def value(client: GrpcioSync, key: str) -> dict[str, Any]:
    return json.loads(client.kvs[key].value)


def has_all(client: GrpcioSync, keys: tuple[str, ...] | list[str]) -> Callable[[], bool]:
    return lambda: all(k in client.kvs for k in keys)


def has_none(client: GrpcioSync, keys: tuple[str, ...] | list[str]) -> Callable[[], bool]:
    return lambda: not any(k in client.kvs for k in keys)


# --- tests ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("group", "via_config"), [
    pytest.param(K.CALICO_CRD_GROUP, False, id="crd-discovered-injected"),
    pytest.param(K.CALICO_V3_GROUP, True, id="v3-from-environment"),
])
async def test_objects_updates_and_deletes_reach_grpcio_clients(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str, via_config: bool) -> None:
    async with kdd_cluster(tmp_path, monkeypatch, group=group, via_config=via_config) as c, \
            grpcio_sync(c.daemon.ports["server"], "felix") as felix, \
            grpcio_sync(c.daemon.ports["server"], "bgp") as bgp:
        await synced_client(c, "felix", felix)
        await synced_client(c, "bgp", bgp)
        kube = c.kube
        assert "/calico/v1/policy/profile/projectcalico-default-allow/rules" in felix.kvs

        # -- creation --------------------------------------------------------------------
        await kube(kube.core.create_node, NODE_OBJ)
        await kube(kube.core.create_namespace, k8s_namespace(NS, labels={"team": "a"}))
        await kube(kube.core.create_namespaced_pod, NS, pod("web-1", app="web"))
        t_pod = await kube.set_pod_ip("web-1", POD_IP)
        await kube(kube.net.create_namespaced_network_policy, NS, KNP)
        await kube.create_calico("globalnetworkpolicies", kube.calico(
            "GlobalNetworkPolicy", "gnp1",
            {"order": 10, "selector": "app == 'web'", "types": ["Ingress"],
             "ingress": [{"action": "Allow", "source": {"selector": "role == 'fe'"}}]}))
        t_pool = await kube.create_calico("ippools", kube.calico(
            "IPPool", "pool1", {"cidr": "10.250.0.0/16", "ipipMode": "Never",
                                "natOutgoing": True, "blockSize": 26}))
        created = [WEP_KEY, *PROFILE_KEYS, KNP_KEY, GNP_KEY, POOL_KEY, *NODE_KEYS]
        with trio.fail_after(HANG):
            await felix.wait_until(has_all(felix, created))
            await bgp.wait_until(has_all(bgp, [POOL_KEY, NODE_KEYS[1]]))
        # Reported, not asserted (speed belongs in bench/): run with -s to see it.
        print(f"\nKDD {group}: pod IP write -> felix client "
              f"{(felix.kvs[WEP_KEY].at - t_pod) * 1e3:.1f} ms; IPPool create -> bgp client "
              f"{(bgp.kvs[POOL_KEY].at - t_pool) * 1e3:.1f} ms")
        wep = value(felix, WEP_KEY)
        assert wep["ipv4_nets"] == [f"{POD_IP}/32"]
        assert wep["profile_ids"] == [f"kns.{NS}"]
        assert wep["labels"]["app"] == "web"
        assert wep["labels"]["projectcalico.org/namespace"] == NS
        assert value(felix, PROFILE_KEYS[0])["pcns.team"] == "a"
        assert value(felix, KNP_KEY)["selector"] == (
            f"(projectcalico.org/orchestrator == 'k8s' && app == 'web') && "
            f"projectcalico.org/namespace == '{NS}'")
        assert value(felix, GNP_KEY)["order"] == 10
        assert value(felix, POOL_KEY)["cidr"] == "10.250.0.0/16"
        assert value(bgp, POOL_KEY) == value(felix, POOL_KEY)
        assert felix.kvs[NODE_KEYS[0]].value == b"10.0.0.11"
        await converge(felix, c.daemon)
        await converge(bgp, c.daemon)

        # -- updates ---------------------------------------------------------------------
        await kube(kube.core.patch_namespaced_pod, "web-1", NS,
                   {"metadata": {"labels": {"version": "v2"}}},
                   _content_type="application/merge-patch+json")
        await kube(kube.core.patch_namespace, NS, {"metadata": {"labels": {"team": "b"}}},
                   _content_type="application/merge-patch+json")
        await kube.patch_calico("globalnetworkpolicies", "gnp1", {"spec": {"order": 20}})
        with trio.fail_after(HANG):
            await felix.wait_until(lambda: (
                value(felix, WEP_KEY)["labels"].get("version") == "v2"
                and value(felix, PROFILE_KEYS[0])["pcns.team"] == "b"
                and value(felix, GNP_KEY)["order"] == 20))
        await converge(felix, c.daemon)

        # -- deletions -------------------------------------------------------------------
        await kube(kube.core.delete_namespaced_pod, "web-1", NS)
        await kube(kube.net.delete_namespaced_network_policy, "allow-web", NS)
        await kube.delete_calico("globalnetworkpolicies", "gnp1")
        await kube.delete_calico("ippools", "pool1")
        gone = [WEP_KEY, KNP_KEY, GNP_KEY, POOL_KEY]
        with trio.fail_after(HANG):
            await felix.wait_until(has_none(felix, gone))
            await bgp.wait_until(has_none(bgp, [POOL_KEY]))
        assert all(k in felix.kvs for k in PROFILE_KEYS)  # the namespace is still there
        await converge(felix, c.daemon)
        await converge(bgp, c.daemon)

        # The pings sent all along were answered: both streams are still up.
        with trio.fail_after(HANG):
            await felix.wait_until(lambda: felix.pings >= 3)
        assert felix.end is None and bgp.end is None
        assert felix.status == bgp.status == pb.SYNC_STATUS_IN_SYNC


async def test_forbidden_kind_makes_readiness_503_until_access_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with kdd_cluster(tmp_path, monkeypatch, group=K.CALICO_CRD_GROUP,
                           via_config=False) as c, \
            grpcio_sync(c.daemon.ports["server"], "felix") as felix:
        await synced_client(c, "felix", felix)
        body = await wait_readiness(c.daemon, 200)
        assert "felix-cache" in body and c.daemon.ready
        await c.kube(c.kube.core.create_namespace, k8s_namespace(NS))

        # RBAC loses list/watch on pods; the open watches end and cannot be re-opened.
        c.srv.forbid(K.POD, ["list", "watch"])
        c.srv.drop_watches(abrupt=False)
        body = await wait_readiness(c.daemon, 503)
        assert "forbidden to watch pods" in body
        assert not c.daemon.ready
        assert c.daemon.pipelines["felix"].ready is False
        assert c.daemon.pipelines["bgp"].ready  # bgp does not read pods

        # A pod created meanwhile is not lost: it arrives once access is back.
        await c.kube(c.kube.core.create_namespaced_pod, NS, pod("web-1", app="web"))
        await c.kube.set_pod_ip("web-1", POD_IP)
        c.srv.allow(K.POD)
        await wait_readiness(c.daemon, 200)
        assert c.daemon.ready
        with trio.fail_after(HANG):
            await felix.wait_until(has_all(felix, [WEP_KEY]))
        assert value(felix, WEP_KEY)["ipv4_nets"] == [f"{POD_IP}/32"]
        await converge(felix, c.daemon)
        assert felix.end is None  # the outage never touched the client's stream
