"""The primary -> worker feed's records (workers/wire.py): framing, round trips, and
a worker cache that publishes the primary's breadcrumbs with the primary's bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.cache.core import SnapshotCache
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob import encode_once as gob
from trio_typha.protocols.grpc import encode_once as grpc
from trio_typha.records import HEADER
from trio_typha.upstream import wire

text = st.text(max_size=40)
updates = st.builds(
    SerializedUpdate, key=st.text(min_size=1, max_size=60),
    value=st.one_of(st.none(), st.binary(max_size=200)), revision=text,
    v3_resource_version=text, ttl_ns=st.integers(-(1 << 63), (1 << 63) - 1),
    update_type=st.sampled_from(UpdateType))
update_lists = st.lists(updates, max_size=30).map(tuple)
statuses = st.sampled_from(SyncStatus)


def decode_all(data: bytes, *, chunk: int | None = None) -> list[wire.Record]:
    decoder = wire.Decoder()
    out: list[wire.Record] = []
    step = chunk or max(len(data), 1)
    for i in range(0, len(data), step):
        decoder.feed(data[i:i + step])
        out.extend(decoder)
    return out


def upd(key: str, value: bytes | None, kind: UpdateType = UpdateType.NEW) -> SerializedUpdate:
    return SerializedUpdate(key, value, revision="7", update_type=kind)


@given(st.text(max_size=30))
def test_hello_round_trips(syncer_type: str) -> None:
    assert decode_all(wire.encode_hello(syncer_type)) == [wire.Hello(syncer_type)]


@given(statuses, st.floats(allow_nan=False), update_lists, st.integers(1, 50))
def test_snapshot_round_trips_in_any_pieces(status: SyncStatus, age: float,
                                            kvs: tuple[SerializedUpdate, ...],
                                            chunk: int) -> None:
    data = wire.encode_snapshot(status, age, kvs)
    assert decode_all(data, chunk=chunk) == [wire.Snapshot(status, age, kvs)]


@given(st.lists(st.tuples(update_lists, statuses), min_size=1, max_size=5),
       st.sampled_from(["all", "typha", "grpc"]), st.integers(1, 97))
def test_crumbs_round_trip_with_the_primarys_encodings(
        steps: list[tuple[tuple[SerializedUpdate, ...], SyncStatus]], protocols: str,
        chunk: int) -> None:
    primary = SnapshotCache()
    encodings = wire.encodings_for(protocols)
    crumbs = [primary.append(u, s, float(i)) for i, (u, s) in enumerate(steps)]
    data = b"".join(wire.encode_crumb(c, 0.25, encodings) for c in crumbs)
    records = decode_all(data, chunk=chunk)
    assert [(r.seq, r.status, r.updates) for r in records if isinstance(r, wire.Crumb)] == [
        (c.seq, c.status, c.updates) for c in crumbs]
    for record, crumb in zip(records, crumbs, strict=True):
        assert isinstance(record, wire.Crumb) and record.age == 0.25
        assert record.memo == {e.memo_key: e.build(crumb) for e in encodings}


def test_encodings_follow_server_protocols() -> None:
    assert {e.protocol for e in wire.encodings_for("all")} == {"typha", "grpc"}
    assert {e.memo_key for e in wire.encodings_for("typha")} == {
        gob.DELTAS_KEY, gob.DELTAS_CHUNKS_KEY}
    assert {e.memo_key for e in wire.encodings_for("grpc")} == {grpc.UPDATE_KEY}


def test_building_a_record_encodes_the_breadcrumb_once_for_everyone() -> None:
    cache = SnapshotCache()
    (crumb,) = cache.apply([upd("/a", b"1"), upd("/b", b"2")], 1.0)
    encodings = wire.encodings_for("all")
    body = wire.crumb_body(crumb, encodings)
    # The primary's own clients get the very objects the record was built from ...
    assert gob.deltas(crumb) is crumb.memo(gob.DELTAS_KEY, lambda c: b"rebuilt")
    assert grpc.update_message(crumb) in body
    # ... and a second worker gets the same record body, not a second build.
    assert wire.crumb_body(crumb, encodings) is body


def test_worker_cache_publishes_the_same_breadcrumbs_and_sends_the_primarys_bytes() -> None:
    """Mirrored through the wire, the worker's cache has the primary's breadcrumbs (same
    boundaries, no-ops kept), KV map and snapshot, and its sessions' encodings are the
    primary's bytes: the builders are never called on the worker."""
    primary = SnapshotCache(max_batch_size=2)
    primary.apply([upd("/a", b"1"), upd("/b", b"2"), upd("/c", b"3")], 1.0)
    point = primary.snapshot_point(1.0)
    crumbs = primary.apply([upd("/a", b"1x", UpdateType.UPDATED), upd("/c", None,
                            UpdateType.DELETED), upd("/d", b"4")], 2.0)
    status_crumb = primary.set_status(SyncStatus.IN_SYNC, 2.5)
    assert status_crumb is not None
    crumbs.append(status_crumb)
    encodings = wire.encodings_for("all")
    data = wire.encode_snapshot(point.status, 0.0, point.snapshot()) + b"".join(
        wire.encode_crumb(c, 0.0, encodings) for c in crumbs)

    worker = SnapshotCache(max_batch_size=2)
    mirrored = []
    for record in decode_all(data, chunk=7):
        mirrored.append(worker.append(record.updates, record.status, 10.0,
                                      memo=getattr(record, "memo", None)))
    assert worker.values_by_key() == primary.values_by_key()
    assert worker.status is SyncStatus.IN_SYNC
    assert worker.snapshot_point(11.0).snapshot() == primary.snapshot_point(3.0).snapshot()
    assert [c.updates for c in mirrored[1:]] == [c.updates for c in crumbs]
    assert [c.status for c in mirrored[1:]] == [c.status for c in crumbs]

    def never(_: object) -> bytes:
        raise AssertionError("the worker encoded a delta itself")
    for mine, theirs in zip(mirrored[1:], crumbs, strict=True):
        for e in encodings:
            assert mine.memo(e.memo_key, never) == e.build(theirs)


