"""Key paths as libcalico-go's ``model.KeyToDefaultPath`` writes them.

Only some segments are escaped (``%`` → ``%25`` then ``/`` → ``%2f``); the others go in raw,
exactly as Calico does, so a host name or tier name containing ``/`` produces a path with
extra segments there too.
"""

from __future__ import annotations

__sans_io__ = True

from .golang import IPNet


def escape_name(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2f")


def unescape_name(name: str) -> str:
    return name.replace("%2f", "/").replace("%25", "%")


# Kinds whose policy keys need a namespace (the check does not list KubernetesNetworkPolicy).
_NAMESPACED_POLICY_KINDS = frozenset(
    {"NetworkPolicy", "StagedNetworkPolicy", "StagedKubernetesNetworkPolicy"})


class InvalidKeyError(ValueError):
    """A key lacks an identifier it needs (Calico's ErrorInsufficientIdentifiers)."""


def policy_key(kind: str, namespace: str, name: str) -> str:
    """Modern ``PolicyKey``: ``/calico/v1/policy/<Kind>/<Namespace>/<Name>`` (raw)."""
    if not name:
        raise InvalidKeyError("policy key needs a name")
    if not kind:
        raise InvalidKeyError("policy key needs a kind")
    if kind in _NAMESPACED_POLICY_KINDS and not namespace:
        raise InvalidKeyError(f"{kind} key needs a namespace")
    return f"/calico/v1/policy/{kind}/{namespace}/{name}"


def tier_key(name: str) -> str:
    if not name:
        raise InvalidKeyError("tier key needs a name")
    return f"/calico/v1/policy/tier/{name}/metadata"


def profile_rules_key(name: str) -> str:
    if not name:
        raise InvalidKeyError("profile key needs a name")
    return f"/calico/v1/policy/profile/{escape_name(name)}/rules"


def profile_labels_key(name: str) -> str:
    if not name:
        raise InvalidKeyError("profile key needs a name")
    return f"/calico/v1/policy/profile/{escape_name(name)}/labels"


def workload_endpoint_key(host: str, orchestrator: str, workload: str, endpoint: str) -> str:
    for what, v in (("node", host), ("orchestrator", orchestrator), ("workload", workload),
                    ("name", endpoint)):
        if not v:
            raise InvalidKeyError(f"workload endpoint key needs a {what}")
    return (f"/calico/v1/host/{host}/workload/{escape_name(orchestrator)}/"
            f"{escape_name(workload)}/endpoint/{escape_name(endpoint)}")


def host_endpoint_key(host: str, endpoint_id: str) -> str:
    if not host:
        raise InvalidKeyError("host endpoint key needs a node")
    if not endpoint_id:
        raise InvalidKeyError("host endpoint key needs a name")
    return f"/calico/v1/host/{host}/endpoint/{escape_name(endpoint_id)}"


def host_config_key(host: str, name: str) -> str:
    if not name:
        raise InvalidKeyError("host config key needs a name")
    if not host:
        raise InvalidKeyError("host config key needs a node")
    return f"/calico/v1/host/{host}/config/{name}"


def global_config_key(name: str) -> str:
    if not name:
        raise InvalidKeyError("global config key needs a name")
    return f"/calico/v1/config/{name}"


READY_FLAG_KEY = "/calico/v1/Ready"


def host_ip_key(host: str) -> str:
    """``HostIPKey`` (v3.32.1; value is the bare IP text)."""
    return f"/calico/v1/host/{host}/bird_ip"


def wireguard_key(node: str) -> str:
    if not node:
        raise InvalidKeyError("wireguard key needs a node name")
    return f"/calico/v1/host/{node}/wireguard"


def network_set_key(name: str) -> str:
    if not name:
        raise InvalidKeyError("network set key needs a name")
    return f"/calico/v1/netset/{escape_name(name)}"


def _cidr_segment(net: IPNet) -> str:
    return str(net).replace("/", "-", 1)


def ip_pool_key(cidr: IPNet) -> str:
    return f"/calico/v1/ipam/v{cidr.version}/pool/{_cidr_segment(cidr)}"


def block_key(cidr: IPNet) -> str:
    return f"/calico/ipam/v2/assignment/ipv{cidr.version}/block/{_cidr_segment(cidr)}"


def block_affinity_key(cidr: IPNet, host: str, affinity_type: str = "") -> str:
    if not host:
        raise InvalidKeyError("block affinity key needs a host")
    return (f"/calico/ipam/v2/{affinity_type or 'host'}/{host}/ipv{cidr.version}/block/"
            f"{_cidr_segment(cidr)}")


# ResourceKey plurals (libcalico-go/lib/backend/model/resource.go).  Note the singular
# ``kubernetesservice``.
RESOURCE_PLURALS: dict[str, str] = {
    "BGPPeer": "bgppeers",
    "BGPConfiguration": "bgpconfigurations",
    "ClusterInformation": "clusterinformations",
    "FelixConfiguration": "felixconfigurations",
    "GlobalNetworkPolicy": "globalnetworkpolicies",
    "StagedGlobalNetworkPolicy": "stagedglobalnetworkpolicies",
    "HostEndpoint": "hostendpoints",
    "GlobalNetworkSet": "globalnetworksets",
    "IPPool": "ippools",
    "IPReservation": "ipreservations",
    "NetworkPolicy": "networkpolicies",
    "StagedNetworkPolicy": "stagednetworkpolicies",
    "StagedKubernetesNetworkPolicy": "stagedkubernetesnetworkpolicies",
    "KubernetesEndpointSlice": "kubernetesendpointslices",
    "NetworkSet": "networksets",
    "Tier": "tiers",
    "CalicoNodeStatus": "caliconodestatuses",
    "Profile": "profiles",
    "KubeControllersConfiguration": "kubecontrollersconfigurations",
    "BGPFilter": "bgpfilters",
    "IPAMConfiguration": "ipamconfigurations",
    "Node": "nodes",
    "WorkloadEndpoint": "workloadendpoints",
    "IPAMConfig": "ipamconfigs",
    "BlockAffinity": "blockaffinities",
    "LiveMigration": "livemigrations",
    "KubernetesService": "kubernetesservice",
    "KubernetesNetworkPolicy": "kubernetesnetworkpolicies",
    "KubernetesClusterNetworkPolicy": "kubernetesclusternetworkpolicies",
}

# Namespaced ResourceKey kinds (libcalico-go/lib/namespace).
NAMESPACED_RESOURCE_KINDS = frozenset({
    "WorkloadEndpoint", "LiveMigration", "NetworkPolicy", "StagedNetworkPolicy",
    "StagedKubernetesNetworkPolicy", "NetworkSet", "KubernetesNetworkPolicy",
    "KubernetesEndpointSlice", "KubernetesService",
})


RESOURCE_KEY_PREFIX = "/calico/resources/v3/projectcalico.org/"


def resource_key(kind: str, name: str, namespace: str = "") -> str:
    """v3 ``ResourceKey``: ``/calico/resources/v3/projectcalico.org/<plural>/[<ns>/]<name>``
    (segments raw)."""
    plural = RESOURCE_PLURALS[kind]
    if kind in NAMESPACED_RESOURCE_KINDS:
        return f"/calico/resources/v3/projectcalico.org/{plural}/{namespace}/{name}"
    return f"/calico/resources/v3/projectcalico.org/{plural}/{name}"
