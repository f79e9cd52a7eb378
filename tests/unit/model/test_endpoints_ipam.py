"""Endpoints, network sets, IP pools, IPAM blocks/affinities and felix Node keys, as Calico's
update processors make them (``libcalico-go/lib/backend/syncersv1/updateprocessors/``:
``workloadendpointprocessor.go``, ``hostendpointprocessor.go``, ``networksetprocessor.go``,
``globalnetworksetprocessor.go``, ``ippoolprocessor.go``, ``felixnodeprocessor.go``; IPAM in
``libcalico-go/lib/backend/model/block.go`` and ``block_affinity.go``)."""

from __future__ import annotations

import json

from trio_typha.model.endpoints import (
    host_endpoint_kvs,
    workload_endpoint_key,
    workload_endpoint_kvs,
)
from trio_typha.model.ipam import block_affinity_kvs, ip_pool_kvs, ipam_block_kvs
from trio_typha.model.netsets import global_network_set_kvs, network_set_kvs
from trio_typha.model.nodes import felix_node_kvs


def test_host_endpoint_and_network_sets() -> None:
    hep = {"metadata": {"name": "eth0-node-1", "labels": {"role": "gw"}},
           "spec": {"node": "node-1", "interfaceName": "eth0", "expectedIPs": ["10.0.0.11"],
                    "profiles": ["projectcalico-default-allow"]}}
    assert host_endpoint_kvs(hep) == [(
        "/calico/v1/host/node-1/endpoint/eth0-node-1",
        b'{"name":"eth0","expected_ipv4_addrs":["10.0.0.11"],"labels":{"role":"gw"},'
        b'"profile_ids":["projectcalico-default-allow"]}')]
    ns = {"metadata": {"name": "external", "namespace": "prod", "labels": {"zone": "x"}},
          "spec": {"nets": ["192.0.2.7", "198.51.100.0/24"]}}
    assert network_set_kvs("external", ns) == [(
        "/calico/v1/netset/prod%2fexternal",
        b'{"nets":["192.0.2.7/32","198.51.100.0/24"],"labels":{"projectcalico.org/namespace":'
        b'"prod","zone":"x"},"profile_ids":["kns.prod"]}')]
    gns = {"metadata": {"name": "gns1"}, "spec": {"nets": ["10.0.0.0/8"]}}
    assert global_network_set_kvs(gns) == [
        ("/calico/v1/netset/gns1", b'{"nets":["10.0.0.0/8"],"labels":null}')]


def test_host_endpoint_dscp_annotation() -> None:
    def qos(value: str) -> object:
        hep = {"metadata": {"name": "h", "annotations": {"qos.projectcalico.org/dscp": value}},
               "spec": {"node": "n"}}
        return json.loads(host_endpoint_kvs(hep)[0][1]).get("qosControls")
    assert qos("af11") == {"dscp": "AF11"}
    assert qos("10") == {"dscp": 10}
    assert qos("99") is None and qos("XX") is None


def test_ip_pool() -> None:
    pool = {"metadata": {"name": "default-ipv4-ippool"}, "spec": {
        "cidr": "10.244.0.0/16", "ipipMode": "Always", "vxlanMode": "Never", "natOutgoing": True,
        "blockSize": 26, "allowedUses": ["Workload", "Tunnel"], "assignmentMode": "Automatic"}}
    assert ip_pool_kvs(pool) == [(
        "/calico/v1/ipam/v4/pool/10.244.0.0-16",
        b'{"cidr":"10.244.0.0/16","ipip":"tunl0","ipip_mode":"always","vxlan_mode":"",'
        b'"masquerade":true,"ipam":true,"disabled":false,"disableBGPExport":false,'
        b'"assignment_mode":"Automatic","allowed_uses":["Workload","Tunnel"]}')]
    assert ip_pool_kvs({"metadata": {"name": "bad"}, "spec": {"cidr": "nope"}}) == []


