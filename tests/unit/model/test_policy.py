"""Policies, rules and tiers, and the rule and selector conversions of Calico's update
processors (``libcalico-go/lib/backend/syncersv1/updateprocessors/``:
``networkpolicyprocessor.go``, ``globalnetworkpolicyprocessor.go``, ``tierprocessor.go``,
``rules.go``, ``selectors.go``)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model.policy import policy_kvs, tier_kvs
from trio_typha.model.rules import entity_selector, rule_v3_to_v1
from trio_typha.model.validation import ValidationFilter


def _one(kvs: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    assert len(kvs) == 1
    return kvs[0]


def test_global_network_policy_with_namespace_selector() -> None:
    gnp = {"metadata": {"name": "gnp1"}, "spec": {
        "tier": "security", "order": 10, "selector": "app == 'db'",
        "namespaceSelector": "team == 'a'", "types": ["Ingress"],
        "ingress": [{"action": "Allow", "source": {"selector": "role == 'fe'",
                                                   "namespaceSelector": "all()"}}]}}
    key, value = _one(policy_kvs("GlobalNetworkPolicy", "gnp1", gnp))
    assert key == "/calico/v1/policy/GlobalNetworkPolicy//gnp1"
    assert value == (
        b'{"tier":"security","order":10,"inbound_rules":[{"action":"allow","src_selector":'
        b'"(has(projectcalico.org/namespace)) \\u0026\\u0026 (role == \'fe\')",'
        b'"orig_src_selector":"role == \'fe\'","orig_src_namespace_selector":"all()"}],'
        b'"selector":"(app == \'db\') \\u0026\\u0026 pcns.team == \\"a\\"","types":["ingress"]}')


def test_network_policy_with_service_account_names() -> None:
    np = {"metadata": {"name": "np1", "namespace": "prod"}, "spec": {
        "order": 100, "selector": "app == 'api'", "types": ["Egress"],
        "egress": [{"action": "Allow", "protocol": "TCP", "destination": {
            "ports": [5432], "serviceAccounts": {"names": ["db-sa", "cache-sa"]}}}]}}
    key, value = _one(policy_kvs("NetworkPolicy", "np1", np))
    assert key == "/calico/v1/policy/NetworkPolicy/prod/np1"
    assert json.loads(value) == {
        "namespace": "prod", "tier": "default", "order": 100,
        "outbound_rules": [{
            "action": "allow", "protocol": "tcp",
            "dst_selector": "(projectcalico.org/namespace == 'prod') && "
                            "(projectcalico.org/serviceaccount in {\"cache-sa\", \"db-sa\"})",
            "dst_ports": [5432], "orig_dst_service_acct_names": ["db-sa", "cache-sa"]}],
        "selector": "(app == 'api') && projectcalico.org/namespace == 'prod'",
        "types": ["egress"]}
    assert b"&&" not in value  # HTML-escaped on the wire


def test_tier_defaults() -> None:
    assert tier_kvs("default", {"spec": {}}, kdd=True) == [
        ("/calico/v1/policy/tier/default/metadata", b'{"order":1000000,"defaultAction":"Deny"}')]
    # etcd mode does not default the order; only Pass is kept as an action.
    assert tier_kvs("t", {"spec": {"defaultAction": "Log"}}, kdd=False) == [
        ("/calico/v1/policy/tier/t/metadata", b'{"defaultAction":"Deny"}')]
    assert tier_kvs("t", {"spec": {"order": 0, "defaultAction": "Pass"}}, kdd=True) == [
        ("/calico/v1/policy/tier/t/metadata", b'{"order":0,"defaultAction":"Pass"}')]


def test_staged_policies() -> None:
    staged = {"metadata": {"name": "s", "namespace": "ns"},
              "spec": {"stagedAction": "Learn", "selector": "a == 'b'"}}
    key, value = _one(policy_kvs("StagedNetworkPolicy", "s", staged))
    assert key == "/calico/v1/policy/StagedNetworkPolicy/ns/s"
    assert value.endswith(b'"staged_action":"Learn"}')
    deleted = {"metadata": {"name": "d"}, "spec": {"stagedAction": "Delete"}}
    assert policy_kvs("StagedGlobalNetworkPolicy", "d", deleted) == []
    no_action = {"metadata": {"name": "g"}, "spec": {}}
    assert b"staged_action" not in _one(policy_kvs("StagedGlobalNetworkPolicy", "g",
                                                   no_action))[1]


def test_global_policy_flags_and_service_account_selector() -> None:
    gnp = {"metadata": {"name": "g"}, "spec": {
        "selector": "", "serviceAccountSelector": "all()", "doNotTrack": True,
        "preDNAT": True, "applyOnForward": True, "performanceHints": ["AssumeNeededOnEveryNode"]}}
    value = json.loads(_one(policy_kvs("GlobalNetworkPolicy", "g", gnp))[1])
    assert value == {"tier": "default", "selector": "has(projectcalico.org/serviceaccount)",
                     "untracked": True, "pre_dnat": True, "apply_on_forward": True,
                     "performance_hints": ["AssumeNeededOnEveryNode"]}


def test_namespaced_policy_needs_a_namespace() -> None:
    assert policy_kvs("NetworkPolicy", "x", {"metadata": {"name": "x"}, "spec": {}}) == []


def test_entity_selector_combinations() -> None:
    # Only nets/ports: no namespace restriction even in a namespaced policy.
    assert entity_selector({}, "prod") == ""
    assert entity_selector({"notSelector": "a == 'b'"}, "prod") == \
        "projectcalico.org/namespace == 'prod'"
    assert entity_selector({"selector": "a == 'b'"}, "") == "a == 'b'"
    assert entity_selector({"namespaceSelector": "global()"}, "prod") == \
        "!has(projectcalico.org/namespace)"
    assert entity_selector({"serviceAccounts": {"selector": "x == 'y'", "names": ["b", "a"]},
                            "selector": "s == 't'"}, "") == \
        '((pcsa.x == "y") && (projectcalico.org/serviceaccount in {"a", "b"})) && (s == \'t\')'
    # An unparsable namespace selector loses the namespace restriction altogether.
    assert entity_selector({"namespaceSelector": "bad((", "selector": "a == 'b'"}, "p") == \
        "a == 'b'"


def test_rule_fields() -> None:
    rule = rule_v3_to_v1({
        "action": "Pass", "protocol": "ICMPv6", "notProtocol": "6", "ipVersion": 6,
        "icmp": {"type": 128, "code": 0}, "notICMP": {"type": 1},
        "source": {"nets": ["fd00::1/64", "junk"], "notNets": ["fd01::1"], "ports": ["http"],
                   "services": {"name": "svc", "namespace": "ns"}},
        "destination": {"nets": ["fd02::/64"], "notPorts": [1]},
        "http": {"methods": ["GET"]}, "metadata": {"annotations": {"k": "v"}}}, "")
    assert rule["action"] == "next-tier"
    assert str(rule["protocol"]) == "icmpv6" and rule["!protocol"].num_value() == 6
    assert [str(n) for n in rule["src_nets"]] == ["fd00::/64"]
    assert [str(n) for n in rule["!src_nets"]] == ["fd01::1/128"]
    assert (rule["icmp_type"], rule["icmp_code"], rule["!icmp_type"]) == (128, 0, 1)
    assert (rule["src_service"], rule["src_service_ns"]) == ("svc", "ns")
    assert rule["http"] == {"methods": ["GET"], "paths": None}
    assert rule["metadata"] == {"annotations": {"k": "v"}}
    # A metadata block without annotations produces no metadata at all.
    assert "metadata" not in rule_v3_to_v1({"action": "Allow", "metadata": {}}, "")


# -- properties ------------------------------------------------------------------------------

_selectors = st.sampled_from(["", "a == 'b'", "has(x)", "a in {'z', 'y'}", "!has(q) || r == 's'",
                              "all()", "global()", "bad((", "x == '<&>'"])
_nets = st.lists(st.sampled_from(["", "10.0.0.0/8", "10.1.2.3/16", "192.0.2.1", "fd00::1/64",
                                  "junk", "::ffff:1.2.3.4"]), max_size=3)
_ports = st.lists(st.sampled_from([80, "443", "8000:9000", "http", 65535]), max_size=3)
_entity = st.fixed_dictionaries({}, optional={
    "selector": _selectors, "namespaceSelector": _selectors, "notSelector": _selectors,
    "nets": _nets, "notNets": _nets, "ports": _ports,
    "serviceAccounts": st.fixed_dictionaries({}, optional={
        "names": st.lists(st.sampled_from(["a", "b", "c-d"]), max_size=3),
        "selector": _selectors}),
})
_rule = st.fixed_dictionaries(
    {"action": st.sampled_from(["Allow", "Deny", "Log", "Pass"])},
    optional={"protocol": st.sampled_from(["TCP", "UDP", "ICMP", 6, "17", 132]),
              "ipVersion": st.sampled_from([4, 6]), "source": _entity, "destination": _entity,
              "icmp": st.fixed_dictionaries({"type": st.integers(0, 255)})})
_spec = st.fixed_dictionaries({}, optional={
    "selector": _selectors, "namespaceSelector": _selectors,
    "serviceAccountSelector": _selectors,
    "order": st.one_of(st.integers(0, 10**6), st.floats(allow_nan=False, allow_infinity=False)),
    "types": st.lists(st.sampled_from(["Ingress", "Egress"]), max_size=2, unique=True),
    "ingress": st.lists(_rule, max_size=3), "egress": st.lists(_rule, max_size=2),
    "doNotTrack": st.booleans(), "stagedAction": st.sampled_from(["Set", "Learn", "Delete"]),
})


@given(st.sampled_from(["GlobalNetworkPolicy", "NetworkPolicy", "StagedGlobalNetworkPolicy",
                        "StagedNetworkPolicy"]), _spec)
def test_policy_conversion_is_stable_json(kind: str, spec: dict) -> None:
    policy = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}
    first = policy_kvs(kind, "p", policy)
    assert policy_kvs(kind, "p", policy) == first
    for key, value in first:
        decoded = json.loads(value)
        assert isinstance(decoded, dict) and "selector" in decoded
        ValidationFilter().error(key, value)  # never raises, whatever the content
