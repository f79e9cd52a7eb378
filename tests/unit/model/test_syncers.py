"""Syncer definitions: the static default-allow profile, and every object of ``testbed/seeds/all-kinds.yaml`` converted by all
four syncer types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster import in_calico_group
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES
from trio_typha.model.syncers import ConvertedKV, DatastoreMode, syncer_definition

SEEDS = Path(__file__).parents[3] / "testbed" / "seeds" / "all-kinds.yaml"
DOCS: list[dict[str, Any]] = [d for d in yaml.safe_load_all(SEEDS.read_text()) if d]

V3 = K.CALICO_V3_GROUP
CRD = K.CALICO_CRD_GROUP


def _names(kinds: tuple[K.ResourceKind, ...]) -> set[str]:
    return {f"{k.group or 'core'}/{k.kind}" for k in kinds}


def test_unknown_syncer_type() -> None:
    # Which kinds each syncer type watches is held against Calico in test_syncer_kinds_table.
    with pytest.raises(KeyError):
        syncer_definition("bogus")


def test_default_allow_profile_is_static_for_felix_only() -> None:
    for mode in DatastoreMode:
        static = syncer_definition("felix", mode).static_kvs
        assert static == (
            ConvertedKV("/calico/v1/policy/profile/projectcalico-default-allow/rules",
                        b'{"inbound_rules":[{"action":"allow"}],'
                        b'"outbound_rules":[{"action":"allow"}]}'),
            ConvertedKV("/calico/resources/v3/projectcalico.org/profiles/"
                        "projectcalico-default-allow",
                        b'{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":'
                        b'{"name":"projectcalico-default-allow","creationTimestamp":null},'
                        b'"spec":{"ingress":[{"action":"Allow","source":{},"destination":{}}],'
                        b'"egress":[{"action":"Allow","source":{},"destination":{}}]}}'),
        )
    for syncer in ("bgp", "tunnel-ip-allocation", "node-status"):
        assert syncer_definition(syncer).static_kvs == ()


def _kind_of(doc: dict[str, Any], group: str) -> K.ResourceKind:
    if doc["apiVersion"].startswith(V3 + "/"):
        return K.calico_kind(doc["kind"], group)
    return K.kind_for(doc["apiVersion"], doc["kind"])


def _convert_all(syncer: str, mode: DatastoreMode, group: str) -> dict[str, ConvertedKV]:
    """Convert every seed object the definition watches; keys must not collide."""
    d = syncer_definition(syncer, mode, calico_group=group)
    out: dict[str, ConvertedKV] = {kv.key: kv for kv in d.static_kvs}
    for doc in DOCS:
        kind = _kind_of(doc, group if mode is DatastoreMode.KDD else V3)
        if kind not in d.kinds:
            continue
        obj = in_calico_group(doc, CRD)[1] if kind.group == CRD else dict(doc)
        kvs = d.convert(kind, obj)
        assert d.convert(kind, obj) == kvs  # deterministic
        for kv in kvs:
            assert kv.key not in out, kv.key
            assert kv.value
            out[kv.key] = kv
    return out


def test_seed_file_covers_every_watched_kind() -> None:
    present = {(d["apiVersion"].split("/")[0] if "/" in d["apiVersion"] else "", d["kind"])
               for d in DOCS}
    for syncer in SYNCER_TYPES:
        for mode in DatastoreMode:
            for kind in syncer_definition(syncer, mode).kinds:
                assert (kind.group, kind.kind) in present, (syncer, mode, kind)


@pytest.mark.parametrize("group", [V3, CRD])
def test_seeds_kdd(group: str) -> None:
    felix = _convert_all("felix", DatastoreMode.KDD, group)
    for key in [
        "/calico/v1/policy/profile/kns.prod/labels",
        "/calico/v1/policy/profile/ksa.prod.default/rules",
        "/calico/resources/v3/projectcalico.org/profiles/ksa.prod.api",
        "/calico/v1/host/node-1/workload/k8s/prod%2fweb-1/endpoint/eth0",
        "/calico/v1/host/node-2/workload/k8s/prod%2fapi-0/endpoint/eth0",
        "/calico/v1/host/node-1/bird_ip",
        "/calico/v1/host/node-1/config/IpInIpTunnelAddr",
        "/calico/v1/host/node-2/config/VXLANTunnelMACAddr",
        "/calico/v1/host/node-2/wireguard",
        "/calico/resources/v3/projectcalico.org/nodes/node-1",
        "/calico/v1/policy/KubernetesNetworkPolicy/prod/allow-web",
        "/calico/v1/policy/StagedKubernetesNetworkPolicy/prod/staged-knp",
        "/calico/resources/v3/projectcalico.org/kubernetesservice/prod/web",
        "/calico/resources/v3/projectcalico.org/kubernetesendpointslices/prod/web-abc12",
        "/calico/v1/Ready", "/calico/v1/config/Foo",
        "/calico/v1/host/node-1/config/LogSeverityScreen",
        "/calico/resources/v3/projectcalico.org/felixconfigurations/edge-nodes",
        "/calico/v1/policy/tier/security/metadata",
        "/calico/v1/policy/GlobalNetworkPolicy//gnp1",
        "/calico/v1/policy/StagedGlobalNetworkPolicy//staged-gnp",
        "/calico/v1/policy/NetworkPolicy/prod/np1",
        "/calico/v1/policy/StagedNetworkPolicy/prod/staged-np",
        "/calico/v1/netset/gns1", "/calico/v1/netset/prod%2fexternal",
        "/calico/v1/ipam/v6/pool/fd00:1::-48",
        "/calico/v1/host/node-1/endpoint/eth0-node-1",
        "/calico/resources/v3/projectcalico.org/bgpconfigurations/default",
        "/calico/resources/v3/projectcalico.org/bgppeers/rack1-tor",
        "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26",
    ]:
        assert key in felix, key
    # Finished and host-networked pods, and staged deletes, yield nothing.
    assert not any("batch-1" in k or "host-agent" in k or "staged-gnp-delete" in k
                   for k in felix)
    assert felix["/calico/v1/Ready"].value == b"true"

    bgp = _convert_all("bgp", DatastoreMode.KDD, group)
    assert set(bgp) == {
        "/calico/v1/ipam/v4/pool/10.244.0.0-16", "/calico/v1/ipam/v6/pool/fd00:1::-48",
        "/calico/resources/v3/projectcalico.org/bgpconfigurations/default",
        "/calico/resources/v3/projectcalico.org/bgppeers/rack1-tor",
        "/calico/resources/v3/projectcalico.org/bgpfilters/export-only",
        "/calico/resources/v3/projectcalico.org/nodes/node-1",
        "/calico/resources/v3/projectcalico.org/nodes/node-2",
        "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"}
    tunnel = _convert_all("tunnel-ip-allocation", DatastoreMode.KDD, group)
    assert set(tunnel) == {
        "/calico/v1/ipam/v4/pool/10.244.0.0-16", "/calico/v1/ipam/v6/pool/fd00:1::-48",
        "/calico/resources/v3/projectcalico.org/nodes/node-1",
        "/calico/resources/v3/projectcalico.org/nodes/node-2"}
    status = _convert_all("node-status", DatastoreMode.KDD, group)
    assert set(status) == {
        "/calico/resources/v3/projectcalico.org/caliconodestatuses/node-1-status"}
    assert status["/calico/resources/v3/projectcalico.org/caliconodestatuses/node-1-status"] \
        .v3_resource_version == "83"


def test_seeds_etcd() -> None:
    felix = _convert_all("felix", DatastoreMode.ETCD, V3)
    for key in [
        "/calico/v1/host/node-3/bird_ip", "/calico/v1/host/node-3/config/IpInIpTunnelAddr",
        "/calico/v1/host/node-3/config/IPv6VXLANTunnelAddr",
        "/calico/v1/host/node-3/wireguard",
        "/calico/v1/host/node-3/workload/k8s/prod%2fdb-0/endpoint/eth0",
        "/calico/v1/policy/profile/kns.prod/rules",
        "/calico/resources/v3/projectcalico.org/livemigrations/prod/migrate-db-0",
        "/calico/v1/policy/tier/default/metadata",
    ]:
        assert key in felix, key
    # etcd does not default the tier order.
    assert felix["/calico/v1/policy/tier/default/metadata"].value == b'{"defaultAction":"Deny"}'
    # Whatever resourceVersion a stored object carries is moved out of the value.
    assert not any(b'"resourceVersion"' in kv.value for kv in felix.values())
    for syncer in ("bgp", "tunnel-ip-allocation", "node-status"):
        assert _convert_all(syncer, DatastoreMode.ETCD, V3)


def test_unconvertible_objects_yield_nothing() -> None:
    d = syncer_definition("felix", DatastoreMode.KDD, calico_group=CRD)
    bad_uid = {"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
               "metadata": {"name": "p", "uid": "not-a-uuid"}, "spec": {}}
    assert d.convert(K.calico_kind("BGPPeer", CRD), bad_uid) == []
    bad_port = {"metadata": {"name": "g"}, "spec": {"ingress": [
        {"action": "Allow", "protocol": "TCP", "destination": {"ports": ["no such port!"]}}]}}
    assert d.convert(K.calico_kind("GlobalNetworkPolicy", CRD), bad_port) == []
    wrong_shape = {"metadata": {"name": "g"}, "spec": {"order": "first"}}
    assert d.convert(K.calico_kind("GlobalNetworkPolicy", CRD), wrong_shape) == []
