"""Property tests for the k8s conversions: determinism, label flow, port merging, helpers."""

from __future__ import annotations

import copy
import ipaddress
import json
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.model.golang import parse_cidr
from trio_typha.model.k8s import (
    convert_uid,
    endpoint_slice_passthrough,
    k8s_network_policy_to_calico,
    namespace_to_profile,
    node_to_calico_node,
    pod_to_workload_endpoint,
    service_account_to_profile,
    service_passthrough,
)
from trio_typha.model.k8s_meta import go_marshal_string_map
from trio_typha.model.k8s_quantity import quantity_value

# Per-test settings (a loaded profile would leak into the rest of the suite).
bounded = settings(max_examples=60, deadline=None)

_label_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._/", min_size=1,
                      max_size=20)
labels = st.dictionaries(_label_text, st.text(max_size=15), max_size=6)
names = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
uids = st.uuids(version=4).map(str)
ipv4 = st.ip_addresses(v=4).map(str)
ports = st.integers(min_value=1, max_value=65535)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    ips = draw(st.lists(st.one_of(ipv4, st.ip_addresses(v=6).map(str)), max_size=2))
    return {
        "metadata": {"name": draw(names), "namespace": draw(names), "labels": draw(labels),
                     "uid": draw(uids)},
        "spec": {"nodeName": draw(names), "serviceAccountName": draw(st.one_of(st.just(""),
                                                                                 names)),
                 "containers": [{"name": "c", "ports": [
                     {"name": draw(names), "containerPort": draw(ports)}]}]},
        "status": {"phase": draw(st.sampled_from(["Running", "Pending", "Succeeded"])),
                   "podIPs": [{"ip": ip} for ip in ips]},
    }


@st.composite
def network_policies(draw: st.DrawFn) -> dict[str, Any]:
    def peer() -> dict[str, Any]:
        return draw(st.one_of(
            st.builds(lambda lab: {"podSelector": {"matchLabels": lab}}, labels),
            st.builds(lambda lab: {"namespaceSelector": {"matchLabels": lab}}, labels),
            st.builds(lambda a, n: {"ipBlock": {"cidr": f"{a}/{n}"}}, ipv4,
                      st.integers(0, 32)),
        ))
    port_entries = draw(st.lists(st.fixed_dictionaries(
        {"port": ports}, optional={"protocol": st.sampled_from(["TCP", "UDP", "SCTP"])}),
        max_size=4))
    rule = {"from": [peer() for _ in range(draw(st.integers(0, 2)))], "ports": port_entries}
    return {"metadata": {"name": draw(names), "namespace": draw(names), "uid": draw(uids)},
            "spec": {"podSelector": {"matchLabels": draw(labels)}, "ingress": [rule],
                     "egress": [{"to": rule["from"], "ports": port_entries}],
                     "policyTypes": draw(st.lists(st.sampled_from(["Ingress", "Egress"]),
                                                  unique=True))}}


@bounded
@given(pods())
def test_pod_conversion_is_deterministic_and_pure(pod: dict[str, Any]) -> None:
    before = copy.deepcopy(pod)
    assert pod_to_workload_endpoint(pod) == pod_to_workload_endpoint(pod)
    assert pod == before


@bounded
@given(pods())
def test_pod_labels_survive_into_the_endpoint(pod: dict[str, Any]) -> None:
    wep = pod_to_workload_endpoint(pod)
    assert wep is not None
    meta = pod["metadata"]
    expected = {**meta["labels"], "projectcalico.org/namespace": meta["namespace"],
                "projectcalico.org/orchestrator": "k8s"}
    if pod["spec"]["serviceAccountName"]:
        expected["projectcalico.org/serviceaccount"] = pod["spec"]["serviceAccountName"]
    assert wep["metadata"]["labels"] == expected
    assert list(wep["metadata"]["labels"]) == sorted(expected)


@bounded
@given(network_policies())
def test_policy_conversion_is_deterministic_and_pure(np: dict[str, Any]) -> None:
    before = copy.deepcopy(np)
    first = k8s_network_policy_to_calico(np)
    assert first == k8s_network_policy_to_calico(np)
    assert np == before
    assert first["spec"]["types"] in (["Ingress"], ["Egress"], ["Ingress", "Egress"])


@bounded
@given(st.lists(ports, min_size=1, max_size=12))
def test_merged_ports_cover_exactly_the_requested_ports(requested: list[int]) -> None:
    np = {"metadata": {"name": "p", "namespace": "n"},
          "spec": {"ingress": [{"ports": [{"port": p} for p in requested]}]}}
    (rule,) = k8s_network_policy_to_calico(np)["spec"]["ingress"]
    ranges = []
    for port in rule["destination"]["ports"]:
        lo, _, hi = str(port).partition(":")
        ranges.append((int(lo), int(hi or lo)))
    covered = [p for lo, hi in ranges for p in range(lo, hi + 1)]
    assert covered == sorted(set(requested))
    # Minimal: no two ranges could have been merged.
    assert all(b[0] > a[1] + 1 for a, b in zip(ranges, ranges[1:], strict=False))


