"""The invariant checker's pure core: expected KV sets from datastore contents, comparison
reports, and its agreement with the incremental path (tracker + validation + cache)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.cluster import in_calico_group, k8s_namespace, k8s_network_policy, k8s_pod, v3
from testbed.invariant import (
    DatastoreContents,
    StoredObject,
    check,
    compare,
    contents_from_etcd,
    expected_state,
    expected_states,
    state_of,
    watched_kinds,
)
from trio_typha.cache.core import SnapshotCache
from trio_typha.client.view import SyncView
from trio_typha.datastore.base import ResourceEvent
from trio_typha.datastore.etcd_rpc import KeyValue
from trio_typha.model import kinds as K
from trio_typha.model import validation
from trio_typha.model.kv import SYNCER_TYPES, SerializedUpdate
from trio_typha.model.syncers import DatastoreMode, syncer_definition
from trio_typha.syncer.tracker import SourceTracker

NS = "prod"
UID = "11111111-2222-3333-4444-555555555555"
WEP_KEY = f"/calico/v1/host/node-1/workload/k8s/{NS}%2fweb-1/endpoint/eth0"
KNP_KEY = f"/calico/v1/policy/KubernetesNetworkPolicy/{NS}/allow-web"
GNP_KEY = "/calico/v1/policy/GlobalNetworkPolicy//gnp1"
DEFAULT_ALLOW = "/calico/v1/policy/profile/projectcalico-default-allow/rules"


def stored_as(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    """``obj`` as the API server holds it at revision ``rv``."""
    obj["metadata"].update(uid=UID, resourceVersion=rv,
                           creationTimestamp="2025-01-01T00:00:00Z")
    return obj


def namespace(rv: str = "1", **labels: str) -> dict[str, Any]:
    return stored_as(k8s_namespace(NS, labels=labels), rv)


def pod(rv: str = "2", ip: str | None = "10.244.1.5", **labels: str) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running"}
    if ip:
        status.update(podIP=ip, podIPs=[{"ip": ip}])
    obj = k8s_pod("web-1", NS, labels=labels, node="node-1",
                  containers=[{"name": "c", "image": "nginx"}])
    return stored_as({**obj, "status": status}, rv)


def knp(rv: str = "3", port: int = 8080) -> dict[str, Any]:
    return stored_as(k8s_network_policy("allow-web", namespace=NS, app="web", port=port), rv)


def gnp(rv: str = "4", order: int = 10) -> dict[str, Any]:
    return stored_as(in_calico_group(v3("GlobalNetworkPolicy", "gnp1", {
        "order": order, "selector": "app == 'web'", "types": ["Ingress"],
        "ingress": [{"action": "Allow"}]}), K.CALICO_CRD_GROUP)[1], rv)


def stored(obj: dict[str, Any]) -> StoredObject:
    kind = K.kind_for(obj["apiVersion"], obj["kind"])
    m = obj["metadata"]
    return StoredObject(kind, m.get("namespace", ""), m["name"], obj, m["resourceVersion"])


def kdd(*objs: dict[str, Any]) -> DatastoreContents:
    return DatastoreContents(DatastoreMode.KDD, K.CALICO_CRD_GROUP, [stored(o) for o in objs])


def test_expected_state_derives_every_syncers_keys_with_the_conversion_layer() -> None:
    contents = kdd(namespace(team="a"), pod(app="web"), knp(), gnp())
    felix = expected_state(contents, "felix")
    assert {WEP_KEY, KNP_KEY, GNP_KEY, DEFAULT_ALLOW,
            f"/calico/v1/policy/profile/kns.{NS}/labels"} <= felix.keys()
    wep = json.loads(felix[WEP_KEY].value)
    assert wep["ipv4_nets"] == ["10.244.1.5/32"] and wep["labels"]["app"] == "web"
    assert felix[WEP_KEY].source == f"Pod {NS}/web-1" and felix[WEP_KEY].revision == "2"
    assert felix[f"/calico/v1/policy/profile/kns.{NS}/labels"].revision == "1/"
    assert json.loads(felix[GNP_KEY].value)["order"] == 10
    assert felix[DEFAULT_ALLOW].source == ""  # static: exists whatever the datastore holds
    others = expected_states(contents, ("bgp", "tunnel-ip-allocation", "node-status"))
    assert all(not kvs for kvs in others.values())  # none of these kinds are theirs


def test_compare_names_each_missing_extra_and_differing_key() -> None:
    expected = expected_state(kdd(namespace(), pod(app="web"), knp(), gnp()), "felix")
    actual = {k: e.value for k, e in expected.items()}
    assert compare(expected, actual, syncer_type="felix", subject="r0").ok
    del actual[WEP_KEY]
    actual["/calico/v1/policy/GlobalNetworkPolicy//ghost"] = b'{"order":1}'
    actual[KNP_KEY] = b'{"stale":true}'
    report = compare(expected, actual, syncer_type="felix", subject="replica-0 gob")
    assert not report.ok
    assert (report.missing, report.extra, report.differing) == (1, 1, 1)
    text = str(report)
    assert f"missing   {WEP_KEY} (from Pod {NS}/web-1)" in text
    assert "extra     /calico/v1/policy/GlobalNetworkPolicy//ghost" in text
    assert f"differing {KNP_KEY} (from NetworkPolicy {NS}/allow-web)" in text
    assert text.splitlines()[0].startswith("replica-0 gob [felix]: ")
    assert "missing 1, extra 1, differing 1" in report.summary()


def test_state_of_reads_clients_views_mappings_and_caches() -> None:
    u = SerializedUpdate("/a", b"1", "7")
    view = SyncView()
    view.apply([u, SerializedUpdate("/b", b"2"), SerializedUpdate("/b", None)])
    assert state_of(view) == {"/a": b"1"}

    class Client:  # TyphaClient and the e2e grpcio client keep ``kvs`` the same way
        kvs = {"/a": u}
    assert state_of(Client()) == {"/a": b"1"}
    assert state_of({"/a": b"1"}) == {"/a": b"1"}
    cache = SnapshotCache()
    cache.apply([u, SerializedUpdate("/c", b"3")], now=0.0)
    assert state_of(cache) == {"/a": b"1", "/c": b"3"}
    with pytest.raises(TypeError, match="not bytes"):
        state_of({"/a": 1})
    with pytest.raises(TypeError, match="cannot read"):
        state_of(42)


def test_check_reports_every_holder() -> None:
    contents = kdd(namespace(), gnp())
    felix = {k: e.value for k, e in expected_state(contents, "felix").items()}
    reports = check(contents, [("r0", "felix", felix), ("r1", "felix", {}),
                               ("r0", "bgp", {})])
    assert [r.ok for r in reports] == [True, False, True]
    assert reports[1].missing == len(felix)


def test_objects_failing_validation_are_not_expected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation.ValidationFilter, "error",
                        lambda self, key, value: "refused" if key == GNP_KEY else None)
    assert GNP_KEY not in expected_state(kdd(gnp()), "felix")


def test_contents_from_etcd_parses_v3_resources_and_skips_foreign_keys() -> None:
    root = "/calico/resources/v3/projectcalico.org"
    obj = stored_as(v3("GlobalNetworkPolicy", "gnp1", {"selector": "all()", "order": 5}), "0")
    kvs = [KeyValue(f"{root}/globalnetworkpolicies/gnp1".encode(), json.dumps(obj).encode(), 9),
           KeyValue(f"{root}/globalnetworkpolicies/broken".encode(), b"not json", 10),
           KeyValue(b"/somebody/else", b"{}", 11)]
    contents = contents_from_etcd(kvs)
    assert contents.mode is DatastoreMode.ETCD
    assert [(o.kind.kind, o.name, o.revision) for o in contents.objects] == [
        ("GlobalNetworkPolicy", "gnp1", "9")]
    assert json.loads(expected_state(contents, "felix")[GNP_KEY].value)["order"] == 5


def test_watched_kinds_cover_every_syncer() -> None:
    kinds = watched_kinds(DatastoreMode.KDD, K.CALICO_CRD_GROUP)
    assert len(kinds) == len(set(kinds))
    for t in SYNCER_TYPES:
        assert set(syncer_definition(t, DatastoreMode.KDD,
                                     calico_group=K.CALICO_CRD_GROUP).kinds) <= set(kinds)


# The incremental path a replica runs (tracker -> validation -> cache) must end where the
# checker's from-scratch derivation does, for any sequence of writes.
VARIANTS = {
    "ns": [namespace("1"), namespace("1", team="a"), namespace("1", team="b")],
    "pod": [pod("1", app="web"), pod("1", app="db"), pod("1", ip=None, app="web"),
            pod("1", ip="10.244.1.9", tier="a")],
    "knp": [knp("1", 80), knp("1", 443)],
    "gnp": [gnp("1", 1), gnp("1", 2)],
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(VARIANTS)), st.integers(-1, 3)),
                max_size=25))
def test_incremental_path_agrees_with_the_checker(writes: list[tuple[str, int]]) -> None:
    definition = syncer_definition("felix", DatastoreMode.KDD, calico_group=K.CALICO_CRD_GROUP)
    tracker = SourceTracker(definition)
    cache = SnapshotCache()
    validate = validation.ValidationFilter()
    cache.apply(validate(tracker.static_updates()), now=0.0)
    current: dict[str, dict[str, Any]] = {}
    for rv, (what, choice) in enumerate(writes, start=10):
        variants = VARIANTS[what]
        obj = None if choice < 0 else json.loads(json.dumps(variants[choice % len(variants)]))
        if obj is not None:
            obj["metadata"]["resourceVersion"] = str(rv)
            current[what] = obj
        else:
            current.pop(what, None)
        template = variants[0]
        kind = K.kind_for(template["apiVersion"], template["kind"])
        m = template["metadata"]
        ev = ResourceEvent(kind, m.get("namespace", ""), m["name"], obj, str(rv))
        cache.apply(validate(tracker.apply(ev)), now=float(rv))
    expected = expected_state(kdd(*current.values()), "felix")
    report = compare(expected, state_of(cache), syncer_type="felix", subject="cache")
    assert report.ok, str(report)

