"""Kubernetes ClusterNetworkPolicies as the KDD felix syncer serves them.

Expected values are worked out from Calico v3.32.1's code:
``libcalico-go/lib/backend/k8s/conversion/clusternetworkpolicy.go`` (the v3
GlobalNetworkPolicy), ``k8s/resources/kubeclusternetworkpolicy.go`` (list and watch),
``syncersv1/felixsyncer/felixsyncerv1.go`` (served through the GlobalNetworkPolicy update
processor under kind ``KubernetesClusterNetworkPolicy``) and
``syncersv1/updateprocessors/globalnetworkpolicyprocessor.go`` + ``rules.go`` (the v1 value).
"""

from __future__ import annotations

import json
from typing import Any

from trio_typha.datastore.base import ResourceEvent
from trio_typha.model import kinds as K
from trio_typha.model.kv import UpdateType
from trio_typha.model.syncers import DatastoreMode, syncer_definition
from trio_typha.syncer.tracker import SourceTracker

FELIX = syncer_definition("felix", DatastoreMode.KDD)
KEY = "/calico/v1/policy/KubernetesClusterNetworkPolicy//{}"


def cnp(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
            "metadata": {"name": name, "uid": "32316465-6365-4463-ad63-3564622d3638",
                         "resourceVersion": "7", "creationTimestamp": "2024-05-01T12:00:02Z"},
            "spec": {"tier": "Admin", "priority": 1,
                     "subject": {"namespaces": {}}, **spec}}


def served(obj: dict[str, Any]) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in FELIX.convert(K.K8S_CLUSTER_NETWORK_POLICY, obj)}


def value(obj: dict[str, Any]) -> dict[str, Any]:
    (raw,) = served(obj).values()
    decoded: dict[str, Any] = json.loads(raw)
    return decoded


def test_felix_serves_the_policy_byte_for_byte() -> None:
    # tier Admin -> kube-admin (clusterNetworkPolicyTier), order = float64(priority) marshals
    # as 20; the subject's namespaces become the namespace selector and the pod selector is
    # the bare orchestrator check, which the GNP processor joins with the pcns.-prefixed
    # namespace selector.  The Accept rule is Allow with one TCP port; the peer's pods give
    # both selectors; the rule name is the "name" annotation.  "namespaces: {}" is all().
    # Pass is next-tier in v1; networks are masked.  Both directions have rules: both types.
    obj = cnp("isolate-team-b", priority=20, subject={"namespaces": {"matchLabels": {"team": "b"}}},
              ingress=[{"name": "from-team-a-web", "action": "Accept",
                        "from": [{"pods": {"namespaceSelector": {"matchLabels": {"team": "a"}},
                                           "podSelector": {"matchLabels": {"app": "web"}}}}],
                        "protocols": [{"tcp": {"destinationPort": {"number": 8080}}}]},
                       {"name": "deny-rest", "action": "Deny", "from": [{"namespaces": {}}]}],
              egress=[{"action": "Pass", "to": [{"networks": ["10.2.3.4/16"]}]}])
    assert served(obj) == {KEY.format("isolate-team-b"): (
        b'{"tier":"kube-admin","order":20,"inbound_rules":['
        b'{"action":"allow","protocol":"tcp","src_selector":"(pcns.team == \\"a\\") \\u0026\\u0026 '
        b"(projectcalico.org/orchestrator == 'k8s' \\u0026\\u0026 app == 'web')\","
        b'"dst_ports":[8080],'
        b"\"orig_src_selector\":\"projectcalico.org/orchestrator == 'k8s' \\u0026\\u0026 app == 'web'\","
        b"\"orig_src_namespace_selector\":\"team == 'a'\","
        b'"metadata":{"annotations":{"name":"from-team-a-web"}}},'
        b'{"action":"deny","src_selector":"has(projectcalico.org/namespace)",'
        b'"orig_src_namespace_selector":"all()","metadata":{"annotations":{"name":"deny-rest"}}}],'
        b'"outbound_rules":[{"action":"next-tier","dst_nets":["10.2.0.0/16"]}],'
        b"\"selector\":\"(projectcalico.org/orchestrator == 'k8s') \\u0026\\u0026 "
        b'pcns.team == \\"b\\"","types":["ingress","egress"]}')}


def test_baseline_tier_pod_subject_and_one_rule_per_protocol() -> None:
    # Baseline -> kube-baseline.  A pods subject gives both selectors (an empty namespace
    # selector is all(), which the processor turns into has(projectcalico.org/namespace)).
    # Protocols are sorted (TCP before UDP), each its own rule with its own ports; egress
    # peers put everything on the destination.  Egress rules only: types [egress].
    obj = cnp("baseline-dns", tier="Baseline", priority=5,
              subject={"pods": {"namespaceSelector": {},
                                "podSelector": {"matchExpressions": [
                                    {"key": "dns", "operator": "Exists"}]}}},
              egress=[{"action": "Accept",
                       "to": [{"namespaces": {"matchLabels": {"k": "sys"}}}],
                       "protocols": [{"udp": {"destinationPort": {"number": 53}}},
                                     {"tcp": {"destinationPort": {"range": {"start": 53,
                                                                             "end": 54}}}}]}])
    assert served(obj) == {KEY.format("baseline-dns"): (
        b'{"tier":"kube-baseline","order":5,"outbound_rules":['
        b'{"action":"allow","protocol":"tcp","dst_selector":"pcns.k == \\"sys\\"",'
        b'"dst_ports":["53:54"],"orig_dst_namespace_selector":"k == \'sys\'"},'
        b'{"action":"allow","protocol":"udp","dst_selector":"pcns.k == \\"sys\\"",'
        b'"dst_ports":[53],"orig_dst_namespace_selector":"k == \'sys\'"}],'
        b"\"selector\":\"(projectcalico.org/orchestrator == 'k8s' \\u0026\\u0026 has(dns)) "
        b'\\u0026\\u0026 has(projectcalico.org/namespace)","types":["egress"]}')}


