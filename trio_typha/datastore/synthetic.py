"""Synthetic clusters for demos, tests and benchmarks (deterministic for a given seed).

``medium`` is about 100 nodes, 10,000 pods and 1,000 NetworkPolicies, as the benchmarks ask.
Objects are plain Kubernetes / projectcalico.org/v3 dicts, the same shapes the seed files and
the test bed's API server hold.
"""

from __future__ import annotations

__sans_io__ = True

import ipaddress
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ClusterSize:
    nodes: int
    namespaces: int
    pods: int
    policies: int


SIZES: dict[str, ClusterSize] = {
    "tiny": ClusterSize(nodes=3, namespaces=2, pods=20, policies=4),
    "small": ClusterSize(nodes=10, namespaces=5, pods=500, policies=50),
    "medium": ClusterSize(nodes=100, namespaces=50, pods=10_000, policies=1_000),
    "large": ClusterSize(nodes=1_000, namespaces=200, pods=100_000, policies=5_000),
}

APPS = ("web", "api", "db", "cache", "queue", "worker", "auth", "search")
POD_NET = ipaddress.IPv4Network("10.244.0.0/16")


def node(i: int) -> dict[str, Any]:
    name = f"node-{i:04d}"
    ip = f"10.0.{i // 250}.{i % 250 + 1}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux"},
                     "annotations": {"projectcalico.org/IPv4Address": f"{ip}/16"}},
        "spec": {"podCIDR": f"10.244.{i % 256}.0/24", "podCIDRs": [f"10.244.{i % 256}.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                 {"type": "Hostname", "address": name}]},
    }


def namespace(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": f"ns-{i:03d}",
                         "labels": {"team": f"team-{i % 7}", "env": ("prod", "dev")[i % 2]}}}


def service_account(ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns}}


def pod(i: int, size: ClusterSize, rng: random.Random, *, generation: int = 0) -> dict[str, Any]:
    ns = f"ns-{i % size.namespaces:03d}"
    app = APPS[i % len(APPS)]
    ip = POD_NET.network_address + 1 + (i % (POD_NET.num_addresses - 2))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{app}-{i:06d}", "namespace": ns,
                     "labels": {"app": app, "tier": ("frontend", "backend")[i % 2],
                                "version": f"v{generation}"}},
        "spec": {"nodeName": f"node-{rng.randrange(size.nodes):04d}",
                 "serviceAccountName": "default",
                 "containers": [{"name": app, "image": f"example/{app}:1",
                                 "ports": [{"name": "http", "containerPort": 8080,
                                            "protocol": "TCP"}]}]},
        "status": {"phase": "Running", "podIP": str(ip), "podIPs": [{"ip": str(ip)}]},
    }


def network_policy(i: int, size: ClusterSize) -> dict[str, Any]:
    ns = f"ns-{i % size.namespaces:03d}"
    app = APPS[i % len(APPS)]
    peer = APPS[(i + 1) % len(APPS)]
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": f"allow-{peer}-to-{app}-{i:05d}", "namespace": ns},
        "spec": {"podSelector": {"matchLabels": {"app": app}},
                 "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": peer}}}],
                              "ports": [{"protocol": "TCP", "port": 8080 + i % 10}]}]},
    }


def calico_base() -> list[dict[str, Any]]:
    """The cluster-wide Calico resources every demo cluster has."""
    return [
        {"apiVersion": "projectcalico.org/v3", "kind": "ClusterInformation",
         "metadata": {"name": "default"},
         "spec": {"calicoVersion": "v3.32.1", "clusterType": "typha,kdd,k8s",
                  "datastoreReady": True}},
        {"apiVersion": "projectcalico.org/v3", "kind": "FelixConfiguration",
         "metadata": {"name": "default"},
         "spec": {"logSeverityScreen": "Info", "reportingInterval": "0s"}},
        {"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
         "metadata": {"name": "default-ipv4-ippool"},
         "spec": {"cidr": str(POD_NET), "ipipMode": "Always", "natOutgoing": True,
                  "blockSize": 26, "nodeSelector": "all()"}},
        {"apiVersion": "projectcalico.org/v3", "kind": "Tier",
         "metadata": {"name": "default"}, "spec": {"order": 1000000}},
        {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
         "metadata": {"name": "default.deny-metadata"},
         "spec": {"tier": "default", "order": 10, "selector": "all()", "types": ["Egress"],
                  "egress": [{"action": "Deny",
                              "destination": {"nets": ["169.254.169.254/32"]}},
                             {"action": "Pass"}]}},
        {"apiVersion": "projectcalico.org/v3", "kind": "CalicoNodeStatus",
         "metadata": {"name": "node-0000-status"},
         "spec": {"node": "node-0000", "classes": ["Agent", "BGP", "Routes"],
                  "updatePeriodSeconds": 10}},
        {"apiVersion": "projectcalico.org/v3", "kind": "BGPConfiguration",
         "metadata": {"name": "default"},
         "spec": {"logSeverityScreen": "Info", "nodeToNodeMeshEnabled": True,
                  "asNumber": 64512}},
    ]


def generate(size_name: str, *, seed: int = 1) -> Iterator[dict[str, Any]]:
    """All objects of a synthetic cluster, dependencies first."""
    try:
        size = SIZES[size_name]
    except KeyError:
        raise ValueError(f"unknown cluster size {size_name!r}; "
                         f"choose one of {', '.join(SIZES)}") from None
    rng = random.Random(seed)
    yield from calico_base()
    for i in range(size.nodes):
        yield node(i)
    for i in range(size.namespaces):
        ns = namespace(i)
        yield ns
        yield service_account(ns["metadata"]["name"])
    for i in range(size.pods):
        yield pod(i, size, rng)
    for i in range(size.policies):
        yield network_policy(i, size)
