"""Kubernetes NetworkPolicy -> v3 NetworkPolicy (Calico's KDD conversion,
``libcalico-go/lib/backend/k8s/conversion/conversion.go``)."""

from __future__ import annotations

from typing import Any

import pytest

from trio_typha.model.k8s import (
    KUBERNETES_NETWORK_POLICY_KIND,
    SELECTOR_NAMESPACE,
    SELECTOR_POD,
    ConversionError,
    k8s_network_policy_to_calico,
    k8s_selector_to_calico,
)

K8S = "projectcalico.org/orchestrator == 'k8s'"


def make_np(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "np", "namespace": "prod", **meta}, "spec": spec}


def spec_of(spec: dict[str, Any]) -> dict[str, Any]:
    return k8s_network_policy_to_calico(make_np(spec))["spec"]


def test_namespace_and_pod_peers() -> None:
    np = make_np(
        {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
         "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}},
                               {"podSelector": {"matchLabels": {"role": "fe"}}}],
                      "ports": [{"protocol": "TCP", "port": 80}, {"port": 443}]}]},
        uid="30316465-6365-4463-ad63-3564622d3638", resourceVersion="1001")
    np["metadata"]["name"] = "allow-web"
    assert k8s_network_policy_to_calico(np) == {
        "kind": "NetworkPolicy",
        "apiVersion": "projectcalico.org/v3",
        "metadata": {"name": "allow-web", "namespace": "prod",
                     "uid": "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c",
                     "resourceVersion": "1001", "creationTimestamp": None},
        "spec": {
            "tier": "default",
            "order": 1000.0,
            "ingress": [
                {"action": "Allow", "protocol": "TCP",
                 "source": {"selector": K8S, "namespaceSelector": "team == 'a'"},
                 "destination": {"ports": [80, 443]}},
                {"action": "Allow", "protocol": "TCP",
                 "source": {"selector": K8S + " && role == 'fe'"},
                 "destination": {"ports": [80, 443]}},
            ],
            "selector": K8S + " && app == 'web'",
            "types": ["Ingress"],
        },
    }


def test_key_kind_constant() -> None:
    # The felix processor keys KDD Kubernetes policies under this kind, without prefix.
    assert KUBERNETES_NETWORK_POLICY_KIND == "KubernetesNetworkPolicy"
    assert k8s_network_policy_to_calico(make_np({}))["metadata"]["name"] == "np"


def test_egress_ip_block_two_protocols_end_port() -> None:
    assert spec_of({
        "podSelector": {}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.1.0.0/16", "except": ["10.1.5.0/24"]}}],
                    "ports": [{"protocol": "UDP", "port": 53},
                              {"protocol": "TCP", "port": 8000, "endPort": 8080}]}],
    }) == {
        "tier": "default",
        "order": 1000.0,
        "egress": [
            {"action": "Allow", "protocol": "TCP", "source": {},
             "destination": {"nets": ["10.1.0.0/16"], "ports": ["8000:8080"],
                             "notNets": ["10.1.5.0/24"]}},
            {"action": "Allow", "protocol": "UDP", "source": {},
             "destination": {"nets": ["10.1.0.0/16"], "ports": [53],
                             "notNets": ["10.1.5.0/24"]}},
        ],
        "selector": K8S,
        "types": ["Egress"],
    }


def test_default_deny_both_directions() -> None:
    assert spec_of({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}) == {
        "tier": "default", "order": 1000.0, "selector": K8S, "types": ["Ingress", "Egress"]}


def test_allow_all_ingress_rule() -> None:
    assert spec_of({"podSelector": {}, "ingress": [{}]})["ingress"] == [
        {"action": "Allow", "source": {}, "destination": {}}]


def test_empty_namespace_selector_means_all_namespaces() -> None:
    assert spec_of({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}
                   )["ingress"] == [
        {"action": "Allow", "source": {"selector": K8S, "namespaceSelector": "all()"},
         "destination": {}}]


