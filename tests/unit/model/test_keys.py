"""Key paths (``KeyToDefaultPath``) and their selective escaping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model import keys
from trio_typha.model.golang import parse_cidr


def test_escaping_round_trips() -> None:
    assert keys.escape_name("a/b%2fc") == "a%2fb%252fc"
    assert keys.unescape_name(keys.escape_name("a/b%2fc")) == "a/b%2fc"


@given(st.text())
def test_escape_is_invertible(name: str) -> None:
    assert keys.unescape_name(keys.escape_name(name)) == name
    assert "/" not in keys.escape_name(name)


def test_key_path_of_each_kind() -> None:
    net = parse_cidr
    assert keys.policy_key("NetworkPolicy", "prod", "np1") == \
        "/calico/v1/policy/NetworkPolicy/prod/np1"
    assert keys.policy_key("GlobalNetworkPolicy", "", "gnp1") == \
        "/calico/v1/policy/GlobalNetworkPolicy//gnp1"
    assert keys.tier_key("default") == "/calico/v1/policy/tier/default/metadata"
    assert keys.profile_rules_key("kns.prod") == "/calico/v1/policy/profile/kns.prod/rules"
    assert keys.profile_labels_key("a/b") == "/calico/v1/policy/profile/a%2fb/labels"
    assert keys.workload_endpoint_key("node-1", "k8s", "prod/web-1", "eth0") == \
        "/calico/v1/host/node-1/workload/k8s/prod%2fweb-1/endpoint/eth0"
    assert keys.host_endpoint_key("node-1", "eth0/x") == "/calico/v1/host/node-1/endpoint/eth0%2fx"
    assert keys.host_config_key("node-1", "IpInIpTunnelAddr") == \
        "/calico/v1/host/node-1/config/IpInIpTunnelAddr"
    assert keys.wireguard_key("node-1") == "/calico/v1/host/node-1/wireguard"
    assert keys.host_ip_key("node-1") == "/calico/v1/host/node-1/bird_ip"
    assert keys.global_config_key("LogSeverityScreen") == "/calico/v1/config/LogSeverityScreen"
    assert keys.READY_FLAG_KEY == "/calico/v1/Ready"
    assert keys.network_set_key("prod/external") == "/calico/v1/netset/prod%2fexternal"
    assert keys.ip_pool_key(net("10.244.0.0/16")) == "/calico/v1/ipam/v4/pool/10.244.0.0-16"
    assert keys.ip_pool_key(net("fd00::/48")) == "/calico/v1/ipam/v6/pool/fd00::-48"
    assert keys.block_key(net("10.244.1.0/26")) == \
        "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26"
    assert keys.block_affinity_key(net("10.244.1.0/26"), "node-1") == \
        "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"
    assert keys.block_affinity_key(net("fd00::/122"), "vm", "virtual") == \
        "/calico/ipam/v2/virtual/vm/ipv6/block/fd00::-122"
    assert keys.resource_key("Node", "node-1") == \
        "/calico/resources/v3/projectcalico.org/nodes/node-1"
    assert keys.resource_key("KubernetesService", "kubernetes", "default") == \
        "/calico/resources/v3/projectcalico.org/kubernetesservice/default/kubernetes"
    assert keys.resource_key("KubernetesEndpointSlice", "s", "ns") == \
        "/calico/resources/v3/projectcalico.org/kubernetesendpointslices/ns/s"


def test_raw_segments_are_not_escaped() -> None:
    # Calico only escapes some segments; a host or tier name goes in as it is.
    assert keys.workload_endpoint_key("a/b", "k8s", "w", "e") == \
        "/calico/v1/host/a/b/workload/k8s/w/endpoint/e"
    assert keys.policy_key("NetworkPolicy", "ns", "a/b") == "/calico/v1/policy/NetworkPolicy/ns/a/b"


def test_missing_identifiers() -> None:
    for call in (lambda: keys.policy_key("NetworkPolicy", "", "x"),
                 lambda: keys.policy_key("GlobalNetworkPolicy", "", ""),
                 lambda: keys.policy_key("StagedKubernetesNetworkPolicy", "", "x"),
                 lambda: keys.host_config_key("", "X"),
                 lambda: keys.wireguard_key(""),
                 lambda: keys.workload_endpoint_key("h", "", "w", "e")):
        with pytest.raises(keys.InvalidKeyError):
            call()
    # KubernetesNetworkPolicy is not in Calico's namespace check.
    assert keys.policy_key("KubernetesNetworkPolicy", "", "x") == \
        "/calico/v1/policy/KubernetesNetworkPolicy//x"
