"""The snapshot cache core: breadcrumb order, dedupe, snapshots, release of old breadcrumbs."""

from __future__ import annotations

import gc
import weakref

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.cache.core import SnapshotCache, SnapshotUnavailable
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType


def upd(key: str, value: bytes | None, rev: str = "1",
        t: UpdateType = UpdateType.NEW) -> SerializedUpdate:
    return SerializedUpdate(key, value, rev, update_type=t)


def test_breadcrumbs_are_sequenced_and_linked() -> None:
    cache = SnapshotCache(max_batch_size=2)
    first = cache.latest
    crumbs = cache.apply([upd("/a", b"1"), upd("/b", b"2"), upd("/c", b"3")], now=5.0)
    assert [c.seq for c in crumbs] == [1, 2]
    assert [len(c.updates) for c in crumbs] == [2, 1]
    assert first.next is crumbs[0] and crumbs[0].next is crumbs[1]
    assert cache.latest is crumbs[1] and crumbs[1].timestamp == 5.0


def test_noop_update_is_dropped_but_real_change_kept() -> None:
    cache = SnapshotCache()
    cache.apply([upd("/a", b"1", "1")], now=0)
    assert cache.apply([upd("/a", b"1", "2", UpdateType.UPDATED)], now=1) == []
    assert cache.dropped_noops == 1
    [crumb] = cache.apply([upd("/a", b"2", "3", UpdateType.UPDATED)], now=2)
    assert crumb.updates[0].update_type is UpdateType.UPDATED
    assert cache.get("/a").value == b"2"


def test_deletion_passes_even_for_unknown_key() -> None:
    cache = SnapshotCache()
    [crumb] = cache.apply([upd("/gone", None, t=UpdateType.DELETED)], now=0)
    assert crumb.updates[0].deleted
    assert len(cache) == 0


def test_snapshot_is_sorted_all_new_and_excludes_deleted() -> None:
    cache = SnapshotCache()
    cache.apply([upd("/z", b"1"), upd("/a", b"1"), upd("/m", b"1")], now=0)
    cache.apply([upd("/a", b"2", t=UpdateType.UPDATED), upd("/m", None, t=UpdateType.DELETED)],
                now=1)
    crumb = cache.snapshot_point(now=1)
    snap = crumb.snapshot()
    assert [u.key for u in snap] == ["/a", "/z"]
    assert all(u.update_type is UpdateType.NEW for u in snap)
    assert snap[0].value == b"2"


def test_snapshot_of_old_breadcrumb_unavailable_unless_taken_in_time() -> None:
    cache = SnapshotCache()
    [old] = cache.apply([upd("/a", b"1")], now=0)
    taken = cache.snapshot_point(now=0)
    assert taken is old
    [newer] = cache.apply([upd("/b", b"1")], now=1)
    assert [u.key for u in old.snapshot()] == ["/a"]  # materialized before /b arrived
    cache.apply([upd("/c", b"1")], now=2)
    with pytest.raises(SnapshotUnavailable):
        newer.snapshot()


def test_snapshot_reuse_within_max_age() -> None:
    cache = SnapshotCache()
    cache.apply([upd("/a", b"1")], now=0)
    first = cache.snapshot_point(now=0, max_age=1.0)
    cache.apply([upd("/b", b"1")], now=0.5)
    assert cache.snapshot_point(now=0.5, max_age=1.0) is first
    later = cache.snapshot_point(now=2.0, max_age=1.0)
    assert later is cache.latest and later is not first


def test_status_change_is_its_own_breadcrumb() -> None:
    cache = SnapshotCache()
    crumb = cache.set_status(SyncStatus.IN_SYNC, now=3)
    assert crumb is not None and crumb.updates == () and crumb.status is SyncStatus.IN_SYNC
    assert cache.set_status(SyncStatus.IN_SYNC, now=4) is None


def test_memo_builds_once() -> None:
    cache = SnapshotCache()
    [crumb] = cache.apply([upd("/a", b"1")], now=0)
    calls = []
    for _ in range(3):
        assert crumb.memo("enc", lambda c: calls.append(c) or b"bytes") == b"bytes"
    assert len(calls) == 1


def test_old_breadcrumbs_released_when_no_client_holds_them() -> None:
    cache = SnapshotCache()
    crumbs = cache.apply([upd(f"/k{i}", b"v") for i in range(5)], now=0)
    held = crumbs[0]
    refs = [weakref.ref(c) for c in crumbs]
    del crumbs
    for i in range(3):
        cache.apply([upd(f"/x{i}", b"v")], now=1)
    gc.collect()
    assert refs[0]() is held  # a client still holds it, so it and its successors live
    del held
    gc.collect()
    assert all(r() is None for r in refs)


@given(st.lists(st.tuples(st.sampled_from(["/a", "/b", "/c", "/d"]),
                          st.one_of(st.none(), st.sampled_from([b"1", b"2", b"3"]))),
                max_size=60),
       st.integers(min_value=1, max_value=7))
def test_replaying_breadcrumbs_reproduces_the_cache(ops, batch) -> None:
    """A client that applies every breadcrumb from the start ends with the cache's KV set."""
    cache = SnapshotCache(max_batch_size=batch)
    start = cache.latest
    model: dict[str, bytes] = {}
    for key, value in ops:
        cache.apply([upd(key, value, t=UpdateType.DELETED if value is None else UpdateType.NEW)],
                    now=0)
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    replay: dict[str, bytes] = {}
    crumb = start
    while crumb.next is not None:
        crumb = crumb.next
        assert len(crumb.updates) <= batch
        for u in crumb.updates:
            if u.deleted:
                replay.pop(u.key, None)
            else:
                replay[u.key] = u.value
    assert replay == model
    assert {u.key: u.value for u in cache.snapshot_point(now=0).snapshot()} == model


def test_reusable_snapshot_is_released_once_too_old() -> None:
    """The reuse slot must not pin the chain forever when no client connects for a while."""
    cache = SnapshotCache()
    cache.apply([upd("/a", b"1")], now=0)
    ref = weakref.ref(cache.snapshot_point(now=0, max_age=1.0))
    cache.apply([upd("/b", b"1")], now=0.5)
    assert ref() is not None  # still young enough to be reused
    for i in range(3):
        cache.apply([upd(f"/c{i}", b"1")], now=2.0 + i)
    gc.collect()
    assert ref() is None
