"""Kubernetes Node -> v3 Node (Calico's KDD conversion,
``libcalico-go/lib/backend/k8s/resources/node.go``) and its annotations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trio_typha.model.k8s import ConversionError, node_to_calico_node

P = "projectcalico.org/"


def make_node(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
              spec: dict[str, Any] | None = None, addresses: list[Any] | None = None,
              **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "node-1", **meta}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec or {},
            "status": {"addresses": addresses or []}}


def test_node() -> None:
    node = make_node(
        annotations={P + "IPv4Address": "10.0.0.11/24", P + "IPv4IPIPTunnelAddr": "10.244.1.1",
                     "node.alpha.kubernetes.io/ttl": "0"},
        labels={"kubernetes.io/hostname": "node-1"},
        spec={"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        addresses=[{"type": "InternalIP", "address": "10.0.0.11"},
                   {"type": "Hostname", "address": "node-1"}],
        uid="U", resourceVersion="3003", creationTimestamp="2024-05-01T10:00:00Z")
    calico = node_to_calico_node(node)
    assert calico == {
        "kind": "Node",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {
            "name": "node-1", "uid": "U", "resourceVersion": "3003",
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"kubernetes.io/hostname": "node-1"},
            "annotations": {P + "kube-labels": '{"kubernetes.io/hostname":"node-1"}'},
        },
        "spec": {
            "bgp": {"ipv4Address": "10.0.0.11/24", "ipv4IPIPTunnelAddr": "10.244.1.1"},
            "orchRefs": [{"nodeName": "node-1", "orchestrator": "k8s"}],
            "addresses": [{"address": "10.0.0.11/24", "type": "CalicoNodeIP"},
                          {"address": "10.0.0.11", "type": "InternalIP"}],
        },
        "status": {"podCIDRs": ["10.244.1.0/24"]},
    }
    assert list(calico["metadata"]) == ["name", "uid", "resourceVersion", "creationTimestamp",
                                        "labels", "annotations"]


def test_bare_node_has_empty_status_and_null_kube_labels() -> None:
    assert node_to_calico_node(make_node()) == {
        "kind": "Node",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "node-1", "creationTimestamp": None,
                     "annotations": {P + "kube-labels": "null"}},
        "spec": {"orchRefs": [{"nodeName": "node-1", "orchestrator": "k8s"}]},
        "status": {},
    }
    # An empty label map arrives as nil over Calico's protobuf connection.
    assert node_to_calico_node(make_node(labels={}))["metadata"]["annotations"] == {
        P + "kube-labels": "null"}


def test_bgp_annotations() -> None:
    spec = node_to_calico_node(make_node(annotations={
        P + "IPv4Address": "192.0.2.10", P + "IPv6Address": "2001:db8::10/64",
        P + "ASNumber": "1.10", P + "RouteReflectorClusterID": "224.0.0.1",
    }, addresses=[{"type": "ExternalIP", "address": "198.51.100.1"}]))["spec"]
    assert spec["bgp"] == {"asNumber": 65546, "ipv4Address": "192.0.2.10",
                           "ipv6Address": "2001:db8::10/64", "routeReflectorClusterID": "224.0.0.1"}
    assert spec["addresses"] == [
        {"address": "192.0.2.10", "type": "CalicoNodeIP"},
        {"address": "2001:db8::10/64", "type": "CalicoNodeIP"},
        {"address": "198.51.100.1", "type": "ExternalIP"},
    ]


@pytest.mark.parametrize(("key", "value"), [
    ("IPv4Address", "bogus"), ("IPv4Address", "2001:db8::1"), ("IPv6Address", "10.0.0.1"),
    ("IPv4IPIPTunnelAddr", "10.244.1.1/24"), ("IPv4IPIPTunnelAddr", "fd00::1"),
    ("RouteReflectorClusterID", "fd00::1"), ("ASNumber", "4294967296"), ("ASNumber", "1.65536"),
    ("ASNumber", ""), ("ASNumber", "-1"),
])
def test_invalid_bgp_annotations_are_dropped(key: str, value: str) -> None:
    spec = node_to_calico_node(make_node(annotations={P + key: value}))["spec"]
    assert "bgp" not in spec
    assert "addresses" not in spec


def test_as_number_zero_is_kept() -> None:
    assert node_to_calico_node(make_node(annotations={P + "ASNumber": "0"}))["spec"]["bgp"] == {
        "asNumber": 0}


def test_tunnel_addresses_and_macs() -> None:
    spec = node_to_calico_node(make_node(annotations={
        P + "IPv4IPIPTunnelAddr": "10.244.1.0/24",          # network address: accepted
        P + "IPv4VXLANTunnelAddr": "10.244.2.1",
        P + "VXLANTunnelMACAddr": "66:0e:0a:ab:cd:ef",
        P + "IPv6VXLANTunnelAddr": "fd00:1::1",
        P + "VXLANTunnelMACAddrV6": "6602.0aab.cdef",
    }))["spec"]
    assert spec["bgp"] == {"ipv4IPIPTunnelAddr": "10.244.1.0/24"}
    assert spec["ipv4VXLANTunnelAddr"] == "10.244.2.1"
    assert spec["vxlanTunnelMACAddr"] == "66:0e:0a:ab:cd:ef"
    assert spec["ipv6VXLANTunnelAddr"] == "fd00:1::1"
    assert spec["vxlanTunnelMACAddrV6"] == "6602.0aab.cdef"
    assert list(spec) == ["bgp", "ipv4VXLANTunnelAddr", "vxlanTunnelMACAddr",
                          "ipv6VXLANTunnelAddr", "vxlanTunnelMACAddrV6", "orchRefs"]


@pytest.mark.parametrize("mac", ["66:0e:0a:ab:cd", "66-0e:0a:ab:cd:ef", "gg:0e:0a:ab:cd:ef",
                                 "660e0aabcdef", "66:0e:0a:ab:cd:ef\n"])
def test_bad_mac_is_dropped(mac: str) -> None:
    spec = node_to_calico_node(make_node(annotations={P + "VXLANTunnelMACAddr": mac}))["spec"]
    assert "vxlanTunnelMACAddr" not in spec


def test_wireguard_annotations() -> None:
    calico = node_to_calico_node(make_node(annotations={
        P + "IPv4WireguardInterfaceAddr": "10.244.1.3",
        P + "IPv6WireguardInterfaceAddr": "fd00::3",
        P + "WireguardPublicKey": "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY=",
        P + "WireguardPublicKeyV6": "key-v6",
    }))
    assert calico["spec"]["wireguard"] == {"interfaceIPv4Address": "10.244.1.3",
                                           "interfaceIPv6Address": "fd00::3"}
    assert calico["status"] == {
        "wireguardPublicKey": "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY=",
        "wireguardPublicKeyV6": "key-v6"}


def test_use_pod_cidr_tunnel_address() -> None:
    node = make_node(annotations={P + "IPv4IPIPTunnelAddr": "10.9.9.9",
                                  P + "IPv4WireguardInterfaceAddr": "10.9.9.8",
                                  P + "IPv6WireguardInterfaceAddr": "fd00::8",
                                  P + "WireguardPublicKey": "k"},
                     spec={"podCIDR": "10.244.1.0/24"})
    spec = node_to_calico_node(node, use_pod_cidr=True)["spec"]
    assert spec["bgp"] == {"ipv4IPIPTunnelAddr": "10.244.1.1"}
    assert spec["wireguard"] == {"interfaceIPv4Address": "10.244.1.1"}
    # Without host-local IPAM the annotations are used.
    spec = node_to_calico_node(node)["spec"]
    assert spec["bgp"] == {"ipv4IPIPTunnelAddr": "10.9.9.9"}
    assert spec["wireguard"] == {"interfaceIPv4Address": "10.9.9.8",
                                 "interfaceIPv6Address": "fd00::8"}


@pytest.mark.parametrize(("pod_cidr", "expected"), [
    ("10.244.1.255/24", "10.244.1.0"),   # the written address, last byte wraps, no carry
    ("10.244.1.7/24", "10.244.1.8"),
    ("fd00:1::/64", None),
])
def test_use_pod_cidr_address_arithmetic(pod_cidr: str, expected: str | None) -> None:
    spec = node_to_calico_node(make_node(spec={"podCIDR": pod_cidr}), use_pod_cidr=True)["spec"]
    assert spec.get("bgp") == (None if expected is None else {"ipv4IPIPTunnelAddr": expected})
    assert "wireguard" not in spec


def test_use_pod_cidr_with_bad_cidr_fails() -> None:
    with pytest.raises(ConversionError):
        node_to_calico_node(make_node(spec={"podCIDR": "10.244.1.0"}), use_pod_cidr=True)


def test_calico_labels_and_annotations_are_merged() -> None:
    meta = node_to_calico_node(make_node(
        annotations={P + "labels": '{"rack":"r1","zone":"calico"}',
                     P + "annotations": '{"note":"hello","' + P + 'kube-labels":"stale"}'},
        labels={"zone": "k8s", "a&b": "<x>"}))["metadata"]
    assert meta["labels"] == {"a&b": "<x>", "rack": "r1", "zone": "k8s"}
    assert meta["annotations"] == {
        "note": "hello",
        P + "kube-labels": '{"a\\u0026b":"\\u003cx\\u003e","zone":"k8s"}'}


@pytest.mark.parametrize("bad", ["{", '{"a":1}', "[]", '{"a":NaN}'])
def test_unparsable_calico_metadata_annotations_are_ignored(bad: str) -> None:
    meta = node_to_calico_node(make_node(annotations={P + "labels": bad,
                                                      P + "annotations": bad}))["metadata"]
    assert "labels" not in meta
    assert meta["annotations"] == {P + "kube-labels": "null"}


def test_interfaces_annotation() -> None:
    interfaces = [{"name": "eth0", "addresses": ["10.0.0.11", "fd00::11"]},
                  {"NAME": "eth1", "Addresses": ["192.0.2.1"], "extra": 1},
                  {"name": "lo"}, None]
    spec = node_to_calico_node(make_node(
        annotations={P + "Interfaces": json.dumps(interfaces)}))["spec"]
    assert spec["interfaces"] == [
        {"name": "eth0", "addresses": ["10.0.0.11", "fd00::11"]},
        {"name": "eth1", "addresses": ["192.0.2.1"]},
        {"name": "lo"},
        {},
    ]


@pytest.mark.parametrize(("addresses", "kept"), [
    (["10.0.0.1", "bad", "10.0.0.2"], ["10.0.0.1", "10.0.0.2"]),
    # Calico's in-place deletion skips the entry after a removed one.
    (["bad1", "bad2", "10.0.0.3"], ["bad2", "10.0.0.3"]),
    (["10.0.0.1/24"], []),
])
def test_interface_addresses_are_filtered_like_calico(addresses: list[str],
                                                      kept: list[str]) -> None:
    spec = node_to_calico_node(make_node(annotations={
        P + "Interfaces": json.dumps([{"name": "eth0", "addresses": addresses}])}))["spec"]
    assert spec["interfaces"] == [{"name": "eth0", **({"addresses": kept} if kept else {})}]


def test_interface_filter_that_panics_in_calico_fails_conversion() -> None:
    with pytest.raises(ConversionError):
        node_to_calico_node(make_node(annotations={
            P + "Interfaces": json.dumps([{"name": "e", "addresses": ["bad", "ok?", "bad2"]}])}))


@pytest.mark.parametrize("bad", ["not json", "null", "[]", '{"name":"eth0"}',
                                 '[{"name":1}]', '[{"addresses":"10.0.0.1"}]', "[1]"])
def test_unusable_interfaces_annotation_is_ignored(bad: str) -> None:
    spec = node_to_calico_node(make_node(annotations={P + "Interfaces": bad}))["spec"]
    assert "interfaces" not in spec