@bounded
@given(names, labels, uids)
def test_namespace_labels_survive_into_the_profile(name: str, lab: dict[str, str],
                                                   uid: str) -> None:
    ns = {"metadata": {"name": name, "uid": uid, "labels": lab}}
    profile = namespace_to_profile(ns)
    assert profile == namespace_to_profile(ns)
    expected = {"pcns." + k: v for k, v in lab.items()}
    expected["pcns.projectcalico.org/name"] = name
    assert profile["spec"]["labelsToApply"] == expected
    assert profile["metadata"]["uid"] == convert_uid(uid)


@bounded
@given(names, names, labels, uids)
def test_service_account_labels_survive_into_the_profile(ns: str, name: str,
                                                         lab: dict[str, str], uid: str) -> None:
    sa = {"metadata": {"name": name, "namespace": ns, "uid": uid, "labels": lab}}
    profile = service_account_to_profile(sa)
    assert profile == service_account_to_profile(sa)
    expected = {"pcsa." + k: v for k, v in lab.items()}
    expected["pcsa.projectcalico.org/name"] = name
    assert profile["spec"]["labelsToApply"] == expected
    assert profile["metadata"]["name"] == f"ksa.{ns}.{name}"


@bounded
@given(names, labels, labels, ipv4)
def test_node_labels_win_over_calico_labels(name: str, k8s: dict[str, str],
                                            calico: dict[str, str], addr: str) -> None:
    node = {"metadata": {"name": name, "labels": k8s, "annotations": {
        "projectcalico.org/labels": json.dumps(calico),
        "projectcalico.org/IPv4Address": addr}}}
    converted = node_to_calico_node(node)
    assert converted == node_to_calico_node(node)
    assert converted["metadata"].get("labels", {}) == {**calico, **k8s}
    kube_labels = converted["metadata"]["annotations"]["projectcalico.org/kube-labels"]
    assert json.loads(kube_labels) == (k8s or None)
    assert converted["spec"]["addresses"][0] == {"address": addr, "type": "CalicoNodeIP"}


@bounded
@given(names, labels)
def test_passthrough_is_deterministic(name: str, lab: dict[str, str]) -> None:
    svc = {"kind": "Service", "metadata": {"name": name, "labels": lab},
           "spec": {"ports": [{"port": 80}]}}
    assert service_passthrough(svc) == service_passthrough(svc)
    eps = {"metadata": {"name": name, "labels": lab}, "addressType": "IPv4",
           "endpoints": [{"addresses": ["10.0.0.1"]}]}
    assert endpoint_slice_passthrough(eps) == endpoint_slice_passthrough(eps)


@bounded
@given(st.uuids())
def test_convert_uid_is_an_involution(u: uuid.UUID) -> None:
    once = convert_uid(str(u))
    assert convert_uid(once) == str(u)
    assert uuid.UUID(once).bytes[6] == u.bytes[6] and uuid.UUID(once).bytes[8] == u.bytes[8]


_plain_text = st.text(st.characters(blacklist_categories=("Cs",),
                                    blacklist_characters="<>&\u2028\u2029"), max_size=12)


@bounded
@given(st.dictionaries(_plain_text, _plain_text, max_size=5))
def test_go_map_json_matches_compact_sorted_json(m: dict[str, str]) -> None:
    out = go_marshal_string_map(m)
    assert json.loads(out) == m
    if not any(ord(c) < 0x20 for kv in m.items() for s in kv for c in s):
        assert out == json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@bounded
@given(st.integers(min_value=0, max_value=10**12),
       st.sampled_from([("", 1), ("k", 10**3), ("M", 10**6), ("Ki", 2**10), ("Gi", 2**30),
                        ("e2", 100), ("m", None)]))
def test_quantity_integer_forms(n: int, suffix: tuple[str, int | None]) -> None:
    text, multiplier = suffix
    expected = -(-n // 1000) if multiplier is None else n * multiplier
    assert quantity_value(f"{n}{text}") == expected


@bounded
@given(st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 32)),
    st.tuples(st.ip_addresses(v=6).filter(lambda a: a.ipv4_mapped is None), st.integers(0, 128)),
))
def test_cidr_network_text_matches_ipaddress(case: tuple[Any, int]) -> None:
    addr, prefix = case
    text = f"{addr}/{prefix}"
    assert str(parse_cidr(text)) == str(ipaddress.ip_network(text, strict=False))
