"""Calico's etcd key layout and stored-value decoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.datastore.etcd_layout import (
    KeyParser,
    decode_resource,
    kind_prefix,
    object_key,
    resource_key,
    watch_span,
)
from trio_typha.model import kinds as K

GNP = K.calico_kind("GlobalNetworkPolicy")
NP = K.calico_kind("NetworkPolicy")
NODE = K.calico_kind("Node")
IPPOOL = K.calico_kind("IPPool")
# Every kind stored as v3 objects (IPAM kinds are stored at v1 paths: test_etcd_ipam_layout.py).
ALL_V3 = [K.calico_kind(k) for k, _, _ in K.CALICO_KINDS
          if k not in ("IPAMBlock", "BlockAffinity")]

names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-."), min_size=1,
                max_size=20)


def test_keys_follow_the_resource_key_layout() -> None:
    assert resource_key(NODE, "", "node-1") == \
        "/calico/resources/v3/projectcalico.org/nodes/node-1"
    assert resource_key(NP, "prod", "np1") == \
        "/calico/resources/v3/projectcalico.org/networkpolicies/prod/np1"
    assert object_key({"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
                       "metadata": {"name": "pool1"}}) == \
        "/calico/resources/v3/projectcalico.org/ippools/pool1"


def test_bad_keys_are_refused() -> None:
    with pytest.raises(ValueError):
        resource_key(NP, "", "np1")
    with pytest.raises(ValueError):
        resource_key(GNP, "prod", "gnp1")
    with pytest.raises(ValueError):
        resource_key(GNP, "", "a/b")
    with pytest.raises(ValueError, match="not stored in etcd"):
        kind_prefix(K.POD)
    with pytest.raises(ValueError, match="not stored in etcd"):
        kind_prefix(K.calico_kind("IPPool", K.CALICO_CRD_GROUP))
    with pytest.raises(ValueError):
        object_key({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})


@given(st.sampled_from(ALL_V3), names, names)
def test_parse_inverts_resource_key(kind: K.ResourceKind, ns: str, name: str) -> None:
    ns = ns if kind.namespaced else ""
    parser = KeyParser(ALL_V3)
    assert parser.parse(resource_key(kind, ns, name).encode()) == (kind, ns, name)


@pytest.mark.parametrize("key", [
    b"/calico/resources/v3/projectcalico.org/ippools/",
    b"/calico/resources/v3/projectcalico.org/ippools/a/b",
    b"/calico/resources/v3/projectcalico.org/networkpolicies/only-one",
    b"/calico/resources/v3/projectcalico.org/networkpolicies/ns/",
    b"/calico/resources/v3/projectcalico.org/networkpolicies//np",
    b"/calico/resources/v3/projectcalico.org/globalnetworksets/gns",  # not watched
    b"/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26",
    b"/calico/resources/v3/projectcalico.org/ippools/\xff",
])
def test_parse_rejects_other_and_malformed_keys(key: bytes) -> None:
    assert KeyParser([IPPOOL, NP]).parse(key) is None


def test_watch_span_covers_the_kinds_and_nothing_past_them() -> None:
    start, end = watch_span([NODE, GNP, NP])
    for kind in (NODE, GNP, NP):
        key = resource_key(kind, "ns" if kind.namespaced else "", "x").encode()
        assert start <= key < end
    assert start == kind_prefix(GNP).encode()
    assert resource_key(K.calico_kind("Profile"), "", "p").encode() >= end
    # A single kind's span is exactly its prefix.
    start, end = watch_span([IPPOOL])
    assert (start, end) == (b"/calico/resources/v3/projectcalico.org/ippools/",
                            b"/calico/resources/v3/projectcalico.org/ippools0")


def test_decode_fills_missing_type_fields_only() -> None:
    assert decode_resource(IPPOOL, b'{"metadata":{"name":"p"},"spec":{}}') == {
        "apiVersion": "projectcalico.org/v3", "kind": "IPPool",
        "metadata": {"name": "p"}, "spec": {}}
    kept = decode_resource(IPPOOL, b'{"apiVersion":"x/v9","kind":"Other"}')
    assert kept == {"apiVersion": "x/v9", "kind": "Other"}


@pytest.mark.parametrize("value", [b"", b"{", b"[1]", b'"s"', b"\xff\xfe"])
def test_decode_refuses_non_objects(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_resource(IPPOOL, value)
