"""What each syncer watches, as Calico v3.32.1 defines it, held against ``model/syncers.py``.

The table below is read from Calico's source, not from ours: for every syncer type, each
datastore and both IPAM modes it lists the ``ListInterface``s Go Typha's syncer is built with
(``libcalico-go/lib/backend/syncersv1/*``, with the arguments ``typha/pkg/daemon/daemon.go``
``ClientV3Shim.*SyncerByIface`` passes: felix as leader, BGP and tunnel syncers for every
node).  A second table says which REST resources each of those is read from in KDD mode
(the resource clients ``libcalico-go/lib/backend/k8s/client.go`` ``NewKubeClient``
registers) and which key space in etcd mode.  A Calico release that watches something new
shows up here as one failing row.

Both tables were also checked by running Calico's code built from v3.32.1: each syncer's
constructor with a client that records its List calls gave exactly these ListInterfaces
for all sixteen rows, and Calico's KDD client on the test bed API server listed exactly these
REST resources for the eight KDD rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trio_typha.model.kinds import CALICO_CRD_GROUP, CALICO_V3_GROUP
from trio_typha.model.syncers import DatastoreMode, syncer_definition

FELIX = "libcalico-go/lib/backend/syncersv1/felixsyncer/felixsyncerv1.go New"
BGP = "libcalico-go/lib/backend/syncersv1/bgpsyncer/bgpsyncer.go New"
TUNNEL = "libcalico-go/lib/backend/syncersv1/tunnelipsyncer/tunnelipsyncer.go New"
NODE_STATUS = "libcalico-go/lib/backend/syncersv1/nodestatussyncer/nodestatussyncer.go New"

# ``ListInterface``s by the names Calico gives them: ``Kind`` of a ResourceListOptions
# (apiv3.Kind*, internalapi.Kind*, model.Kind*), or the IPAM list types.
BLOCKS = "BlockListOptions"
AFFINITIES = "BlockAffinityListOptions"

# felixsyncerv1.go: always ClusterInformation and FelixConfiguration; as leader the list
# from GlobalNetworkPolicy to LiveMigration; in KDD the Kubernetes policy, endpoint-slice
# and service kinds; with Calico IPAM (not K8sUsePodCIDR) the IPAM blocks.
_FELIX_ALL = ("ClusterInformation", "FelixConfiguration", "GlobalNetworkPolicy",
              "StagedGlobalNetworkPolicy", "GlobalNetworkSet", "IPPool", "Node", "Profile",
              "WorkloadEndpoint", "NetworkPolicy", "StagedNetworkPolicy",
              "StagedKubernetesNetworkPolicy", "NetworkSet", "Tier", "HostEndpoint",
              "BGPConfiguration", "BGPPeer", "LiveMigration")
_FELIX_KDD = ("KubernetesNetworkPolicy", "KubernetesClusterNetworkPolicy",
              "KubernetesEndpointSlice", "KubernetesService")
# bgpsyncer.go: the same five in both datastores, affinities with Calico IPAM.
_BGP_ALL = ("IPPool", "BGPConfiguration", "Node", "BGPPeer", "BGPFilter")
# tunnelipsyncer.go and nodestatussyncer.go: no datastore or IPAM condition at all.
_TUNNEL_ALL = ("IPPool", "Node")
_NODE_STATUS_ALL = ("CalicoNodeStatus",)


@dataclass(frozen=True)
class Row:
    syncer: str
    datastore: DatastoreMode
    calico_ipam: bool
    go_lists: tuple[str, ...]
    source: str


KDD, ETCD = DatastoreMode.KDD, DatastoreMode.ETCD
TABLE = (
    Row("felix", KDD, True, _FELIX_ALL + _FELIX_KDD + (BLOCKS,), FELIX),
    Row("felix", KDD, False, _FELIX_ALL + _FELIX_KDD, FELIX),
    Row("felix", ETCD, True, _FELIX_ALL + (BLOCKS,), FELIX),
    Row("felix", ETCD, False, _FELIX_ALL, FELIX),
    Row("bgp", KDD, True, _BGP_ALL + (AFFINITIES,), BGP),
    Row("bgp", KDD, False, _BGP_ALL, BGP),
    Row("bgp", ETCD, True, _BGP_ALL + (AFFINITIES,), BGP),
    Row("bgp", ETCD, False, _BGP_ALL, BGP),
    Row("tunnel-ip-allocation", KDD, True, _TUNNEL_ALL, TUNNEL),
    Row("tunnel-ip-allocation", KDD, False, _TUNNEL_ALL, TUNNEL),
    Row("tunnel-ip-allocation", ETCD, True, _TUNNEL_ALL, TUNNEL),
    Row("tunnel-ip-allocation", ETCD, False, _TUNNEL_ALL, TUNNEL),
    Row("node-status", KDD, True, _NODE_STATUS_ALL, NODE_STATUS),
    Row("node-status", KDD, False, _NODE_STATUS_ALL, NODE_STATUS),
    Row("node-status", ETCD, True, _NODE_STATUS_ALL, NODE_STATUS),
    Row("node-status", ETCD, False, _NODE_STATUS_ALL, NODE_STATUS),
)

# REST resource = (API group, version, plural); "@calico" stands for the Calico API group in
# use (crd.projectcalico.org/v1, or projectcalico.org/v3 without the Calico API server).
CALICO = "@calico"

# KDD: the resources each ListInterface's client reads (client.go ``NewKubeClient``).
_CRD_BACKED = {  # registered with restClient(group): one Calico CRD each
    "ClusterInformation": "clusterinformations", "FelixConfiguration": "felixconfigurations",
    "GlobalNetworkPolicy": "globalnetworkpolicies",
    "StagedGlobalNetworkPolicy": "stagedglobalnetworkpolicies",
    "GlobalNetworkSet": "globalnetworksets", "IPPool": "ippools",
    "NetworkPolicy": "networkpolicies", "StagedNetworkPolicy": "stagednetworkpolicies",
    "StagedKubernetesNetworkPolicy": "stagedkubernetesnetworkpolicies",
    "NetworkSet": "networksets", "Tier": "tiers", "HostEndpoint": "hostendpoints",
    "BGPConfiguration": "bgpconfigurations", "BGPPeer": "bgppeers", "BGPFilter": "bgpfilters",
    "CalicoNodeStatus": "caliconodestatuses",
    BLOCKS: "ipamblocks",  # resources/ipam_block.go (Calico IPAM only)
    AFFINITIES: "blockaffinities",  # resources/ipam_affinity_v1.go (Calico IPAM only)
}
KDD_RESOURCES: dict[str, tuple[tuple[str, str, str], ...]] = {
    **{name: ((CALICO, "", plural),) for name, plural in _CRD_BACKED.items()},
    # resources/node.go: CoreV1().Nodes()
    "Node": (("", "v1", "nodes"),),
    # resources/profile.go: CoreV1().Namespaces() and CoreV1().ServiceAccounts("")
    "Profile": (("", "v1", "namespaces"), ("", "v1", "serviceaccounts")),
    # resources/workloadendpoint.go: CoreV1().Pods("")
    "WorkloadEndpoint": (("", "v1", "pods"),),
    # resources/livemigration.go: kubevirt.io/v1 VirtualMachineInstanceMigrations("")
    "LiveMigration": (("kubevirt.io", "v1", "virtualmachineinstancemigrations"),),
    # resources/kubenetworkpolicy.go: NetworkingV1().NetworkPolicies("")
    "KubernetesNetworkPolicy": (("networking.k8s.io", "v1", "networkpolicies"),),
    # resources/kubeclusternetworkpolicy.go: policy.networking.k8s.io/v1alpha2
    "KubernetesClusterNetworkPolicy": (("policy.networking.k8s.io", "v1alpha2",
                                        "clusternetworkpolicies"),),
    # resources/kubeendpointslice.go and resources/k8sservice.go
    "KubernetesEndpointSlice": (("discovery.k8s.io", "v1", "endpointslices"),),
    "KubernetesService": (("", "v1", "services"),),
}

# etcd: every ResourceListOptions is the key space of its v3 resource
# (/calico/resources/v3/projectcalico.org/<plural>/, model/resource.go); the IPAM lists are
# the v1 IPAM key spaces (model/block.go, model/block_affinity.go), which the model names
# by the v3 kinds IPAMBlock and BlockAffinity.
ETCD_PLURALS = {
    **{name: plural for name, plural in _CRD_BACKED.items() if name not in (BLOCKS, AFFINITIES)},
    "Node": "nodes", "Profile": "profiles", "WorkloadEndpoint": "workloadendpoints",
    "LiveMigration": "livemigrations",
    BLOCKS: "ipamblocks", AFFINITIES: "blockaffinities",
}


def expected_resources(row: Row, calico_group: str) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for name in row.go_lists:
        if row.datastore is KDD:
            for group, version, plural in KDD_RESOURCES[name]:
                if group == CALICO:
                    group = calico_group
                    version = "v1" if calico_group == CALICO_CRD_GROUP else "v3"
                out.add((group, version, plural))
        else:
            out.add((CALICO_V3_GROUP, "v3", ETCD_PLURALS[name]))
    return out


def _row_id(row: Row) -> str:
    return f"{row.syncer}-{row.datastore.value}-{'calico-ipam' if row.calico_ipam else 'pod-cidr'}"


def test_the_table_covers_every_syncer_datastore_and_ipam_mode() -> None:
    combos = {(r.syncer, r.datastore, r.calico_ipam) for r in TABLE}
    assert len(combos) == len(TABLE) == 4 * 2 * 2


@pytest.mark.parametrize("calico_group", [CALICO_CRD_GROUP, CALICO_V3_GROUP])
@pytest.mark.parametrize("row", TABLE, ids=_row_id)
def test_syncer_watches_what_go_typha_watches(row: Row, calico_group: str) -> None:
    definition = syncer_definition(row.syncer, row.datastore, calico_group=calico_group,
                                   use_pod_cidr=not row.calico_ipam)
    ours = [(k.group, k.version, k.plural) for k in definition.kinds]
    assert len(ours) == len(set(ours)), f"watched twice: {ours}"
    expected = expected_resources(row, calico_group)
    assert set(ours) == expected, (
        f"{row.source}: missing {sorted(expected - set(ours))}, "
        f"extra {sorted(set(ours) - expected)}")
