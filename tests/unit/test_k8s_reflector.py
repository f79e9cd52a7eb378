"""The pure per-kind list-watch state, and the choice of Calico API group."""

from __future__ import annotations

from typing import Any

import pytest

from trio_typha.datastore.base import KindSynced, ResourceEvent
from trio_typha.datastore.k8s_errors import MalformedResponse
from trio_typha.datastore.k8s_reflector import KindReflector, WatchErrorEvent
from trio_typha.datastore.k8s_stream import WatchEvent
from trio_typha.datastore.kubernetes import choose_calico_group
from trio_typha.model import kinds as K


def _pod(name: str, rv: str, ns: str = "default", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}, **extra}


def _summary(events: list[Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for e in events:
        if isinstance(e, KindSynced):
            out.append(("synced",))
        else:
            assert isinstance(e, ResourceEvent)
            out.append(("del" if e.deleted else "set", e.namespace, e.name, e.revision))
    return out


def test_first_list_sends_everything_then_synced() -> None:
    r = KindReflector(K.POD)
    events = r.listed([_pod("a", "5"), _pod("b", "7", ns="kube-system")], "9")
    assert _summary(events) == [("set", "default", "a", "5"), ("set", "kube-system", "b", "7"),
                                ("synced",)]
    assert r.resume_rv == "9" and r.synced


def test_list_items_get_api_version_and_kind() -> None:
    r = KindReflector(K.calico_kind("IPPool", K.CALICO_CRD_GROUP))
    obj = {"metadata": {"name": "pool", "resourceVersion": "3"}, "spec": {"cidr": "10.0.0.0/16"}}
    (ev, _synced) = r.listed([obj], "3")
    assert isinstance(ev, ResourceEvent)
    assert ev.obj == {"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", **obj}
    assert ev.namespace == ""
    assert "apiVersion" not in obj  # the input is not mutated


def test_relist_sends_only_differences() -> None:
    r = KindReflector(K.POD)
    r.listed([_pod("a", "5"), _pod("b", "6"), _pod("c", "7")], "8")
    r.expire()
    assert r.resume_rv is None
    events = r.listed([_pod("a", "5"), _pod("b", "12"), _pod("d", "13")], "14")
    assert _summary(events) == [("set", "default", "b", "12"), ("set", "default", "d", "13"),
                                ("del", "default", "c", "")]  # Calico: empty revision
    assert r.resume_rv == "14"
    assert r.listed([_pod("a", "5"), _pod("b", "12"), _pod("d", "13")], "15") == []


def test_watch_events_update_the_resume_point() -> None:
    r = KindReflector(K.POD)
    r.listed([_pod("a", "5")], "5")
    added = r.watched(WatchEvent("ADDED", {"apiVersion": "v1", "kind": "Pod",
                                           **_pod("b", "6")}))
    assert _summary(added) == [("set", "default", "b", "6")]
    assert added[0].obj["kind"] == "Pod"  # type: ignore[union-attr,index]
    assert _summary(r.watched(WatchEvent("MODIFIED", _pod("a", "7")))) == [
        ("set", "default", "a", "7")]
    assert r.watched(WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "20"}})) == []
    assert r.resume_rv == "20"
    assert _summary(r.watched(WatchEvent("DELETED", _pod("b", "21")))) == [
        ("del", "default", "b", "21")]
    assert r.resume_rv == "21"


def test_replayed_watch_events_are_not_resent() -> None:
    r = KindReflector(K.POD)
    r.listed([], "1")
    assert r.watched(WatchEvent("ADDED", _pod("a", "2")))
    assert r.watched(WatchEvent("ADDED", _pod("a", "2"))) == []
    assert r.watched(WatchEvent("DELETED", _pod("a", "3")))
    assert r.watched(WatchEvent("DELETED", _pod("a", "3"))) == []


def test_error_event_raises_with_status() -> None:
    r = KindReflector(K.POD)
    r.listed([], "1")
    with pytest.raises(WatchErrorEvent) as info:
        r.watched(WatchEvent("ERROR", {"kind": "Status", "code": 410, "reason": "Expired",
                                       "message": "too old"}))
    assert info.value.status.expired
    assert r.resume_rv == "1"


