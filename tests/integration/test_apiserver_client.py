"""The official ``kubernetes`` Python client against the test bed API server.

The client is synchronous, so each call runs in a worker thread while the server runs on
the test's trio loop; everything goes over real loopback sockets.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import trio
import trustme
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import k8s_namespace, k8s_pod
from trio_typha.model.kinds import POD

T = TypeVar("T")
CRD = "crd.projectcalico.org"


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


async def fails(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    """Run a call expected to fail; returns the HTTP status and the Status body."""
    with pytest.raises(ApiException) as exc:
        await call(fn, *args, **kwargs)
    return exc.value.status, json.loads(exc.value.body)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with open_apiserver(calico_groups=(CRD,)) as srv:
        yield srv


@pytest.fixture
async def api_client(server: ApiServer, tmp_path: Path) -> AsyncIterator[client.ApiClient]:
    api = await call(config.new_client_from_config, config_file=str(server.kubeconfig_path(tmp_path)))
    yield api
    await call(api.close)


def pod_body(name: str, **labels: str) -> dict[str, Any]:
    return k8s_pod(name, "", labels=labels)


async def test_namespace_and_pod_lifecycle(api_client: client.ApiClient,
                                           server: ApiServer) -> None:
    v1 = client.CoreV1Api(api_client)
    ns = await call(v1.create_namespace, k8s_namespace("team-a"))
    assert ns.status.phase == "Active"
    status, body = await fails(v1.create_namespaced_pod, "nowhere", pod_body("x"))
    assert (status, body["reason"]) == (404, "NotFound")
    assert body["message"] == 'namespaces "nowhere" not found'

    created = await call(v1.create_namespaced_pod, "team-a", pod_body("web", app="web"))
    assert created.metadata.namespace == "team-a" and created.metadata.uid
    status, body = await fails(v1.create_namespaced_pod, "team-a", pod_body("web"))
    assert (status, body["kind"], body["reason"]) == (409, "Status", "AlreadyExists")

    # Replace with a current resourceVersion works; a stale one is a 409 Conflict.
    created.spec.node_name = "node-1"
    replaced = await call(v1.replace_namespaced_pod, "web", "team-a", created)
    assert replaced.spec.node_name == "node-1"
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    status, body = await fails(v1.replace_namespaced_pod, "web", "team-a", created)
    assert (status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]

    # The client sends dict patches as strategic merge, list patches as JSON patch.
    patched = await call(v1.patch_namespaced_pod, "web", "team-a",
                         {"metadata": {"labels": {"tier": "front"}}})
    assert patched.metadata.labels == {"app": "web", "tier": "front"}
    patched = await call(v1.patch_namespaced_pod, "web", "team-a",
                         [{"op": "remove", "path": "/metadata/labels/app"}])
    assert patched.metadata.labels == {"tier": "front"}
    status, _ = await fails(v1.patch_namespaced_pod, "web", "team-a",
                            {"metadata": {"resourceVersion": "1"}})
    assert status == 409

    status_patched = await call(v1.patch_namespaced_pod_status, "web", "team-a",
                                {"status": {"podIP": "10.1.2.3",
                                            "podIPs": [{"ip": "10.1.2.3"}]}})
    assert status_patched.status.pod_ip == "10.1.2.3"
    read = await call(v1.read_namespaced_pod, "web", "team-a")
    assert read.status.pod_ip == "10.1.2.3"
    assert read.metadata.resource_version == status_patched.metadata.resource_version

    listed = await call(v1.list_namespaced_pod, "team-a", label_selector="tier=front")
    assert [p.metadata.name for p in listed.items] == ["web"]
    assert listed.metadata.resource_version == str(server.store.revision)
    by_field = await call(v1.list_pod_for_all_namespaces, field_selector="metadata.name=web")
    assert [p.metadata.namespace for p in by_field.items] == ["team-a"]

    deleted = await call(v1.delete_namespaced_pod, "web", "team-a")
    assert deleted.metadata.name == "web"
    status, body = await fails(v1.read_namespaced_pod, "web", "team-a")
    assert (status, body["message"]) == (404, 'pods "web" not found')

    # Deleting a namespace takes its contents with it.
    await call(v1.create_namespaced_pod, "team-a", pod_body("other"))
    await call(v1.delete_namespace, "team-a")
    assert server.store.count(POD, "team-a") == 0
    status, _ = await fails(v1.read_namespace, "team-a")
    assert status == 404


async def test_paginated_list_is_consistent_under_churn(api_client: client.ApiClient,
                                                        server: ApiServer) -> None:
    v1 = client.CoreV1Api(api_client)
    for i in range(25):
        server.store.create(POD, {"metadata": {"name": f"p{i:02d}", "namespace": "default"},
                                  "spec": {"containers": []}})
    first = await call(v1.list_namespaced_pod, "default", limit=10)
    names = [p.metadata.name for p in first.items]
    assert first.metadata.remaining_item_count == 15
    token = first.metadata._continue
    while token:
        # Writes between pages must not show up in this list.
        server.store.delete(POD, "default", f"p{len(names):02d}")  # on the next page
        server.store.create(POD, {"metadata": {"name": f"late{len(names)}",
                                               "namespace": "default"}})
        page = await call(v1.list_namespaced_pod, "default", limit=10, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert names == [f"p{i:02d}" for i in range(25)]


async def test_network_policies(api_client: client.ApiClient) -> None:
    net = client.NetworkingV1Api(api_client)
    body = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-all"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    created = await call(net.create_namespaced_network_policy, "default", body)
    assert created.metadata.generation == 1
    patched = await call(net.patch_namespaced_network_policy, "deny-all", "default",
                         {"spec": {"policyTypes": ["Ingress", "Egress"]}})
    assert patched.spec.policy_types == ["Ingress", "Egress"]
    assert patched.metadata.generation == 2
    listed = await call(net.list_network_policy_for_all_namespaces)
    assert [p.metadata.name for p in listed.items] == ["deny-all"]
    await call(net.delete_namespaced_network_policy, "deny-all", "default")
    assert (await call(net.list_namespaced_network_policy, "default")).items == []


async def test_calico_custom_resources(api_client: client.ApiClient) -> None:
    crd = client.CustomObjectsApi(api_client)
    pool = {"apiVersion": f"{CRD}/v1", "kind": "IPPool",
            "metadata": {"name": "default-ipv4", "labels": {"family": "4"}},
            "spec": {"cidr": "192.168.0.0/16", "ipipMode": "Always"}}
    created = await call(crd.create_cluster_custom_object, CRD, "v1", "ippools", pool)
    assert created["metadata"]["resourceVersion"]
    status, body = await fails(crd.create_cluster_custom_object, CRD, "v1", "ippools", pool)
    assert (status, body["reason"]) == (409, "AlreadyExists")
    assert body["details"] == {"name": "default-ipv4", "group": CRD, "kind": "ippools"}

    patched = await call(crd.patch_cluster_custom_object, CRD, "v1", "ippools",
                         "default-ipv4", {"spec": {"natOutgoing": True, "ipipMode": None}})
    assert patched["spec"] == {"cidr": "192.168.0.0/16", "natOutgoing": True}
    status, body = await fails(crd.replace_cluster_custom_object, CRD, "v1", "ippools",
                               "default-ipv4", created)
    assert (status, body["reason"]) == (409, "Conflict")
    replaced = await call(crd.replace_cluster_custom_object, CRD, "v1", "ippools",
                          "default-ipv4", {**patched, "spec": {"cidr": "10.0.0.0/8"}})
    assert replaced["spec"] == {"cidr": "10.0.0.0/8"}

    policy = {"apiVersion": f"{CRD}/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "default.allow-dns", "namespace": "default"},
              "spec": {"tier": "default", "selector": "all()"}}
    await call(crd.create_namespaced_custom_object, CRD, "v1", "default", "networkpolicies",
               policy)
    policies = await call(crd.list_cluster_custom_object, CRD, "v1", "networkpolicies")
    assert [p["metadata"]["name"] for p in policies["items"]] == ["default.allow-dns"]
    assert policies["kind"] == "NetworkPolicyList"
    pools = await call(crd.list_cluster_custom_object, CRD, "v1", "ippools",
                       label_selector="family in (4,6)")
    assert [p["metadata"]["name"] for p in pools["items"]] == ["default-ipv4"]

    await call(crd.delete_cluster_custom_object, CRD, "v1", "ippools", "default-ipv4")
    status, _ = await fails(crd.get_cluster_custom_object, CRD, "v1", "ippools",
                            "default-ipv4")
    assert status == 404
    # The v3 group is not served by this server, as in a cluster without Calico's API server.
    status, _ = await fails(crd.list_cluster_custom_object, "projectcalico.org", "v3",
                            "ippools")
    assert status == 404


async def test_discovery_through_the_client(api_client: client.ApiClient) -> None:
    groups = await call(client.ApisApi(api_client).get_api_versions)
    names = {g.name: g.preferred_version.group_version for g in groups.groups}
    assert names == {"discovery.k8s.io": "discovery.k8s.io/v1",
                     "networking.k8s.io": "networking.k8s.io/v1",
                     CRD: f"{CRD}/v1"}
    core = await call(client.CoreApi(api_client).get_api_versions)
    assert core.versions == ["v1"]
    version = await call(client.VersionApi(api_client).get_code)
    assert version.major == "1"
    # The dynamic client resolves kinds purely from the discovery documents.
    dyn = await call(dynamic.DynamicClient, api_client)
    pools = await call(dyn.resources.get, api_version=f"{CRD}/v1", kind="IPPool")
    assert pools.namespaced is False
    slices = await call(dyn.resources.get, api_version="discovery.k8s.io/v1",
                        kind="EndpointSlice")
    assert (await call(slices.get)).items == []


async def test_forbidden_hook(api_client: client.ApiClient, server: ApiServer) -> None:
    v1 = client.CoreV1Api(api_client)
    server.forbid("pods", verbs={"list"})
    status, body = await fails(v1.list_namespaced_pod, "default")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert 'cannot list resource "pods" in API group "" in the namespace "default"' in (
        body["message"])
    await call(v1.create_namespaced_pod, "default", pod_body("allowed"))  # create is not denied
    server.allow("pods")
    assert len((await call(v1.list_namespaced_pod, "default")).items) == 1


async def test_tls_and_required_token(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    async with open_apiserver(ssl_context=context, ca_pem=ca.cert_pem.bytes(),
                              require_token=True) as srv:
        assert srv.url.startswith("https://")
        api = await call(config.new_client_from_config,
                         config_file=str(srv.kubeconfig_path(tmp_path)))
        try:
            listed = await call(client.CoreV1Api(api).list_namespace)
        finally:
            await call(api.close)
        assert "kube-system" in [n.metadata.name for n in listed.items]
        client_context = ssl.create_default_context()
        ca.configure_trust(client_context)
        async with httpx.AsyncClient(verify=client_context) as http:
            anonymous = await http.get(f"{srv.url}/api/v1/namespaces")
            health = await http.get(f"{srv.url}/healthz")
        assert anonymous.status_code == 401
        assert anonymous.json()["reason"] == "Unauthorized"
        assert health.text == "ok"