def test_consecutive_ports_merge_into_a_range() -> None:
    rules = spec_of({"ingress": [{"ports": [{"port": 80}, {"port": 81}, {"port": 82}]}]}
                    )["ingress"]
    assert rules == [{"action": "Allow", "protocol": "TCP", "source": {},
                      "destination": {"ports": ["80:82"]}}]


def test_namespace_selector_with_pod_selector() -> None:
    rules = spec_of({"ingress": [{"from": [{
        "namespaceSelector": {"matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "stage"]}]},
        "podSelector": {"matchLabels": {"role": "db", "app": "x"}},
    }]}]})["ingress"]
    assert rules[0]["source"] == {
        "selector": K8S + " && app == 'x' && role == 'db'",
        "namespaceSelector": "env in { 'prod', 'stage' }"}


def test_policy_types_default_to_ingress_even_with_egress_rules() -> None:
    spec = spec_of({"ingress": [{}], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]})
    assert spec["types"] == ["Ingress"]
    assert spec["egress"] == [{"action": "Allow", "protocol": "UDP", "source": {},
                               "destination": {"ports": [53]}}]


def test_egress_only_types_still_convert_ingress_rules() -> None:
    spec = spec_of({"policyTypes": ["Egress"], "ingress": [{}]})
    assert spec["types"] == ["Egress"]
    assert spec["ingress"] == [{"action": "Allow", "source": {}, "destination": {}}]


def test_ip_block_variants() -> None:
    rules = spec_of({"ingress": [{"from": [
        {"ipBlock": {"cidr": "192.168.3.7/24"}},
        {"ipBlock": {"cidr": "2001:DB8::1/32", "except": ["2001:db8:1::/48"]}},
    ]}]})["ingress"]
    assert [r["source"] for r in rules] == [
        {"nets": ["192.168.3.0/24"]},
        {"nets": ["2001:db8::/32"], "notNets": ["2001:db8:1::/48"]},
    ]


def test_bad_ip_block_cidr_leaves_an_unrestricted_peer() -> None:
    # Calico logs and returns the peer empty, which then matches every source.
    rules = spec_of({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}]})["ingress"]
    assert rules == [{"action": "Allow", "source": {}, "destination": {}}]


