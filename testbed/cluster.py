"""Clusters and the resources in them, for the demo, the benchmarks and the tests.

``cluster_objects`` yields the synthetic cluster (``trio_typha.datastore.synthetic``) as the
API server stores it, Calico objects moved into the served Calico API group
(:func:`in_calico_group`, which any projectcalico.org/v3 document goes through, seeds too).
``typha_service`` / ``typha_endpoint_slice`` build the ``calico-typha`` Service and its
EndpointSlice the way the manifests and the EndpointSlice controller would (one TCP port named
``calico-typha``, label ``kubernetes.io/service-name``, one endpoint per replica with its node
and readiness), so agents discover the replicas exactly as calico-node would.

``etcd_cluster_objects`` is the same cluster's shapes and counts as calicoctl stores them in
etcd (Calico v3 resources only), and ``etcd_endpoint`` one of its WorkloadEndpoints (what the
etcd benchmark's churn rewrites).

The resource builders (``v3``, ``wep_name``, ``k8s_namespace``, ``k8s_node``, ``k8s_pod``,
``k8s_network_policy``) are what the tests, the benchmarks and the chaos suite write Calico v3
resources, Namespaces, Nodes, Pods and NetworkPolicies with.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trio_typha.client.discovery import SERVICE_NAME_LABEL, TYPHA_PORT_NAME
from trio_typha.datastore.synthetic import SIZES, ClusterSize
from trio_typha.model import kinds as K

TYPHA_SERVICE = "calico-typha"
TYPHA_NAMESPACE = "kube-system"
V3 = f"{K.CALICO_V3_GROUP}/v3"


# -- resource builders -----------------------------------------------------------------------

def v3(kind: str, name: str, spec: dict[str, Any], *, namespace: str = "",
       labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """A ``projectcalico.org/v3`` resource as calicoctl stores it in etcd: a uid (derived
    from the name, so a rewrite keeps it) and a creation timestamp."""
    md: dict[str, Any] = {"name": name,
                          "uid": f"00000000-0000-4000-8000-{zlib.crc32(name.encode()):012d}",
                          "creationTimestamp": "2025-01-01T00:00:00Z"}
    if namespace:
        md["namespace"] = namespace
    if labels:
        md["labels"] = labels
    return {"apiVersion": V3, "kind": kind, "metadata": md, "spec": spec, **extra}


def wep_name(node: str, pod: str, *, orchestrator: str = "k8s", endpoint: str = "eth0") -> str:
    """libcalico's WorkloadEndpoint name: ``<node>-<orchestrator>-<workload>-<endpoint>``,
    the dashes inside each part doubled."""
    return "-".join(p.replace("-", "--") for p in (node, orchestrator, pod, endpoint))


def k8s_namespace(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Kubernetes Namespace (Calico's profile ``kns.<name>`` comes from it)."""
    md: dict[str, Any] = {"name": name}
    if labels is not None:
        md["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": md}


def k8s_node(name: str, ip: str | None = None, *, pod_cidr: str | None = None
             ) -> dict[str, Any]:
    """A Kubernetes Node; with ``ip``, its InternalIP and the IPv4 address annotation Calico's
    node controller writes (``projectcalico.org/IPv4Address``, a /24)."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name,
                                        "labels": {"kubernetes.io/hostname": name}}}
    if ip is not None:
        obj["metadata"]["annotations"] = {"projectcalico.org/IPv4Address": f"{ip}/24"}
        obj["status"] = {"addresses": [{"type": "InternalIP", "address": ip}]}
    if pod_cidr is not None:
        obj["spec"] = {"podCIDR": pod_cidr}
    return obj


def k8s_pod(name: str, namespace: str = "default", *, labels: dict[str, str] | None = None,
            node: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Kubernetes Pod with one container; ``spec`` adds to (or replaces) its spec.
    ``namespace=""`` leaves the namespace to the request that creates it."""
    md: dict[str, Any] = {"name": name}
    if namespace:
        md["namespace"] = namespace
    if labels is not None:
        md["labels"] = dict(labels)
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node is not None:
        body["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": {**body, **spec}}


def k8s_network_policy(name: str, *, namespace: str = "default", app: str | None = None,
                       port: int = 8080, from_labels: dict[str, str] | None = None
                       ) -> dict[str, Any]:
    """A ``networking.k8s.io/v1`` NetworkPolicy admitting TCP ``port`` to pods labelled
    ``app`` (default: the policy's name), from pods with ``from_labels`` if given."""
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": port}]}
    if from_labels is not None:
        rule = {"from": [{"podSelector": {"matchLabels": from_labels}}], **rule}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"podSelector": {"matchLabels": {"app": app or name}},
                     "policyTypes": ["Ingress"], "ingress": [rule]}}


# -- the synthetic cluster and the Typha Service ---------------------------------------------


def cluster_objects(size: str, group: str = K.CALICO_CRD_GROUP
                    ) -> Iterator[tuple[K.ResourceKind, dict[str, Any]]]:
    """The synthetic cluster as (kind, object) pairs, Calico objects moved into ``group``."""
    from trio_typha.datastore.synthetic import generate

    for obj in generate(size):
        yield in_calico_group(obj, group)


