"""IPAM blocks and affinities in the etcd layout and EtcdSyncState (no event loop).

etcd keeps them as the v1 model at v1 paths, not as v3 resources; the watcher names each
entry by the key Typha sends for it.
"""

from __future__ import annotations

import pytest

from trio_typha.datastore.base import KindSynced, ResourceEvent
from trio_typha.datastore.etcd_layout import (
    KeyParser,
    decode_resource,
    decode_value,
    kind_prefix,
    object_key,
    resource_key,
    watch_span,
)
from trio_typha.datastore.etcd_rpc import Header, KeyValue, WatchEvent, WatchResponse
from trio_typha.datastore.etcd_state import EtcdSyncState
from trio_typha.model import kinds as K
from trio_typha.model.syncers import DatastoreMode, syncer_definition

BLOCK = K.calico_kind("IPAMBlock")
AFFINITY = K.calico_kind("BlockAffinity")
POOL = K.calico_kind("IPPool")
NODE = K.calico_kind("Node")
CLUSTER = "c1"

B1 = "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26"
B2 = "/calico/ipam/v2/assignment/ipv6/block/fd00:1::-122"
A1 = "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"
HANDLE = "/calico/ipam/v2/handle/k8s-pod-network.abc"


def block_value(seq: int) -> bytes:
    return (b'{"cidr":"10.244.1.0/26","affinity":"host:node-1","allocations":[0],'
            b'"unallocated":[1],"attributes":[{"handle_id":"h"}],"sequenceNumber":%d,'
            b'"sequenceNumberForAllocation":{"0":1},"deleted":false}' % seq)


def kv(key: str, value: bytes, rev: int) -> KeyValue:
    return KeyValue(key.encode(), value, rev)


def wmsg(*events: WatchEvent, rev: int = 0) -> WatchResponse:
    return WatchResponse(Header(CLUSTER, rev), events=events)


def test_prefixes_are_where_the_syncers_list() -> None:
    assert kind_prefix(BLOCK) == "/calico/ipam/v2/assignment/"
    assert kind_prefix(AFFINITY) == "/calico/ipam/v2/host/"
    with pytest.raises(ValueError, match="not stored in etcd"):
        kind_prefix(K.calico_kind("IPAMBlock", K.CALICO_CRD_GROUP))
    with pytest.raises(ValueError, match="v1 keys"):
        resource_key(BLOCK, "", "10-244-1-0-26")
    with pytest.raises(ValueError, match="v1 keys"):
        object_key({"apiVersion": "projectcalico.org/v3", "kind": "BlockAffinity",
                    "metadata": {"name": "a"}})
    with pytest.raises(ValueError, match="decode_value"):
        decode_resource(BLOCK, block_value(1))


def test_one_watch_span_covers_ipam_and_v3_kinds() -> None:
    for syncer in ("felix", "bgp"):
        kinds = syncer_definition(syncer, DatastoreMode.ETCD).kinds
        start, end = watch_span(kinds)
        for key in (B1, A1) if syncer == "felix" else (A1,):
            assert start <= key.encode() < end
        assert start <= b"/calico/resources/v3/projectcalico.org/nodes/n" < end
    assert watch_span([AFFINITY, POOL]) == (
        b"/calico/ipam/v2/host/", b"/calico/resources/v3/projectcalico.org/ippools0")


def test_keys_parse_to_the_key_typha_sends() -> None:
    parser = KeyParser([BLOCK, AFFINITY, POOL])
    assert parser.parse(B1.encode()) == (BLOCK, "", B1)
    assert parser.parse(b"/calico/ipam/v2/assignment/ipv6/block/10.244.1.9-26") == (
        BLOCK, "", B1)
    assert parser.parse(A1.encode()) == (AFFINITY, "", A1)
    assert parser.parse(b"/calico/resources/v3/projectcalico.org/ippools/p") == (POOL, "", "p")
    for other in (HANDLE.encode(), b"/calico/ipam/v2/assignment/ipv4/block/nope",
                  b"/calico/ipam/v2/virtual/vm/ipv4/block/10.0.0.0-26",
                  b"/calico/ipam/v2/host/n\xff/ipv4/block/10.0.0.0-26",
                  b"/calico/ipam/v2/config"):
        assert parser.parse(other) is None, other
    # Kinds not asked for are not parsed.
    assert KeyParser([POOL]).parse(B1.encode()) is None


def test_decode_value_wraps_the_v1_json() -> None:
    obj = decode_value(AFFINITY, A1, b'{"state":"confirmed","deleted":false}')
    assert obj == {"apiVersion": "projectcalico.org/v3", "kind": "BlockAffinity",
                   "metadata": {"name": A1},
                   "v1Value": {"state": "confirmed", "deleted": False}}
    assert decode_value(AFFINITY, A1, b"")["v1Value"] == {}
    with pytest.raises(ValueError):
        decode_value(BLOCK, B1, b"")
    with pytest.raises(ValueError):
        decode_value(BLOCK, B1, b"{not json")


def test_list_watch_and_relist_of_blocks() -> None:
    state = EtcdSyncState([BLOCK, POOL])
    hdr = Header(CLUSTER, 10)
    evs = state.listed(BLOCK, [kv(B1, block_value(1), 3), kv(B2, b'{"cidr":"fd00:1::/122"}', 4),
                               kv("/calico/ipam/v2/assignment/junk", b"{}", 5)], hdr)
    assert [(type(e).__name__, getattr(e, "name", None), getattr(e, "revision", None))
            for e in evs] == [("ResourceEvent", B1, "3"), ("ResourceEvent", B2, "4"),
                              ("KindSynced", None, None)]
    state.listed(POOL, [], hdr)
    state.list_complete(hdr)

    # Watch: an update, a handle (inside the span, not ours) and a delete.
    out = state.watched(wmsg(WatchEvent(False, kv(B1, block_value(2), 11)),
                             WatchEvent(False, kv(HANDLE, b'{"block":{}}', 12)),
                             WatchEvent(True, kv(B2, b"", 13))))
    assert [(e.name, e.deleted, e.revision) for e in out] == [
        (B1, False, "11"), (B2, True, "4")]
    assert out[0].obj is not None and out[0].obj["v1Value"]["sequenceNumber"] == 2
    assert state.revision == 13

    # A relist after compaction sends only what changed meanwhile.
    state.compacted(20)
    evs = state.listed(BLOCK, [kv(B1, block_value(2), 11), kv(B2, b"{}", 21)],
                       Header(CLUSTER, 22))
    assert evs == [ResourceEvent(BLOCK, "", B2, decode_value(BLOCK, B2, b"{}"), "21")]
    assert not any(isinstance(e, KindSynced) for e in evs)


def test_a_watched_value_that_is_not_json_deletes_the_entry() -> None:
    state = EtcdSyncState([AFFINITY])
    hdr = Header(CLUSTER, 5)
    state.listed(AFFINITY, [kv(A1, b'{"state":"confirmed"}', 4)], hdr)
    state.list_complete(hdr)
    [ev] = state.watched(wmsg(WatchEvent(False, kv(A1, b"{", 6))))
    assert (ev.name, ev.deleted, ev.revision) == (A1, True, "6")