def test_bad_except_keeps_what_converted_before_it() -> None:
    rules = spec_of({"egress": [{"to": [{"ipBlock": {
        "cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "bogus", "10.2.0.0/16"]}}]}]})["egress"]
    assert rules[0]["destination"] == {"nets": ["10.0.0.0/8"], "notNets": ["10.1.0.0/16"]}


@pytest.mark.parametrize(("ports", "expected"), [
    ([{"port": "http"}, {"port": 80}], ["http", 80]),
    ([{"port": 90}, {"port": "http"}, {"port": 80}, {"port": 81}, {"port": "dns"}],
     ["http", "dns", "80:81", 90]),
    ([{"port": 8000, "endPort": 8080}, {"port": 8081}, {"port": 22}], [22, "8000:8081"]),
    ([{"port": 80}, {"port": 80}], [80]),
    ([{"port": "8080"}], [8080]),
])
def test_port_grouping_and_ranges(ports: list[Any], expected: list[Any]) -> None:
    rules = spec_of({"ingress": [{"ports": ports}]})["ingress"]
    assert [r["destination"]["ports"] for r in rules] == [expected]


def test_protocols_sorted_and_all_ports_wins() -> None:
    rules = spec_of({"ingress": [{"ports": [
        {"protocol": "UDP", "port": 53}, {"protocol": "UDP"},
        {"protocol": "TCP"}, {"protocol": "TCP", "port": 443},
        {"protocol": "SCTP", "port": 9}]}]})["ingress"]
    assert rules == [
        {"action": "Allow", "protocol": "SCTP", "source": {}, "destination": {"ports": [9]}},
        {"action": "Allow", "protocol": "TCP", "source": {}, "destination": {}},
        {"action": "Allow", "protocol": "UDP", "source": {}, "destination": {}},
    ]


def test_rules_are_protocol_major_then_peers() -> None:
    rules = spec_of({"ingress": [{
        "from": [{"podSelector": {"matchLabels": {"k": "v"}}},
                 {"podSelector": {"matchLabels": {"k2": "v2"}}}],
        "ports": [{"protocol": "UDP", "port": 90}, {"protocol": "TCP", "port": 80}]}]})["ingress"]
    assert [(r["protocol"], r["source"]["selector"], r["destination"]["ports"])
            for r in rules] == [
        ("TCP", K8S + " && k == 'v'", [80]), ("TCP", K8S + " && k2 == 'v2'", [80]),
        ("UDP", K8S + " && k == 'v'", [90]), ("UDP", K8S + " && k2 == 'v2'", [90]),
    ]


@pytest.mark.parametrize("bad_port", [
    {"port": 70000}, {"port": 90, "endPort": 80}, {"port": "http", "endPort": 90},
    {"port": "bad name!"},
])
def test_rule_with_unconvertible_port_is_dropped(bad_port: dict[str, Any]) -> None:
    spec = spec_of({"ingress": [{"ports": [bad_port]}, {"ports": [{"port": 80}]}],
                    "egress": [{"ports": [{"port": 53}, bad_port]}]})
    assert spec["ingress"] == [{"action": "Allow", "protocol": "TCP", "source": {},
                                "destination": {"ports": [80]}}]
    assert "egress" not in spec


def test_explicit_empty_protocol_gives_ports_without_protocol() -> None:
    rules = spec_of({"ingress": [{"ports": [{"protocol": "", "port": 80}]}]})["ingress"]
    assert rules == [{"action": "Allow", "source": {}, "destination": {"ports": [80]}}]


def test_uid_is_converted_and_bad_uid_fails() -> None:
    np = make_np({}, uid="11111111-2222-4333-8444-555555555555",
                 creationTimestamp="2024-05-01T10:00:00Z")
    assert k8s_network_policy_to_calico(np)["metadata"] == {
        "name": "np", "namespace": "prod", "uid": "88888888-4444-43cc-8422-aaaaaaaaaaaa",
        "creationTimestamp": "2024-05-01T10:00:00Z"}
    with pytest.raises(ConversionError):
        k8s_network_policy_to_calico(make_np({}, uid="not-a-uid"))


@pytest.mark.parametrize(("selector", "kind", "expected"), [
    ({}, SELECTOR_POD, K8S),
    ({}, SELECTOR_NAMESPACE, "all()"),
    (None, SELECTOR_POD, K8S),
    (None, SELECTOR_NAMESPACE, ""),
    ({"matchExpressions": [{"key": "toast", "operator": "DoesNotExist"}]}, SELECTOR_NAMESPACE,
     "! has(toast)"),
    ({"matchExpressions": [{"key": "toast", "operator": "Exists"}]}, SELECTOR_NAMESPACE,
     "has(toast)"),
    ({"matchExpressions": [{"key": "toast", "operator": "In", "values": ["butter", "jam"]}]},
     SELECTOR_NAMESPACE, "toast in { 'butter', 'jam' }"),
    ({"matchExpressions": [{"key": "toast", "operator": "NotIn",
                            "values": ["marmite", "milk"]}]},
     SELECTOR_NAMESPACE, "toast not in { 'marmite', 'milk' }"),
    ({"matchExpressions": [{"key": "toast", "operator": "DoesNotExist"}]}, SELECTOR_POD,
     K8S + " && ! has(toast)"),
    ({"matchLabels": {"b": "2", "a": "1"},
      "matchExpressions": [{"key": "z", "operator": "Exists"},
                           {"key": "y", "operator": "Gt", "values": ["1"]},
                           {"key": "x", "operator": "In", "values": ["q", "p"]}]},
     SELECTOR_POD, K8S + " && a == '1' && b == '2' && has(z) && x in { 'q', 'p' }"),
    ({"matchExpressions": [{"key": "y", "operator": "Gt", "values": ["1"]}]},
     SELECTOR_NAMESPACE, ""),
])
def test_selector_conversion(selector: Any, kind: str, expected: str) -> None:
    assert k8s_selector_to_calico(selector, kind) == expected