def in_calico_group(obj: Mapping[str, Any], group: str
                    ) -> tuple[K.ResourceKind, dict[str, Any]]:
    """(kind, object) of a document as the API server serving Calico in ``group`` stores it.

    A ``projectcalico.org/v3`` object moved into ``crd.projectcalico.org`` takes the CRD's
    form, as Calico's backend writes it there.  The CRD types are the v3 ones except for
    BlockAffinity and IPAMBlock (``libcalico-go/lib/apis/crd.projectcalico.org/v1``): an
    affinity's ``deleted`` is the string ``fmt.Sprintf("%t", deleted)``
    (``libcalico-go/lib/backend/k8s/resources/ipam_affinity_v3.go``), and a block's
    ``strictAffinity``, which the Go struct always marshals, is there (``false`` when the
    document leaves it out).  Other documents are returned as they are.
    """
    if obj.get("apiVersion") != f"{K.CALICO_V3_GROUP}/v3":
        return K.kind_for(obj["apiVersion"], obj["kind"]), dict(obj)
    kind = K.calico_kind(obj["kind"], group)
    out = {**obj, "apiVersion": kind.api_version}
    if group == K.CALICO_CRD_GROUP and isinstance(obj.get("spec"), Mapping):
        spec = dict(obj["spec"])
        if kind.kind == "BlockAffinity" and isinstance(spec.get("deleted", False), bool):
            spec["deleted"] = "true" if spec.get("deleted") else "false"
        elif kind.kind == "IPAMBlock":
            spec.setdefault("strictAffinity", False)
        out["spec"] = spec
    return kind, out


def etcd_endpoint(i: int, size: ClusterSize) -> dict[str, Any]:
    """Pod ``i``'s WorkloadEndpoint in :func:`etcd_cluster_objects`' cluster."""
    node = f"node-{i % size.nodes}"
    ns = f"ns-{i % size.namespaces}"
    pod = f"pod-{i}"
    return v3("WorkloadEndpoint", wep_name(node, pod), {
        "orchestrator": "k8s", "node": node, "workload": "", "pod": pod, "endpoint": "eth0",
        "interfaceName": f"cali{i:011x}",
        "ipNetworks": [f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}/32"],
        "profiles": [f"kns.{ns}"]}, namespace=ns, labels={
        "app": f"app-{i % 8}", "projectcalico.org/namespace": ns,
        "projectcalico.org/orchestrator": "k8s"})


def etcd_cluster_objects(size_name: str) -> Iterator[dict[str, Any]]:
    """The synthetic cluster ``size_name`` as Calico v3 resources in etcd: a Node per node,
    a Profile per namespace, a NetworkPolicy per policy, a WorkloadEndpoint per pod."""
    size = SIZES[size_name]
    for n in range(size.nodes):
        yield v3("Node", f"node-{n}", {
            "bgp": {"ipv4Address": f"192.168.{n >> 8}.{n & 255}/16"},
            "orchRefs": [{"nodeName": f"node-{n}", "orchestrator": "k8s"}]})
    for n in range(size.namespaces):
        yield v3("Profile", f"kns.ns-{n}", {
            "ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}],
            "labelsToApply": {"pcns.projectcalico.org/name": f"ns-{n}"}})
    for n in range(size.policies):
        yield v3("NetworkPolicy", f"np-{n}", {
            "tier": "default", "order": 100 + n, "selector": f"app == 'app-{n % 8}'",
            "types": ["Ingress"], "ingress": [{"action": "Allow", "protocol": "TCP",
                                               "destination": {"ports": [1000 + n % 60000]}}]},
            namespace=f"ns-{n % size.namespaces}")
    for i in range(size.pods):
        yield etcd_endpoint(i, size)


def load_cluster(store: Any, size: str, group: str = K.CALICO_CRD_GROUP) -> int:
    """Write the synthetic cluster straight into a test bed ``Store``; the object count."""
    count = 0
    with store.bulk():
        for kind, obj in cluster_objects(size, group):
            store.create(kind, obj)
            count += 1
    return count


@dataclass(frozen=True, slots=True)
class Replica:
    """One Typha replica as its EndpointSlice endpoint describes it."""

    name: str  # pod name
    ip: str
    port: int
    node: str
    ready: bool = True


def typha_service(port: int = 5473, *, namespace: str = TYPHA_NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": TYPHA_SERVICE, "namespace": namespace,
                     "labels": {"k8s-app": TYPHA_SERVICE}},
        "spec": {"selector": {"k8s-app": TYPHA_SERVICE}, "type": "ClusterIP",
                 "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
                 "ports": [{"name": TYPHA_PORT_NAME, "port": port, "protocol": "TCP",
                            "targetPort": TYPHA_PORT_NAME}]},
    }


def typha_endpoint_slice(replicas: Sequence[Replica], *, name: str = f"{TYPHA_SERVICE}-demo",
                         namespace: str = TYPHA_NAMESPACE, service: str = TYPHA_SERVICE,
                         port_name: str = TYPHA_PORT_NAME) -> dict[str, Any]:
    """One slice of ``service`` for ``replicas``.  Every replica must listen on the same port,
    as pods of one Deployment do; the demo's replicas share 127.0.0.0/8 with distinct
    loopback addresses."""
    ports = {r.port for r in replicas}
    if len(ports) > 1:
        raise ValueError(f"replicas of one EndpointSlice must share a port, got {sorted(ports)}")
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {SERVICE_NAME_LABEL: service,
                                "endpointslice.kubernetes.io/managed-by":
                                    "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "ports": [{"name": port_name, "port": ports.pop() if ports else 5473,
                   "protocol": "TCP"}],
        "endpoints": [{"addresses": [r.ip], "nodeName": r.node,
                       "conditions": {"ready": r.ready, "serving": r.ready,
                                      "terminating": False},
                       "targetRef": {"kind": "Pod", "namespace": namespace, "name": r.name}}
                      for r in replicas],
    }

