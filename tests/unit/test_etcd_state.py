"""EtcdSyncState: range pages and watch messages into datastore events (no event loop)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.datastore.base import KindSynced, ResourceEvent
from trio_typha.datastore.etcd_layout import resource_key
from trio_typha.datastore.etcd_rpc import Header, KeyValue, WatchEvent, WatchResponse
from trio_typha.datastore.etcd_state import EtcdSyncState
from trio_typha.model import kinds as K

GNP = K.calico_kind("GlobalNetworkPolicy")
NP = K.calico_kind("NetworkPolicy")
GNS = K.calico_kind("GlobalNetworkSet")  # sorts between GNP and NP: inside their span
CLUSTER = "c1"


def kv(kind: K.ResourceKind, name: str, rev: int, value: Any = None, ns: str = "") -> KeyValue:
    if value is None:
        value = {"metadata": {"name": name}, "spec": {"rev": rev}}
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return KeyValue(resource_key(kind, ns, name).encode(), raw, rev)


def put(k: KeyValue) -> WatchEvent:
    return WatchEvent(False, k)


def delete(kind: K.ResourceKind, name: str, rev: int, ns: str = "") -> WatchEvent:
    return WatchEvent(True, KeyValue(resource_key(kind, ns, name).encode(), b"", rev))


def msg(*events: WatchEvent, rev: int = 0, created: bool = False) -> WatchResponse:
    return WatchResponse(Header(CLUSTER, rev), created=created, events=events)


def test_first_list_sends_objects_then_kind_synced_once() -> None:
    st_ = EtcdSyncState([GNP, NP])
    hdr = Header(CLUSTER, 10)
    assert st_.needs_relist(hdr)
    evs = st_.listed(GNP, [kv(GNP, "a", 3), kv(GNP, "b", 4)], hdr)
    assert [(type(e).__name__, getattr(e, "name", None)) for e in evs] == [
        ("ResourceEvent", "a"), ("ResourceEvent", "b"), ("KindSynced", None)]
    a = evs[0]
    assert isinstance(a, ResourceEvent) and a.revision == "3"
    assert a.obj == {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
                     "metadata": {"name": "a"}, "spec": {"rev": 3}}
    assert st_.listed(NP, [kv(NP, "n", 5, ns="prod")], hdr)[0] == ResourceEvent(
        NP, "prod", "n", {"apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
                          "metadata": {"name": "n"}, "spec": {"rev": 5}}, "5")
    st_.list_complete(hdr)
    assert st_.revision == 10 and not st_.needs_relist(Header(CLUSTER, 12))
    # A relist sends only differences and no second KindSynced.
    st_.compacted(11)
    assert st_.needs_relist(Header(CLUSTER, 12))
    evs = st_.listed(GNP, [kv(GNP, "a", 3), kv(GNP, "c", 11)], Header(CLUSTER, 12))
    # Calico's watcher cache sends the deletions a relist implies without a revision.
    assert [(e.name, e.deleted, e.revision) for e in evs if isinstance(e, ResourceEvent)] == [
        ("c", False, "11"), ("b", True, "")]
    assert not any(isinstance(e, KindSynced) for e in evs)


def test_unparsable_values_are_skipped_on_list() -> None:
    st_ = EtcdSyncState([GNP])
    evs = st_.listed(GNP, [kv(GNP, "bad", 2, b"{not json"), kv(GNP, "arr", 3, b"[1]"),
                           kv(GNP, "ok", 4)], Header(CLUSTER, 4))
    assert [e.name for e in evs if isinstance(e, ResourceEvent)] == ["ok"]


def test_watch_events_and_revision_tracking() -> None:
    st_ = EtcdSyncState([GNP, NP])
    st_.listed(GNP, [kv(GNP, "a", 2)], Header(CLUSTER, 5))
    st_.listed(NP, [], Header(CLUSTER, 5))
    st_.list_complete(Header(CLUSTER, 5))

    # "created" carries the current revision, not a delivery promise: no advance.
    assert st_.watched(msg(rev=40, created=True)) == []
    assert st_.revision == 5

    evs = st_.watched(msg(put(kv(GNP, "a", 6)), put(kv(GNS, "set", 7)),
                          put(kv(NP, "n", 8, ns="ns1")), delete(GNP, "gone", 9), rev=9))
    # GNS is inside the span but not watched; "gone" was never sent.
    assert [(e.kind.kind, e.name, e.revision) for e in evs] == [
        ("GlobalNetworkPolicy", "a", "6"), ("NetworkPolicy", "n", "8")]
    assert st_.revision == 9

    # A deletion carries the deleted entry's last revision (Calico reads the watch's
    # previous KV), not the revision of the delete.
    evs = st_.watched(msg(delete(NP, "n", 10, ns="ns1"), rev=10))
    assert evs == [ResourceEvent(NP, "ns1", "n", None, "8")]

    # A progress notification promises everything up to its revision was sent.
    assert st_.watched(msg(rev=15)) == [] and st_.revision == 15


def test_value_turning_invalid_on_watch_is_a_deletion() -> None:
    st_ = EtcdSyncState([GNP])
    st_.listed(GNP, [kv(GNP, "a", 2)], Header(CLUSTER, 2))
    st_.list_complete(Header(CLUSTER, 2))
    assert st_.watched(msg(put(kv(GNP, "a", 3, b"garbage")), rev=3)) == [
        ResourceEvent(GNP, "", "a", None, "3")]
    assert st_.watched(msg(put(kv(GNP, "b", 4, b"garbage")), rev=4)) == []


def test_resume_needs_the_same_cluster_with_our_history() -> None:
    st_ = EtcdSyncState([GNP])
    st_.listed(GNP, [], Header(CLUSTER, 20))
    st_.list_complete(Header(CLUSTER, 20))
    assert not st_.needs_relist(Header(CLUSTER, 20))
    assert st_.needs_relist(Header("other-cluster", 30))
    assert st_.needs_relist(Header(CLUSTER, 3))  # rewound: restored from an old backup


# -- property: whatever mix of watching and relisting, the view converges on etcd ---------

ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from([GNP, NP, GNS]), st.sampled_from("abcd"),
              st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from([GNP, NP, GNS]), st.sampled_from("abcd"),
              st.just(False)),
    st.tuples(st.just("relist"), st.just(GNP), st.just(""), st.just(False)),
), max_size=40)


@settings(max_examples=200)
@given(ops)
def test_view_matches_store_and_relist_sends_only_changes(script: list[tuple]) -> None:
    # The store holds a kind outside the watch (GNS, inside the span) and invalid values.
    kinds = [GNP, NP]
    store: dict[tuple, KeyValue] = {}
    rev = 1
    st_ = EtcdSyncState(kinds)
    view: dict[tuple, Any] = {}

    def apply(events: list) -> list[ResourceEvent]:
        out = [e for e in events if isinstance(e, ResourceEvent)]
        for e in out:
            key = (e.kind, e.namespace, e.name)
            if e.deleted:
                assert key in view, "deletion of a key never sent"
                view.pop(key)
            else:
                view[key] = e.obj
        return out

    def relist() -> list[ResourceEvent]:
        hdr = Header(CLUSTER, rev)
        out = []
        for kind in kinds:
            out += apply(st_.listed(kind, [v for (k, _, _), v in sorted(store.items(), key=str)
                                           if k == kind], hdr))
        st_.list_complete(hdr)
        return out

    def expected() -> dict[tuple, Any]:
        out = {}
        for (kind, ns, name), v in store.items():
            if kind not in kinds or not v.value.startswith(b"{"):
                continue
            out[(kind, ns, name)] = {"apiVersion": kind.api_version, "kind": kind.kind,
                                     **json.loads(v.value)}
        return out

    relist()
    for op, kind, name, invalid in script:
        if op == "relist":
            # Nothing was missed, so a relist has nothing to say.
            assert relist() == []
            continue
        ns = "ns" if kind.namespaced else ""
        rev += 1
        if op == "put":
            store[(kind, ns, name)] = kv(kind, name, rev, b"oops" if invalid else None, ns=ns)
            apply(st_.watched(msg(put(store[(kind, ns, name)]), rev=rev)))
        else:
            store.pop((kind, ns, name), None)
            apply(st_.watched(msg(delete(kind, name, rev, ns=ns), rev=rev)))
        assert view == expected()
        assert st_.revision == rev


@settings(max_examples=200)
@given(ops, ops)
def test_relist_after_missed_changes_sends_exactly_the_differences(first: list[tuple],
                                                                    missed: list[tuple]) -> None:
    # Changes the watcher missed (compaction) are recovered by one relist, which sends an
    # event for exactly the keys whose stored revision differs from what was sent.
    kinds = [GNP, NP]
    st_ = EtcdSyncState(kinds)
    store: dict[tuple, KeyValue] = {}
    rev = 1

    def mutate(script: list[tuple]) -> None:
        nonlocal rev
        for op, kind, name, _ in script:
            if kind not in kinds or op == "relist":
                continue
            ns = "ns" if kind.namespaced else ""
            rev += 1
            if op == "put":
                store[(kind, ns, name)] = kv(kind, name, rev, ns=ns)
            else:
                store.pop((kind, ns, name), None)

    def relist() -> list:
        out = []
        for kind in kinds:
            out += st_.listed(kind, [v for (k, _, _), v in sorted(store.items(), key=str)
                                     if k == kind], Header(CLUSTER, rev))
        st_.list_complete(Header(CLUSTER, rev))
        return [e for e in out if isinstance(e, ResourceEvent)]

    mutate(first)
    relist()
    sent_before = {k: v.mod_revision for k, v in store.items()}
    mutate(missed)
    st_.compacted(rev)
    evs = relist()
    now = {k: v.mod_revision for k, v in store.items()}
    differing = {k for k in set(sent_before) | set(now) if sent_before.get(k) != now.get(k)}
    assert {(e.kind, e.namespace, e.name) for e in evs} == differing
    assert len(evs) == len(differing)


def _summary(evs: list[Any]) -> list[tuple[str, str | None, str | None, bool]]:
    return [(type(e).__name__, getattr(e, "name", None), getattr(e, "revision", None),
             getattr(e, "obj", None) is None) for e in evs]


@given(st.lists(st.sampled_from("abcdefgh"), unique=True),
       st.lists(st.sampled_from("abcdefgh"), unique=True),
       st.integers(min_value=1, max_value=4))
def test_a_list_fed_page_by_page_sends_what_one_range_would(before: list[str],
                                                            after: list[str],
                                                            page: int) -> None:
    """listed_page over the pages then kind_listed: the same events, in the same order, as
    listed() given the whole range at once, first list and relist alike."""
    whole, paged = EtcdSyncState([GNP]), EtcdSyncState([GNP])
    hdr = Header(CLUSTER, 50)
    for names, rev in ((before, 1), (after, 2)):
        kvs = [kv(GNP, n, rev + i) for i, n in enumerate(sorted(names))]
        expected = whole.listed(GNP, kvs, hdr)
        paged.begin_list()
        got: list[Any] = []
        for i in range(0, len(kvs), page):
            got += paged.listed_page(GNP, kvs[i:i + page])
        got += paged.kind_listed(GNP)
        assert _summary(got) == _summary(expected)
        assert len(paged) == len(whole) == len(names)


def test_an_abandoned_list_is_dropped_and_the_next_one_sends_only_what_differs() -> None:
    """A list that fails after its first page (compaction, a lost connection) sent that
    page; the next list sends nothing for those objects again, and deletes what neither
    list saw only once it is complete."""
    st_ = EtcdSyncState([GNP])
    hdr = Header(CLUSTER, 9)
    st_.listed(GNP, [kv(GNP, "old", 1)], hdr)
    st_.begin_list()
    assert _summary(st_.listed_page(GNP, [kv(GNP, "a", 3)])) == [
        ("ResourceEvent", "a", "3", False)]
    st_.begin_list()  # the first attempt is abandoned; no deletion was sent for "old"
    assert st_.listed_page(GNP, [kv(GNP, "a", 3)]) == []
    assert _summary(st_.listed_page(GNP, [kv(GNP, "b", 4)])) == [
        ("ResourceEvent", "b", "4", False)]
    assert _summary(st_.kind_listed(GNP)) == [("ResourceEvent", "old", "", True)]