def test_append_keeps_noops_and_boundaries() -> None:
    cache = SnapshotCache(max_batch_size=1)
    cache.apply([upd("/a", b"1")], 0.0)
    same = (upd("/a", b"1"), upd("/a", b"1"), upd("/b", b"2"))
    crumb = cache.append(same, SyncStatus.IN_SYNC, 1.0)
    assert crumb.updates == same and crumb.status is SyncStatus.IN_SYNC
    assert cache.latest is crumb and cache.dropped_noops == 0


@pytest.mark.parametrize("data, problem", [
    (HEADER.pack(9, 0), "unknown record type"),
    (HEADER.pack(wire.HELLO, 1) + b"\x07", "unsupported feed version"),
    (HEADER.pack(wire.SNAPSHOT, 3) + b"abc", "malformed"),
    (HEADER.pack(wire.SNAPSHOT, wire._SNAPSHOT.size)
     + wire._SNAPSHOT.pack(2, 0.0, 5), "truncated"),
    (HEADER.pack(wire.SNAPSHOT, wire._SNAPSHOT.size)
     + wire._SNAPSHOT.pack(9, 0.0, 0), "unknown sync status"),
    (HEADER.pack(wire.SNAPSHOT, wire._SNAPSHOT.size + 1)
     + wire._SNAPSHOT.pack(2, 0.0, 0) + b"x", "after the end"),
])
def test_malformed_records_are_named_errors(data: bytes, problem: str) -> None:
    with pytest.raises(wire.WireError, match=problem):
        decode_all(data)


def test_an_oversized_record_is_refused_before_it_is_buffered() -> None:
    decoder = wire.Decoder(max_record=100)
    decoder.feed(HEADER.pack(wire.SNAPSHOT, 101))
    with pytest.raises(wire.WireError, match="over the 100 limit"):
        list(decoder)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_a_ping_carries_the_upstreams_lag(lag):
    (ping,) = decode_all(wire.encode_ping(lag))
    assert ping == wire.Ping(lag)


def test_a_ping_of_the_wrong_size_is_refused():
    from trio_typha.records import frame
    with pytest.raises(wire.WireError):
        decode_all(frame(wire.PING, b"\0" * 9, 100, wire.WireError))
    with pytest.raises(wire.WireError):
        decode_all(frame(wire.PING, b"\0" * 3, 100, wire.WireError))
