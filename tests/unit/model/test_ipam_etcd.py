"""etcd-mode IPAM: blocks and affinities stored as the v1 model at v1 key paths.

``golden/etcd_ipam.json`` holds etcd entries (path + stored value) with what Calico v3.32.1
sends for each: the key ``BlockListOptions{}`` / ``BlockAffinityListOptions{}``
``.KeyFromDefaultPath`` parses from the path, and the value ``model.ParseValue`` decodes and
``syncproto.SerializeUpdate`` marshals again (``null`` for both when Calico skips the
entry).  tools/gen_goldens.py produces them by running that Go code (v3.32.1, json-iterator
v1.1.12) on each entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model import ipam, keys
from trio_typha.model import kinds as K
from trio_typha.model.golang import IPNet
from trio_typha.model.syncers import ConvertedKV, DatastoreMode, syncer_definition

GOLDEN = json.loads((Path(__file__).parent / "golden" / "etcd_ipam.json").read_text("utf-8"))
BLOCK = K.calico_kind("IPAMBlock")
AFFINITY = K.calico_kind("BlockAffinity")

# A block as Calico's IPAM writes it to etcd (json-iterator output of AllocationBlock).
STORED_BLOCK = (
    b'{"cidr":"10.244.1.0/26","affinity":"host:node-1",'
    b'"affinity_claim_time":"2024-05-01T10:00:00Z","allocations":[0,null,1,null],'
    b'"unallocated":[1,3],"attributes":[{"handle_id":"ipip-tunnel-addr-node-1",'
    b'"secondary":{"node":"node-1","type":"ipipTunnelAddress"}},'
    b'{"handle_id":"k8s-pod-network.abc","secondary":{"namespace":"prod","node":"node-1",'
    b'"pod":"web-1","timestamp":"2024-05-01 10:00:01.5 +0000 UTC"}}],"sequenceNumber":7,'
    b'"sequenceNumberForAllocation":{"0":5,"2":6},"deleted":false}')


def sent(kind: str, path: str, stored: bytes) -> tuple[str, bytes] | None:
    """What Typha sends for one etcd entry, or None where it skips the entry."""
    key = ipam.etcd_key_from_path(kind, path)
    if key is None:
        return None
    try:
        obj = ipam.etcd_v1_object(kind, key, stored)
        [(k, v)] = ipam.etcd_v1_kvs(kind, obj)
    except ValueError:
        return None
    return k, v


@pytest.mark.parametrize("case", GOLDEN, ids=[f"{i}-{c['kind']}" for i, c in enumerate(GOLDEN)])
def test_matches_calico(case: dict) -> None:
    got = sent(case["kind"], case["path"], case["stored"].encode())
    expected = None if case["key"] is None else (case["key"], case["value"].encode())
    assert got == expected


def test_a_calico_written_block_goes_out_byte_for_byte() -> None:
    # Calico wrote it with the encoder Typha uses, so the value survives unchanged.
    assert sent("IPAMBlock", "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26",
                STORED_BLOCK) == ("/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26",
                                  STORED_BLOCK)


def test_affinities_go_out_as_state_and_deleted() -> None:
    path = "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"
    assert sent("BlockAffinity", path, b'{"state":"confirmed","deleted":false}') == (
        path, b'{"state":"confirmed","deleted":false}')
    # Affinities used to be stored without a value: that is an empty one.
    assert sent("BlockAffinity", path, b"") == (path, b'{"state":"","deleted":false}')
    # An empty block value is not JSON, so that entry is skipped.
    assert sent("IPAMBlock", "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26", b"") is None


def test_invalid_utf8_becomes_one_replacement_character_per_byte() -> None:
    # Checked against Calico: "\xff", the truncated "\xe2\x82" and the surrogate
    # "\xed\xa0\x80" give one U+FFFD per byte.
    path = "/calico/ipam/v2/host/n/ipv4/block/10.0.0.0-26"
    assert sent("BlockAffinity", path, b'{"state":"a\xffb\xe2\x82c\xed\xa0\x80d"}') == (
        path, b'{"state":"a\\ufffdb\\ufffd\\ufffdc\\ufffd\\ufffd\\ufffdd","deleted":false}')


@pytest.mark.parametrize("stored", [b"{", b"NaN", b'{"state":Infinity}', b"\xef\xbb\xbf{}"])
def test_values_that_are_not_json_are_refused_by_the_datastore_side(stored: bytes) -> None:
    with pytest.raises(ValueError):
        ipam.etcd_v1_object("BlockAffinity", "/calico/ipam/v2/host/n/ipv4/block/1.0.0.0-8",
                            stored)


cidrs = st.one_of(
    st.builds(lambda ip, n: IPNet(ip.to_bytes(4, "big"), n),
              st.integers(0, 2**32 - 1), st.integers(0, 32)),
    st.builds(lambda ip, n: IPNet(ip.to_bytes(16, "big"), n),
              st.integers(2**96, 2**128 - 1), st.integers(0, 128)))
hosts = st.text(st.characters(blacklist_characters="/\n", blacklist_categories=("Cs",)),
                min_size=1, max_size=20)


@given(cidrs)
def test_block_paths_parse_to_the_masked_key(cidr: IPNet) -> None:
    canonical = keys.block_key(cidr.network())
    assert ipam.block_key_from_path(keys.block_key(cidr)) == canonical
    assert ipam.block_key_from_path(canonical) == canonical


@given(cidrs, hosts)
def test_affinity_paths_parse_to_the_masked_key(cidr: IPNet, host: str) -> None:
    canonical = keys.block_affinity_key(cidr.network(), host)
    assert ipam.block_affinity_key_from_path(keys.block_affinity_key(cidr, host)) == canonical
    assert ipam.block_affinity_key_from_path(canonical) == canonical


@pytest.mark.parametrize("path", [
    "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26\n",
    "/calico/ipam/v2/handle/k8s-pod-network.abc",
    "/calico/ipam/v2/assignment/ipv4/block/",
    "/calico/ipam/v2/host/node-1/ipv4/block/10.0.0.0-26",
])
def test_other_paths_are_not_blocks(path: str) -> None:
    assert ipam.block_key_from_path(path) is None


def test_felix_and_bgp_convert_what_the_etcd_datastore_reports() -> None:
    block_key = "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26"
    affinity_key = "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"
    block = ipam.etcd_v1_object("IPAMBlock", block_key, STORED_BLOCK)
    affinity = ipam.etcd_v1_object("BlockAffinity", affinity_key, b'{"state":"pending"}')
    assert block["metadata"] == {"name": block_key}

    felix = syncer_definition("felix", DatastoreMode.ETCD)
    bgp = syncer_definition("bgp", DatastoreMode.ETCD)
    assert BLOCK in felix.kinds and AFFINITY in bgp.kinds
    assert felix.convert(BLOCK, block) == [ConvertedKV(block_key, STORED_BLOCK, "")]
    assert bgp.convert(AFFINITY, affinity) == [
        ConvertedKV(affinity_key, b'{"state":"pending","deleted":false}', "")]
    assert bgp.convert(BLOCK, block) == []
    # A value Go refuses yields nothing (so a previous value is deleted).
    bad = ipam.etcd_v1_object("BlockAffinity", affinity_key, b'{"deleted":"no"}')
    assert bgp.convert(AFFINITY, bad) == []


def test_v3_objects_still_convert_as_before() -> None:
    v3 = {"apiVersion": "projectcalico.org/v3", "kind": "BlockAffinity",
          "metadata": {"name": "node-1-10-244-1-0-26"},
          "spec": {"state": "confirmed", "node": "node-1", "cidr": "10.244.1.0/26"}}
    for mode in DatastoreMode:
        assert syncer_definition("bgp", mode).convert(AFFINITY, v3) == [ConvertedKV(
            "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26",
            b'{"state":"confirmed","deleted":false}', "")]