def test_absent_kind_is_synced_and_empty() -> None:
    r = KindReflector(K.calico_kind("Tier"))
    assert _summary(r.absent()) == [("synced",)]
    assert r.absent() == []  # synced only once
    # Served again later: the list is sent, no second KindSynced.
    assert _summary(r.listed([{"metadata": {"name": "default", "resourceVersion": "4"}}],
                             "4")) == [("set", "", "default", "4")]
    # ...and if it disappears again, what was sent stays, as in Calico's watcher cache
    # (libcalico-go/lib/backend/watchersyncer/watchercache.go: a 404 list leaves its cache
    # alone); the list that finds it again sends the differences.
    assert r.absent() == []
    assert r.resume_rv is None
    assert _summary(r.listed([{"metadata": {"name": "other", "resourceVersion": "9"}}],
                             "9")) == [("set", "", "other", "9"), ("del", "", "default", "")]


def test_objects_without_identity_are_rejected_atomically() -> None:
    r = KindReflector(K.POD)
    r.listed([_pod("a", "1")], "1")
    with pytest.raises(MalformedResponse, match="without metadata.name"):
        r.listed([_pod("a", "2"), {"metadata": {"resourceVersion": "3"}}], "3")
    assert r.known.upsert("default", "a", {}, "1") is None  # the bad list changed nothing
    with pytest.raises(MalformedResponse):
        r.watched(WatchEvent("ADDED", {"metadata": {"name": "x"}}))


@pytest.mark.parametrize("configured, served, expected", [
    ("projectcalico.org/v3", None, K.CALICO_V3_GROUP),
    ("ProjectCalico.org/V3", {"crd.projectcalico.org"}, K.CALICO_V3_GROUP),
    ("crd.projectcalico.org/v1", {"projectcalico.org"}, K.CALICO_CRD_GROUP),
    ("something-else", None, K.CALICO_CRD_GROUP),
    (None, None, K.CALICO_CRD_GROUP),  # discovery failed
    (None, {"apps", "projectcalico.org"}, K.CALICO_V3_GROUP),
    (None, {"projectcalico.org", "crd.projectcalico.org"}, K.CALICO_CRD_GROUP),
    (None, {"crd.projectcalico.org"}, K.CALICO_CRD_GROUP),
    (None, set(), K.CALICO_CRD_GROUP),
])
def test_choose_calico_group(configured: str | None, served: set[str] | None,
                             expected: str) -> None:
    assert choose_calico_group(configured, served) == expected


def test_take_listed_hands_objects_on_one_by_one_and_lets_go_of_them() -> None:
    r = KindReflector(K.POD)
    items = [_pod("a", "5"), _pod("b", "6"), _pod("c", "7")]
    events = r.take_listed(items, "9")
    assert r.resume_rv == "9"
    first = next(events)
    assert _summary([first]) == [("set", "default", "a", "5")]
    assert [i["metadata"]["name"] for i in items] == ["c", "b"]  # "a" is the event's alone
    assert _summary(list(events)) == [("set", "default", "b", "6"), ("set", "default", "c", "7"),
                                      ("synced",)]
    assert items == []
    # A bad object fails the whole list before any event, as listed() does.
    bad = [_pod("a", "8"), {"metadata": {"resourceVersion": "3"}}]
    with pytest.raises(MalformedResponse):
        r.take_listed(bad, "10")
    assert len(bad) == 2 and r.known.revision("default", "a") == "5"


def test_stream_listed_checks_as_it_goes_and_a_broken_list_is_made_good_by_the_next() -> None:
    r = KindReflector(K.POD)

    def broken():
        yield _pod("a", "5")
        yield {"metadata": {"resourceVersion": "6"}}  # no name
        yield _pod("c", "7")

    events = r.stream_listed(broken(), "9")
    assert _summary([next(events)]) == [("set", "default", "a", "5")]
    with pytest.raises(MalformedResponse):
        next(events)
    assert not r.synced  # no KindSynced for an incomplete list
    r.expire()
    again = r.stream_listed(iter([_pod("a", "5"), _pod("b", "6"), _pod("c", "7")]), "10")
    assert _summary(list(again)) == [("set", "default", "b", "6"), ("set", "default", "c", "7"),
                                     ("synced",)]
    assert r.resume_rv == "10"
