"""Warm start's pure core: the transfer's records, and each piece of pipeline state exported
by one replica and restored in another (no event loop)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_etcd_state import CLUSTER, GNP, NP, kv, msg, put
from trio_typha.datastore.base import ResourceEvent
from trio_typha.datastore.etcd_rpc import Header
from trio_typha.datastore.etcd_state import EtcdSyncState
from trio_typha.datastore.k8s_reflector import KindReflector
from trio_typha.datastore.k8s_stream import WatchEvent
from trio_typha.datastore.known import StateError
from trio_typha.model.kinds import NAMESPACE, POD
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.model.syncers import ConvertedKV, SyncerDefinition
from trio_typha.server.sniff import Wire, classify
from trio_typha.syncer.handover import SyncerState
from trio_typha.syncer.tracker import SourceTracker
from trio_typha.warm import wire


def convert(kind, obj, *, key=None):
    return [ConvertedKV(f"/k/{k}", v.encode()) for k, v in obj["keys"].items()]


DEF = SyncerDefinition("felix", (POD, NAMESPACE), convert, ())


def pod(name: str, keys: dict[str, str] | None, rev: str) -> ResourceEvent:
    return ResourceEvent(POD, "ns", name, None if keys is None else {"keys": keys}, rev)


def state(syncer: str = "felix", n: int = 3) -> SyncerState:
    updates = tuple(SerializedUpdate(f"/k/{i}", f"v{i}".encode(), str(i), "",
                                     update_type=UpdateType.NEW) for i in range(n))
    return SyncerState(syncer, SyncStatus.IN_SYNC, updates,
                       [[str(POD), "ns", f"p{i}", f"/k/{i}"] for i in range(n)],
                       {"kinds": {str(POD): {"resume_rv": "7", "list_rv": "0",
                                             "synced": True, "known": []}}})


# --- the records ---------------------------------------------------------------------------

def test_the_magic_is_sniffed_apart_from_gob_and_h2() -> None:
    assert classify(wire.MAGIC) is Wire.WARM
    assert classify(wire.MAGIC[:3]) is None  # undecided until the whole prefix is in
    assert classify(b"\x1e\xff\x81\x03") is Wire.GOB
    assert classify(b"PRI * HTTP/2.0") is Wire.H2


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=st.integers(0, 9))
def test_states_round_trip_in_any_split(sizes: list[int], seed: int) -> None:
    states = [state(t, n) for t, n in zip(("felix", "bgp", "tunnel-ip-allocation",
                                           "node-status"), sizes, strict=False)]
    data = b"".join(b"".join(wire.encode_state(s)) for s in states) + wire.encode_done()
    assembly = wire.Assembly([s.syncer_type for s in states])
    rng = random.Random(seed)
    pos = 0
    while pos < len(data):
        step = rng.randint(1, 200)
        assembly.feed(data[pos:pos + step])
        pos += step
        assert assembly.done == (pos >= len(data))
    assert assembly.states == {s.syncer_type: s for s in states}


def test_large_caches_go_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "CHUNK", 2)
    records = list(wire.encode_state(state(n=5)))
    assert len(records) == 1 + 3 + 3 + 2  # begin, 3 cache, 3 tracker, watch, end
    assembly = wire.Assembly(["felix"])
    assembly.feed(b"".join(records) + wire.encode_done())
    assert assembly.states == {"felix": state(n=5)}


def test_a_transfer_cut_short_anywhere_yields_nothing() -> None:
    data = b"".join(wire.encode_state(state())) + wire.encode_done()
    for cut in range(len(data)):
        assembly = wire.Assembly(["felix"])
        assembly.feed(data[:cut])
        assert not assembly.done and assembly.states is None


def test_refusals_and_inconsistencies_are_errors_naming_why() -> None:
    with pytest.raises(wire.WarmError, match="refused: not in sync here"):
        wire.Assembly(["felix"]).feed(wire.encode_refused("not in sync here"))
    with pytest.raises(wire.WarmError, match="ended without bgp"):
        wire.Assembly(["felix", "bgp"]).feed(b"".join(wire.encode_state(state()))
                                             + wire.encode_done())
    records = list(wire.encode_state(state(n=3)))
    del records[2]  # the tracker record BEGIN announced
    with pytest.raises(wire.WarmError, match="felix: 3 of 3 KVs, 0 of 3 sources"):
        wire.Assembly(["felix"]).feed(b"".join(records))
    with pytest.raises(wire.WarmError, match="outside a syncer"):
        wire.Assembly(["felix"]).feed(records[-1])
    with pytest.raises(wire.WarmError, match="bad begin"):
        wire.Assembly(["bgp"]).feed(records[0])


def test_requests_and_fingerprint_mismatches() -> None:
    fp = wire.fingerprint(datastore="kubernetes", calico_group="crd.projectcalico.org")
    raw = wire.encode_request(["felix"], fp)
    assert raw.startswith(wire.MAGIC)
    [(kind, payload)] = list(_records(raw[len(wire.MAGIC):]))
    assert kind == wire.REQUEST
    request = wire.decode_request(payload)
    assert request == wire.Request(("felix",), fp)
    assert wire.mismatch(fp, request.fingerprint) == ""
    other = {**fp, "calico_group": "projectcalico.org"}
    assert wire.mismatch(fp, other) == (
        "calico_group is 'projectcalico.org' there, 'crd.projectcalico.org' here")
    with pytest.raises(wire.WarmError, match="version 9"):
        wire.decode_request(json.dumps({"version": 9}).encode())
    with pytest.raises(wire.WarmError, match="malformed"):
        wire.decode_request(b"{nope")


def _records(data: bytes):
    from trio_typha.records import RecordReader
    reader = RecordReader(wire.MAX_RECORD, wire.WarmError)
    reader.feed(data)
    return list(reader)


# --- the state of each stage, exported and restored ----------------------------------------

def test_a_restored_tracker_turns_later_events_into_the_same_updates() -> None:
    original = SourceTracker(DEF)
    original.apply(pod("a", {"1": "x", "2": "y"}, "1"))
    original.apply(pod("b", {"3": "z"}, "2"))
    restored = SourceTracker(DEF)
    restored.restore(json.loads(json.dumps(original.export())))  # through the wire's JSON
    for event in (pod("a", {"1": "x2"}, "3"), pod("b", None, "4"), pod("c", {"4": "w"}, "5")):
        assert restored.apply(event) == original.apply(event)
    assert restored.export() == original.export()


@pytest.mark.parametrize("rows", [
    {}, [["nope", "ns", "a", "/k"]], [[str(POD), "ns", "a"]], [[str(POD), "ns", "a", []]],
    [[str(POD), 1, "a", "/k"]]])
def test_a_tracker_refuses_state_it_cannot_use_and_keeps_its_own(rows: object) -> None:
    t = SourceTracker(DEF)
    t.apply(pod("a", {"1": "x"}, "1"))
    with pytest.raises(StateError):
        t.restore(rows)
    assert len(t) == 1


def test_a_restored_reflector_resumes_where_the_sibling_was() -> None:
    sibling = KindReflector(POD)
    sibling.listed([{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}},
                    {"metadata": {"name": "b", "namespace": "ns", "resourceVersion": "6"}}],
                   "6")
    sibling.watched(WatchEvent("MODIFIED", {"metadata": {
        "name": "a", "namespace": "ns", "resourceVersion": "9"}}))
    starting = KindReflector(POD)
    starting.restore(json.loads(json.dumps(sibling.export())))
    assert (starting.resume_rv, starting.synced) == ("9", True)
    # What the sibling sent counts as sent here: a relist after a 410 sends differences.
    starting.expire()
    events = starting.listed([{"metadata": {"name": "a", "namespace": "ns",
                                            "resourceVersion": "9"}}], "12")
    assert [(e.name, e.deleted) for e in events if isinstance(e, ResourceEvent)] == [
        ("b", True)]
    with pytest.raises(StateError):
        KindReflector(POD).restore({"resume_rv": 5, "list_rv": "0", "synced": True,
                                    "known": []})
    with pytest.raises(StateError):
        KindReflector(POD).restore({"resume_rv": "5", "list_rv": "0", "synced": True,
                                    "known": [["ns", "a"]]})


def test_a_restored_etcd_state_watches_from_the_siblings_revision() -> None:
    sibling = EtcdSyncState([GNP, NP])
    sibling.listed(GNP, [kv(GNP, "g1", 3)], Header(CLUSTER, 4))
    sibling.listed(NP, [kv(NP, "n1", 4, ns="x")], Header(CLUSTER, 4))
    sibling.list_complete(Header(CLUSTER, 4))
    sibling.watched(msg(put(kv(GNP, "g2", 7))))
    starting = EtcdSyncState([GNP, NP])
    starting.restore(json.loads(json.dumps(sibling.export())))
    assert starting.revision == 7 and len(starting) == 3
    assert not starting.needs_relist(Header(CLUSTER, 9))
    assert starting.needs_relist(Header("another-cluster", 9))
    # A later change to a key the sibling sent is an update, not something new.
    [event] = starting.watched(msg(put(kv(GNP, "g2", 8))))
    assert event.revision == "8"
    assert starting.watched(msg(put(kv(GNP, "g1", 3)))) == []  # already sent at 3
    with pytest.raises(StateError, match="kinds"):
        EtcdSyncState([GNP]).restore(sibling.export())
    with pytest.raises(StateError):
        EtcdSyncState([GNP, NP]).restore({**sibling.export(), "revision": "7"})
