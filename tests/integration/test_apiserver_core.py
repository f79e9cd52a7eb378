"""The test bed API server's pure cores: store, selectors, patches, watch cursor, routing.

No event loop and no sockets: these drive the sans-IO layers directly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.apiserver.api import Api, Request, WatchPlan, decode_continue, encode_continue
from testbed.apiserver.patch import PatchError, json_patch, merge_patch
from testbed.apiserver.resources import ApiSurface
from testbed.apiserver.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from testbed.apiserver.status import ApiError
from testbed.apiserver.store import Store
from testbed.apiserver.watch import WatchCursor
from testbed.cluster import k8s_pod
from trio_typha.model.kinds import NAMESPACE, POD, calico_kind

IPPOOL = calico_kind("IPPool", "crd.projectcalico.org")


def pod(name: str, ns: str = "default", labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    return k8s_pod(name, ns, labels=labels or {}, **spec)


def names(store: Store, ns: str | None = None, **kw: Any) -> list[str]:
    return [s.obj["metadata"]["name"] for s in store.list(POD, ns, **kw).items]


# -- store ---------------------------------------------------------------------------------

def test_create_fills_metadata_and_bumps_revision() -> None:
    store = Store()
    a = store.create(POD, pod("a"))
    b = store.create(POD, pod("b"))
    assert (a["apiVersion"], a["kind"]) == ("v1", "Pod")
    assert a["metadata"]["resourceVersion"] == "1" and b["metadata"]["resourceVersion"] == "2"
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert a["metadata"]["generation"] == 1
    assert a["metadata"]["creationTimestamp"].endswith("Z")
    assert store.revision == 2
    with pytest.raises(ApiError) as exc:
        store.create(POD, pod("a"))
    assert (exc.value.code, exc.value.reason) == (409, "AlreadyExists")


def test_cluster_scoped_kind_drops_namespace_and_generate_name_works() -> None:
    store = Store()
    ns = store.create(NAMESPACE, {"metadata": {"name": "x", "namespace": "ignored"}})
    assert "namespace" not in ns["metadata"]
    gen = store.create(POD, {"metadata": {"generateName": "web-", "namespace": "x"}})
    assert gen["metadata"]["name"].startswith("web-") and len(gen["metadata"]["name"]) == 9
    with pytest.raises(ApiError) as exc:
        store.create(POD, {"metadata": {"namespace": "x"}})
    assert exc.value.code == 422


def test_update_conflict_generation_and_noop() -> None:
    store = Store()
    created = store.create(POD, pod("a"))
    # A label change is not a spec change: generation stays.
    relabelled = store.update(POD, {**created, "metadata": {**created["metadata"],
                                                             "labels": {"x": "1"}}})
    assert relabelled["metadata"]["generation"] == 1
    assert relabelled["metadata"]["resourceVersion"] == "2"
    assert relabelled["metadata"]["uid"] == created["metadata"]["uid"]
    # Stale resourceVersion -> Conflict.
    with pytest.raises(ApiError) as exc:
        store.update(POD, {**created, "spec": {"nodeName": "n"}})
    assert (exc.value.code, exc.value.reason) == (409, "Conflict")
    respec = store.update(POD, {**relabelled, "spec": {"nodeName": "n"}})
    assert respec["metadata"]["generation"] == 2
    # Writing the same object again writes nothing.
    assert store.update(POD, respec) is respec
    assert store.revision == 3
    with pytest.raises(ApiError) as exc:
        store.update(POD, pod("missing"))
    assert exc.value.code == 404


def test_delete_preconditions_and_tombstone_revision() -> None:
    store = Store()
    created = store.create(POD, pod("a"))
    with pytest.raises(ApiError) as exc:
        store.delete(POD, "default", "a", uid="other")
    assert exc.value.reason == "Conflict"
    with pytest.raises(ApiError):
        store.delete(POD, "default", "a", resource_version="99")
    final = store.delete(POD, "default", "a", uid=created["metadata"]["uid"])
    assert final["metadata"]["resourceVersion"] == "2"
    assert store.get(POD, "default", "a") is None
    (event,) = store.events_after(1)
    assert event.type == "DELETED" and event.prev is not None
    assert event.prev.obj is created


def test_list_orders_by_namespace_then_name_and_filters() -> None:
    store = Store()
    for ns, name in [("b", "z"), ("a", "y"), ("b", "a"), ("a", "x"), ("c", "w")]:
        store.create(POD, pod(name, ns, {"app": ns}))
    assert names(store) == ["x", "y", "a", "z", "w"]
    assert names(store, "b") == ["a", "z"]
    sel = parse_label_selector("app in (a,c)")
    assert names(store, match=lambda o: sel.matches(o["metadata"]["labels"])) == ["x", "y", "w"]


def test_pagination_is_consistent_at_the_first_pages_revision() -> None:
    store = Store()
    for i in range(10):
        store.create(POD, pod(f"p{i}"))
    first = store.list(POD, limit=4)
    assert [s.obj["metadata"]["name"] for s in first.items] == ["p0", "p1", "p2", "p3"]
    assert first.remaining == 6 and first.last_key == ("default", "p3")
    # Churn between pages must not show through.
    store.delete(POD, "default", "p5")
    store.create(POD, pod("p55"))
    store.update(POD, {**store.get(POD, "default", "p6"), "spec": {"x": 1}})
    second = store.list(POD, revision=first.revision, after=first.last_key, limit=4)
    third = store.list(POD, revision=first.revision, after=second.last_key, limit=4)
    got = [s.obj["metadata"]["name"] for s in second.items + third.items]
    assert got == ["p4", "p5", "p6", "p7", "p8", "p9"]
    assert third.last_key is None
    assert all(s.rev <= first.revision for s in second.items + third.items)


def test_key_order_survives_incremental_and_bulk_index_updates() -> None:
    store = Store()
    assert store.list(POD).items == []  # builds the (empty) sorted index
    numbers = [(i * 7919) % 3000 for i in range(3000)]  # a permutation: random order
    assert store.create_many(POD, (pod(f"p{n:04d}", f"ns{n % 3}") for n in numbers)) == 3000
    expected = sorted((f"ns{n % 3}", f"p{n:04d}") for n in numbers)
    assert [(o["metadata"]["namespace"], o["metadata"]["name"])
            for o in store.objects(POD)] == expected
    for n in range(0, 3000, 3):  # few edits: applied to the index in place
        store.delete(POD, f"ns{n % 3}", f"p{n:04d}")
    store.create(POD, pod("p0000x", "ns0"))
    expected = sorted([k for k in expected if int(k[1][1:]) % 3] + [("ns0", "p0000x")])
    assert [(o["metadata"]["namespace"], o["metadata"]["name"])
            for o in store.objects(POD)] == expected
    assert names(store, "ns1") == [n for ns, n in expected if ns == "ns1"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "update", "delete"]),
                          st.integers(0, 15)), max_size=60),
       st.integers(1, 5), st.integers(0, 60))
def test_paginated_list_equals_snapshot_despite_interleaved_writes(
        ops: list[tuple[str, int]], limit: int, split: int) -> None:
    store = Store(history_size=1000)

    def apply(op: str, i: int) -> None:
        name = f"p{i:02d}"
        exists = store.get(POD, "default", name)
        if op == "create" and exists is None:
            store.create(POD, pod(name))
        elif op == "update" and exists is not None:
            store.update(POD, {**exists, "spec": {"n": store.revision}})
        elif op == "delete" and exists is not None:
            store.delete(POD, "default", name)

    for op, i in ops[:split]:
        apply(op, i)
    snapshot = [(s.obj["metadata"]["name"], s.rev) for s in store.list(POD).items]
    page = store.list(POD, limit=limit)
    seen = [(s.obj["metadata"]["name"], s.rev) for s in page.items]
    rest = iter(ops[split:])
    while page.last_key is not None:
        for op, i in [next(rest, ("create", 99))]:
            apply(op, i)
        page = store.list(POD, revision=page.revision, after=page.last_key, limit=limit)
        seen += [(s.obj["metadata"]["name"], s.rev) for s in page.items]
    assert seen == snapshot


def test_history_window_and_compaction_answer_410() -> None:
    store = Store(history_size=3)
    for i in range(5):
        store.create(POD, pod(f"p{i}"))
    assert [e.rev for e in store.events_after(2)] == [3, 4, 5]
    with pytest.raises(ApiError) as exc:
        store.events_after(1)
    assert (exc.value.code, exc.value.reason) == (410, "Expired")
    store.compact(4)
    with pytest.raises(ApiError):
        store.events_after(3)
    # A running watch resumes from what the history still holds.
    assert [e.rev for e in store.events_after(3, resuming=True)] == [4, 5]
    with pytest.raises(ApiError) as exc:
        store.list(POD, revision=3)
    assert exc.value.code == 410
    with pytest.raises(ApiError) as exc:
        store.list(POD, revision=99)
    assert exc.value.code == 504


# -- selectors -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "labels", "expected"), [
    ("", {}, True),
    ("a", {"a": ""}, True),
    ("a", {}, False),
    ("!a", {}, True),
    ("a=1", {"a": "1"}, True),
    ("a==1", {"a": "2"}, False),
    ("a!=1", {}, True),
    ("a in (1, 2)", {"a": "2"}, True),
    ("a notin (1,2)", {"a": "3"}, True),
    ("a notin (1,2)", {}, True),
    ("a in (1,2),b", {"a": "1"}, False),
    ("projectcalico.org/name=x, app", {"projectcalico.org/name": "x", "app": "y"}, True),
    ("n>3", {"n": "4"}, True),
    ("n<3", {"n": "x"}, False),
])
def test_label_selector(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


@pytest.mark.parametrize("text", ["a=", "=b", "a in 1", "a in ()", "a b", "a,,b", "a=(b)"])
def test_bad_label_selectors(text: str) -> None:
    if text == "a=":  # an empty value is legal: matches an empty label
        assert parse_label_selector(text).matches({"a": ""})
        return
    with pytest.raises(SelectorError):
        parse_label_selector(text)


_label_key = st.sampled_from(["a", "b", "app", "x.io/k"])
_label_value = st.sampled_from(["", "1", "2", "v"])


@given(st.dictionaries(_label_key, _label_value), _label_key, _label_value)
def test_equality_selectors_agree_with_dict_lookup(labels: dict[str, str], key: str,
                                                   value: str) -> None:
    assert parse_label_selector(f"{key}={value}").matches(labels) == (labels.get(key) == value)
    assert parse_label_selector(f"{key}!={value}").matches(labels) == (labels.get(key) != value)
    assert parse_label_selector(key).matches(labels) == (key in labels)
    assert parse_label_selector(f"!{key}").matches(labels) == (key not in labels)


def test_field_selector() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}}
    assert parse_field_selector("metadata.name=a", "", "pods").matches(obj)
    assert parse_field_selector("metadata.namespace!=ns", "", "pods").matches(obj) is False
    assert parse_field_selector("spec.nodeName==n1,metadata.name=a", "", "pods").matches(obj)
    with pytest.raises(SelectorError, match="field label not supported"):
        parse_field_selector("spec.nodeName=n1", "", "namespaces")


# -- patches ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("target", "patch", "expected"), [
    # The examples of RFC 7386, appendix A.
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_rfc7386_examples(target: Any, patch: Any, expected: Any) -> None:
    before = json.dumps(target)
    assert merge_patch(target, patch) == expected
    assert json.dumps(target) == before  # the original is untouched


def test_json_patch_operations() -> None:
    doc = {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2]}}
    out = json_patch(doc, [
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
        {"op": "add", "path": "/spec/list/-", "value": 3},
        {"op": "remove", "path": "/spec/list/0"},
        {"op": "copy", "from": "/spec/list", "path": "/spec/copy"},
        {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
        {"op": "test", "path": "/spec/moved/1", "value": 3},
    ])
    assert out == {"metadata": {"labels": {"a": "9", "b/c": "2"}},
                   "spec": {"list": [2, 3], "moved": [2, 3]}}
    assert doc == {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2]}}
    for bad in ([{"op": "test", "path": "/spec", "value": 1}],
                [{"op": "remove", "path": "/nope"}],
                [{"op": "replace", "path": "/spec/list/7", "value": 1}],
                [{"op": "frobnicate", "path": "/spec"}],
                {"op": "add"}):
        with pytest.raises(PatchError):
            json_patch(doc, bad)


# -- watch cursor ------------------------------------------------------------------------

def _events(lines: list[bytes]) -> list[tuple[str, str]]:
    out = []
    for line in lines:
        event = json.loads(line)
        out.append((event["type"], event["object"]["metadata"].get("name", "")))
    return out


def test_watch_cursor_selector_transitions_and_namespaces() -> None:
    surface = ApiSurface()
    pods = surface.for_kind(POD)
    store = Store()
    sel = parse_label_selector("role=web")
    cursor = WatchCursor(store, pods, namespace="default", start=0,
                         match=lambda o: sel.matches(o["metadata"].get("labels")))
    assert cursor.initial_lines() == []
    a = store.create(POD, pod("a", labels={"role": "web"}))
    store.create(POD, pod("b", labels={"role": "db"}))
    store.create(POD, pod("c", "other", labels={"role": "web"}))
    a = store.update(POD, {**a, "metadata": {**a["metadata"], "labels": {"role": "db"}}})
    b = store.get(POD, "default", "b")
    store.update(POD, {**b, "metadata": {**b["metadata"], "labels": {"role": "web"}}})
    store.delete(POD, "default", "b")
    store.create(IPPOOL, {"metadata": {"name": "pool"}})
    assert _events(cursor.poll()) == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"),
                                      ("DELETED", "b")]
    assert cursor.position == store.revision
    bookmark = json.loads(cursor.bookmark_line())
    assert bookmark == {"type": "BOOKMARK", "object": {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"resourceVersion": str(store.revision)}}}


def test_watch_cursor_initial_state_and_initial_events_end() -> None:
    pods = ApiSurface().for_kind(POD)
    store = Store()
    store.create(POD, pod("a"))
    store.create(POD, pod("b"))
    plain = WatchCursor(store, pods)
    assert _events(plain.initial_lines()) == [("ADDED", "a"), ("ADDED", "b")]
    streaming = WatchCursor(store, pods, initial_events=True)
    lines = streaming.initial_lines()
    assert _events(lines[:2]) == [("ADDED", "a"), ("ADDED", "b")]
    end = json.loads(lines[2])
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    # Each version's line is encoded once and shared.
    assert plain.initial_lines()[0] is streaming.initial_lines()[0]


# -- routing and REST semantics, without HTTP ---------------------------------------

def _api(**kw: Any) -> Api:
    store = Store()
    store.create(NAMESPACE, {"metadata": {"name": "default"}})
    return Api(store, ApiSurface(**kw))


def _call(api: Api, method: str, target: str, body: Any = None,
          content_type: str = "application/json") -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    result = api.handle(Request(method, target, {"content-type": content_type}, raw))
    assert not isinstance(result, WatchPlan)
    return result.status, json.loads(result.body) if result.body[:1] == b"{" else result.body


def test_discovery_documents_follow_the_served_groups() -> None:
    api = _api(calico_groups=("projectcalico.org",), cluster_network_policy=True)
    status, groups = _call(api, "GET", "/apis")
    assert status == 200
    served = {g["name"]: g["preferredVersion"]["version"] for g in groups["groups"]}
    assert served == {"discovery.k8s.io": "v1", "networking.k8s.io": "v1",
                      "policy.networking.k8s.io": "v1alpha2", "projectcalico.org": "v3"}
    status, body = _call(api, "GET", "/apis/crd.projectcalico.org/v1")
    assert (status, body["reason"]) == (404, "NotFound")
    status, body = _call(api, "GET", "/api/v1")
    pods = next(r for r in body["resources"] if r["name"] == "pods")
    assert pods["namespaced"] and pods["kind"] == "Pod" and "watch" in pods["verbs"]
    assert any(r["name"] == "pods/status" for r in body["resources"])
    _, v3 = _call(api, "GET", "/apis/projectcalico.org/v3")
    plurals = {r["name"] for r in v3["resources"]}
    assert {"ippools", "networkpolicies", "tiers", "profiles"} <= plurals
    assert not {"nodes", "workloadendpoints", "livemigrations"} & plurals
    _, crd = _call(_api(), "GET", "/apis/crd.projectcalico.org/v1")
    crd_plurals = {r["name"] for r in crd["resources"]}
    assert plurals - crd_plurals == {"profiles"}  # KDD derives profiles: there is no CRD


def test_unknown_paths_methods_and_bad_queries() -> None:
    api = _api()
    assert _call(api, "GET", "/api/v1/frobs")[0] == 404
    assert _call(api, "GET", "/api/v1/pods/name")[0] == 404  # namespaced: needs a namespace
    assert _call(api, "PUT", "/api/v1/namespaces/default/pods")[0] == 405
    assert _call(api, "GET", "/api/v1/pods?limit=x")[0] == 400
    assert _call(api, "GET", "/api/v1/pods?labelSelector=a%20in%20")[0] == 400
    status, body = _call(api, "GET", "/api/v1/pods?resourceVersionMatch=Exact")
    assert status == 400 and "resourceVersionMatch" in body["message"]
    assert _call(api, "GET", "/api/v1/pods?continue=garbage")[0] == 400
    assert _call(api, "GET", "/healthz") == (200, b"ok")


def test_forbidden_hook_names_the_resource_like_rbac() -> None:
    api = _api()
    api.forbid("crd.projectcalico.org", "ippools", {"list", "watch"})
    status, body = _call(api, "GET", "/apis/crd.projectcalico.org/v1/ippools")
    assert status == 403
    assert body["reason"] == "Forbidden"
    assert body["message"] == (
        'ippools.crd.projectcalico.org is forbidden: User '
        '"system:serviceaccount:calico-system:calico-typha" cannot list resource "ippools" '
        'in API group "crd.projectcalico.org" at the cluster scope')
    assert body["details"] == {"group": "crd.projectcalico.org", "kind": "ippools"}
    assert _call(api, "GET", "/apis/crd.projectcalico.org/v1/ippools/x")[0] == 404  # get ok
    api.allow("crd.projectcalico.org", "ippools")
    assert _call(api, "GET", "/apis/crd.projectcalico.org/v1/ippools")[0] == 200


def test_expired_continue_token_gets_410_and_an_inconsistent_token() -> None:
    api = _api()
    for i in range(4):
        _call(api, "POST", "/api/v1/namespaces/default/pods", pod(f"p{i}"))
    _, first = _call(api, "GET", "/api/v1/namespaces/default/pods?limit=2")
    token = first["metadata"]["continue"]
    assert first["metadata"]["remainingItemCount"] == 2
    _call(api, "POST", "/api/v1/namespaces/default/pods", pod("p4"))
    api.store.compact()
    status, body = _call(api, "GET", f"/api/v1/namespaces/default/pods?limit=2&continue={token}")
    assert (status, body["reason"]) == (410, "Expired")
    retry = body["metadata"]["continue"]
    assert decode_continue(retry)[0] == -1
    status, rest = _call(api, "GET", f"/api/v1/namespaces/default/pods?continue={retry}")
    assert status == 200
    # Inconsistent by design: it reads the latest state, so p4 shows up.
    assert [i["metadata"]["name"] for i in rest["items"]] == ["p2", "p3", "p4"]


def test_list_resource_version_semantics() -> None:
    api = _api()
    _call(api, "POST", "/api/v1/namespaces/default/pods", pod("a"))
    rev = api.store.revision
    _call(api, "POST", "/api/v1/namespaces/default/pods", pod("b"))
    # Exact: the state at that revision.
    _, exact = _call(api, "GET", f"/api/v1/pods?resourceVersion={rev}"
                                 f"&resourceVersionMatch=Exact")
    assert [i["metadata"]["name"] for i in exact["items"]] == ["a"]
    assert exact["metadata"]["resourceVersion"] == str(rev)
    # NotOlderThan / "0": the latest.
    _, latest = _call(api, "GET", f"/api/v1/pods?resourceVersion={rev}")
    assert len(latest["items"]) == 2
    status, body = _call(api, "GET", "/api/v1/pods?resourceVersion=999")
    assert (status, body["reason"]) == (504, "Timeout")
    assert encode_continue(5, ("a", "b")) != encode_continue(5, ("a", "c"))


def test_status_subresource_rules() -> None:
    api = _api()
    _, created = _call(api, "POST", "/api/v1/namespaces/default/pods",
                       {**pod("a"), "status": {"podIP": "10.0.0.1"}})
    # A main-resource update cannot change status...
    _, updated = _call(api, "PUT", "/api/v1/namespaces/default/pods/a",
                       {**created, "status": {"podIP": "10.9.9.9"},
                        "spec": {"containers": [], "nodeName": "n"}})
    assert updated["status"] == {"podIP": "10.0.0.1"}
    assert updated["spec"]["nodeName"] == "n"
    # ...and a status write changes only status.
    _, patched = _call(api, "PATCH", "/api/v1/namespaces/default/pods/a/status",
                       {"status": {"podIP": "10.0.0.2"}, "spec": {"nodeName": "m"}},
                       "application/merge-patch+json")
    assert patched["status"] == {"podIP": "10.0.0.2"}
    assert patched["spec"]["nodeName"] == "n"
    status, _ = _call(api, "GET", "/apis/crd.projectcalico.org/v1/ippools/x/status")
    assert status == 404


def test_strategic_merge_patch_is_refused_for_custom_resources() -> None:
    api = _api()
    _call(api, "POST", "/apis/crd.projectcalico.org/v1/ippools", {"metadata": {"name": "p"}})
    status, body = _call(api, "PATCH", "/apis/crd.projectcalico.org/v1/ippools/p",
                         {"spec": {}}, "application/strategic-merge-patch+json")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