def test_workload_endpoint_names() -> None:
    assert workload_endpoint_key("node--1-k8s-web--1-eth0", "prod") == \
        "/calico/v1/host/node-1/workload/k8s/prod%2fweb-1/endpoint/eth0"
    assert workload_endpoint_key("a-b-c", "ns") is None       # three parts
    assert workload_endpoint_key("a-b-c-d", "") is None       # no namespace
    wep = {"metadata": {"name": "h-k8s-p-eth0", "namespace": "ns",
                        "labels": {"pcns.x": "y", "app": "a"}},
           "spec": {"ipNetworks": ["10.0.0.1"], "serviceAccountName": "sa",
                    "interfaceName": "cali1", "profiles": ["kns.ns"]}}
    [(key, value)] = workload_endpoint_kvs(wep)
    assert key == "/calico/v1/host/h/workload/k8s/ns%2fp/endpoint/eth0"
    assert value == (b'{"state":"active","name":"cali1","active_instance_id":"","mac":null,'
                     b'"profile_ids":["kns.ns"],"ipv4_nets":["10.0.0.1/32"],"ipv6_nets":null,'
                     b'"labels":{"app":"a","projectcalico.org/serviceaccount":"sa"}}')
    # No IPs: filtered; a bad IP: not converted.
    assert workload_endpoint_kvs({**wep, "spec": {"ipNetworks": []}}) == []
    assert workload_endpoint_kvs({**wep, "spec": {"ipNetworks": ["x"]}}) == []


def test_ipam_block_and_affinities() -> None:
    block = {"spec": {"cidr": "10.244.1.0/26", "affinity": "host:node-1",
                      "allocations": [0, None], "unallocated": [1], "sequenceNumber": 7}}
    assert ipam_block_kvs(block) == [(
        "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26",
        b'{"cidr":"10.244.1.0/26","affinity":"host:node-1","allocations":[0,null],'
        b'"unallocated":[1],"attributes":[],"sequenceNumber":7,'
        b'"sequenceNumberForAllocation":null,"deleted":false}')]
    v3 = {"spec": {"state": "confirmed", "node": "node-1", "cidr": "10.244.1.0/26",
                   "deleted": False}}
    assert block_affinity_kvs(v3) == [("/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26",
                                       b'{"state":"confirmed","deleted":false}')]
    crd = {"spec": {"state": "pendingDeletion", "node": "vm1", "type": "virtual",
                    "cidr": "fd00::/122", "deleted": "T"}}
    assert block_affinity_kvs(crd, crd=True) == [(
        "/calico/ipam/v2/virtual/vm1/ipv6/block/fd00::-122",
        b'{"state":"pendingDeletion","deleted":true}')]


def test_felix_node_keys() -> None:
    node = {"kind": "Node", "apiVersion": "projectcalico.org/v3",
            "metadata": {"name": "node-1", "resourceVersion": "12"},
            "spec": {"bgp": {"ipv4Address": "10.0.0.11/24", "ipv4IPIPTunnelAddr": "10.244.1.1"},
                     "addresses": [{"address": "10.0.0.11", "type": "InternalIP"}]},
            "status": {"podCIDRs": ["10.244.1.0/24"]}}
    out = felix_node_kvs(node, use_pod_cidr=False)
    assert [(k, v) for k, v, _ in out[:2]] == [
        ("/calico/v1/host/node-1/bird_ip", b"10.0.0.11"),
        ("/calico/v1/host/node-1/config/IpInIpTunnelAddr", b"10.244.1.1")]
    assert out[2][0] == "/calico/resources/v3/projectcalico.org/nodes/node-1"
    assert out[2][2] == "12" and b'"status":{"podCIDRs":["10.244.1.0/24"]}' in out[2][1]
    assert len(out) == 3  # no wireguard key
    with_blocks = felix_node_kvs(node, use_pod_cidr=True)
    assert with_blocks[-1] == (
        "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-24",
        b'{"cidr":"10.244.1.0/24","affinity":"host:node-1","allocations":null,'
        b'"unallocated":null,"attributes":null,"sequenceNumber":0,'
        b'"sequenceNumberForAllocation":null,"deleted":false}', "")
    # Without a BGP address the first IPv4 InternalIP, then ExternalIP, is the host IP.
    ext = {"metadata": {"name": "n"}, "spec": {"addresses": [
        {"address": "fd00::1", "type": "InternalIP"}, {"address": "192.0.2.1/24",
                                                        "type": "ExternalIP"}]},
        "status": {"wireguardPublicKey": "k"}}
    keys = dict((k, v) for k, v, _ in felix_node_kvs(ext, use_pod_cidr=False))
    assert keys["/calico/v1/host/n/bird_ip"] == b"192.0.2.1"
    assert keys["/calico/v1/host/n/wireguard"] == b'{"publicKey":"k"}'
