"""Resource kinds as a datastore names them (API group, version, kind, REST plural).

Datastores speak in these; the syncer definitions (``model.syncers``) say which kinds each
syncer type watches and how each converts.
"""

from __future__ import annotations

__sans_io__ = True

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResourceKind:
    group: str  # "" for the core API group
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}/{self.version}"


def _k(group: str, version: str, kind: str, plural: str, namespaced: bool) -> ResourceKind:
    return ResourceKind(group, version, kind, plural, namespaced)


# Kubernetes built-ins Calico's KDD syncers read.
POD = _k("", "v1", "Pod", "pods", True)
NAMESPACE = _k("", "v1", "Namespace", "namespaces", False)
SERVICE_ACCOUNT = _k("", "v1", "ServiceAccount", "serviceaccounts", True)
NODE = _k("", "v1", "Node", "nodes", False)
SERVICE = _k("", "v1", "Service", "services", True)
ENDPOINT_SLICE = _k("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", True)
K8S_NETWORK_POLICY = _k("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True)
K8S_CLUSTER_NETWORK_POLICY = _k("policy.networking.k8s.io", "v1alpha2", "ClusterNetworkPolicy",
                                "clusternetworkpolicies", False)
# KubeVirt's live migrations, which KDD serves as Calico LiveMigrations.
KUBEVIRT_MIGRATION = _k("kubevirt.io", "v1", "VirtualMachineInstanceMigration",
                        "virtualmachineinstancemigrations", True)

# Calico's own resources: (kind, plural, namespaced).  Served as projectcalico.org/v3 (the
# API server / etcd layout) or crd.projectcalico.org/v1 (KDD CRDs).
CALICO_KINDS: tuple[tuple[str, str, bool], ...] = (
    ("BGPConfiguration", "bgpconfigurations", False),
    ("BGPFilter", "bgpfilters", False),
    ("BGPPeer", "bgppeers", False),
    ("BlockAffinity", "blockaffinities", False),
    ("CalicoNodeStatus", "caliconodestatuses", False),
    ("ClusterInformation", "clusterinformations", False),
    ("FelixConfiguration", "felixconfigurations", False),
    ("GlobalNetworkPolicy", "globalnetworkpolicies", False),
    ("GlobalNetworkSet", "globalnetworksets", False),
    ("HostEndpoint", "hostendpoints", False),
    ("IPAMBlock", "ipamblocks", False),
    ("IPPool", "ippools", False),
    ("IPReservation", "ipreservations", False),
    ("KubeControllersConfiguration", "kubecontrollersconfigurations", False),
    ("LiveMigration", "livemigrations", True),
    ("NetworkPolicy", "networkpolicies", True),
    ("NetworkSet", "networksets", True),
    ("Profile", "profiles", False),
    ("StagedGlobalNetworkPolicy", "stagedglobalnetworkpolicies", False),
    ("StagedKubernetesNetworkPolicy", "stagedkubernetesnetworkpolicies", True),
    ("StagedNetworkPolicy", "stagednetworkpolicies", True),
    ("Tier", "tiers", False),
    # etcd mode stores these as v3 objects too (written by CNI / kube-controllers).
    ("Node", "nodes", False),
    ("WorkloadEndpoint", "workloadendpoints", True),
)

CALICO_V3_GROUP = "projectcalico.org"
CALICO_CRD_GROUP = "crd.projectcalico.org"


def calico_kind(kind: str, group: str = CALICO_V3_GROUP) -> ResourceKind:
    """The ResourceKind of a Calico resource in the v3 API group or the v1 CRD group."""
    for name, plural, namespaced in CALICO_KINDS:
        if name == kind:
            version = "v3" if group == CALICO_V3_GROUP else "v1"
            return ResourceKind(group, version, name, plural, namespaced)
    raise KeyError(f"unknown Calico kind {kind!r}")


K8S_KINDS: tuple[ResourceKind, ...] = (
    POD, NAMESPACE, SERVICE_ACCOUNT, NODE, SERVICE, ENDPOINT_SLICE, K8S_NETWORK_POLICY,
    K8S_CLUSTER_NETWORK_POLICY, KUBEVIRT_MIGRATION,
)


def all_kinds(calico_group: str = CALICO_V3_GROUP) -> tuple[ResourceKind, ...]:
    return K8S_KINDS + tuple(calico_kind(k, calico_group) for k, _, _ in CALICO_KINDS)


def kind_for(api_version: str, kind: str) -> ResourceKind:
    """Look a kind up by an object's ``apiVersion`` and ``kind`` fields."""
    group, _, _version = api_version.rpartition("/")
    for rk in all_kinds(group if group in (CALICO_V3_GROUP, CALICO_CRD_GROUP)
                        else CALICO_V3_GROUP):
        if rk.kind == kind and rk.group == group:
            return rk
    raise KeyError(f"unknown resource kind {api_version} {kind}")