def test_ports_merge_and_cast_as_go_does() -> None:
    def ports(*protocols: Any) -> list[Any]:
        rules = value(cnp(ingress=[{"action": "Accept", "from": [{"namespaces": {}}],
                                    "protocols": list(protocols)}]))["inbound_rules"]
        return [(r.get("protocol"), r.get("dst_ports")) for r in rules]

    tcp = lambda port: {"tcp": {"destinationPort": port}}  # noqa: E731
    # SimplifyPorts merges a protocol's numbers into ranges.
    assert ports(tcp({"number": 80}), tcp({"number": 81}), tcp({"range": {"start": 82, "end": 90}})
                 ) == [("tcp", ["80:90"])]
    # A protocol without a port allows all its ports, whatever else names that protocol.
    assert ports(tcp({"number": 80}), {"tcp": {}}) == [("tcp", None)]
    # int32 numbers are cast to uint16 (k8sCNPPortToCalico).
    assert ports(tcp({"number": 65536 + 443})) == [("tcp", [443])]
    # A named port has no protocol; an entry naming nothing allows everything.
    assert ports({"destinationNamedPort": "http"}) == [(None, ["http"])]
    assert ports({"destinationNamedPort": "http"}, {}) == [(None, None)]


def test_rules_that_fail_to_convert_are_dropped_or_fail_closed() -> None:
    bad_range = [{"tcp": {"destinationPort": {"range": {"start": 90, "end": 80}}}}]
    rules = value(cnp(ingress=[
        {"action": "Accept", "from": [{"namespaces": {}}], "protocols": bad_range},  # dropped
        {"action": "Deny", "from": [{"namespaces": {}}], "protocols": bad_range},  # -> deny
        {"action": "Pass", "from": [{}]},  # no supported peer field -> deny
        {"action": "Drop", "from": [{"namespaces": {}}]},  # unknown action: dropped
    ], egress=[
        {"action": "Pass", "to": [{"nodes": {}}]},  # nodes are not supported -> deny
        {"action": "Deny", "to": [{"networks": ["not-a-cidr"]}]},  # -> deny
        {"action": "Accept", "to": [{"namespaces": {}}],
         "protocols": [{"destinationNamedPort": "bad name!"}]},  # dropped
    ]))
    assert rules["inbound_rules"] == [{"action": "deny"}, {"action": "deny"}]
    assert rules["outbound_rules"] == [{"action": "deny"}, {"action": "deny"}]
    assert rules["types"] == ["ingress", "egress"]


def test_tombstones_withdraw_what_the_policy_served() -> None:
    # An unknown tier, or a subject with neither field, makes the conversion return a
    # nil-valued KVPair (clusterNetworkPolicyTombstone): the policy's key is deleted.
    tracker = SourceTracker(FELIX)

    def apply(obj: dict[str, Any], rev: str) -> list[tuple[str, UpdateType]]:
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": rev}}
        return [(u.key, u.update_type) for u in tracker.apply(
            ResourceEvent(K.K8S_CLUSTER_NETWORK_POLICY, "", "p", obj, rev))]

    assert apply(cnp(), "1") == [(KEY.format("p"), UpdateType.NEW)]
    assert apply(cnp(tier="Developer"), "2") == [(KEY.format("p"), UpdateType.DELETED)]
    assert apply(cnp(), "3") == [(KEY.format("p"), UpdateType.NEW)]
    assert apply(cnp(subject={}), "4") == [(KEY.format("p"), UpdateType.DELETED)]


def test_a_policy_without_rules_has_no_types_and_a_bad_uid_yields_nothing() -> None:
    assert value(cnp()) == {"tier": "kube-admin", "order": 1,
                            "selector": "(projectcalico.org/orchestrator == 'k8s') && "
                                        "has(projectcalico.org/namespace)"}
    bad_uid = cnp()
    bad_uid["metadata"]["uid"] = "not-a-uuid"  # ConvertUID fails: the list skips it
    assert served(bad_uid) == {}


def test_other_syncers_ignore_cluster_network_policies() -> None:
    for syncer in ("bgp", "tunnel-ip-allocation", "node-status"):
        definition = syncer_definition(syncer, DatastoreMode.KDD)
        assert K.K8S_CLUSTER_NETWORK_POLICY not in definition.kinds
