"""crd.projectcalico.org/v1 → projectcalico.org/v3 conversion (the metadata annotation of
``libcalico-go/lib/backend/k8s/resources/resources.go``, ``ConvertUID`` of
``libcalico-go/lib/backend/k8s/conversion/conversion.go``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.model.crd import CRDConversionError, convert_uid, crd_to_v3


def test_convert_uid_examples() -> None:
    assert convert_uid("30316465-6365-4463-ad63-3564622d3638") == \
        "0c8c26a6-c6a6-44c6-adc6-ac2646b46c1c"
    assert convert_uid("11111111-2222-4333-8444-555555555555") == \
        "88888888-4444-43cc-8422-aaaaaaaaaaaa"
    # google/uuid accepts the braced, urn and bare-hex forms too.
    assert convert_uid("{11111111-2222-4333-8444-555555555555}") == \
        convert_uid("urn:uuid:11111111-2222-4333-8444-555555555555") == \
        convert_uid("11111111222243338444555555555555")
    for bad in ("", "not-a-uuid", "1111-2222", "{11111111-2222-4333-8444-555555555555"):
        with pytest.raises(CRDConversionError):
            convert_uid(bad)


@given(st.uuids())
def test_convert_uid_is_an_involution(u: object) -> None:
    assert convert_uid(convert_uid(str(u))) == str(u)


def test_plain_cr_keeps_its_metadata() -> None:
    cr = {"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
          "metadata": {"name": "p", "uid": "11111111-2222-4333-8444-555555555555",
                       "generation": 4, "resourceVersion": "9"},
          "spec": {"peerIP": "10.0.0.1"}}
    name, v3 = crd_to_v3("BGPPeer", cr)
    assert name == "p"
    assert v3["apiVersion"] == "projectcalico.org/v3" and v3["kind"] == "BGPPeer"
    assert v3["metadata"] == {"name": "p", "uid": "88888888-4444-43cc-8422-aaaaaaaaaaaa",
                              "generation": 4, "resourceVersion": "9"}


def test_metadata_annotation_replaces_metadata() -> None:
    stored = {"name": "foo", "namespace": "ignored", "uid": "ignored", "generation": 3,
              "labels": {"a": "stored"}, "annotations": {"s": "stored"},
              "creationTimestamp": "2023-01-01T00:00:00Z", "finalizers": ["f"],
              "ownerReferences": [{"apiVersion": "projectcalico.org/v3", "kind": "Tier",
                                   "name": "t",
                                   "uid": "11111111-2222-4333-8444-555555555555"}]}
    cr = {"kind": "GlobalNetworkPolicy", "metadata": {
        "name": "default.foo", "uid": "11111111-2222-4333-8444-555555555555",
        "resourceVersion": "77", "generation": 9, "creationTimestamp": "2024-01-01T00:00:00Z",
        "labels": {"a": "cr", "b": "cr"},
        "annotations": {"projectcalico.org/metadata": json.dumps(stored), "x": "cr"}},
        "spec": {"selector": "all()"}}
    name, v3 = crd_to_v3("GlobalNetworkPolicy", cr)
    assert name == "default.foo"  # the key keeps the CR name
    md = v3["metadata"]
    assert md["name"] == "foo" and "namespace" not in md
    assert md["uid"] == "88888888-4444-43cc-8422-aaaaaaaaaaaa"
    assert md["resourceVersion"] == "77" and md["generation"] == 3
    assert md["creationTimestamp"] == "2023-01-01T00:00:00Z"
    assert md["labels"] == {"a": "stored", "b": "cr"}
    assert md["annotations"] == {"x": "cr", "s": "stored"}
    assert md["ownerReferences"][0]["uid"] == "88888888-4444-43cc-8422-aaaaaaaaaaaa"


def test_policy_name_without_stored_name() -> None:
    meta = json.dumps({"labels": {"l": "v"}})
    for tier, expected in (("", "foo"), ("default", "foo"), ("other", "default.foo")):
        cr = {"metadata": {"name": "default.foo", "annotations": {
            "projectcalico.org/metadata": meta}}, "spec": {"tier": tier}}
        assert crd_to_v3("NetworkPolicy", cr)[1]["metadata"]["name"] == expected
    # Other kinds keep the CR name; a zero stored creation time falls back to the CR's.
    cr = {"metadata": {"name": "default.x", "creationTimestamp": "2024-01-01T00:00:00Z",
                       "annotations": {"projectcalico.org/metadata": meta}}}
    md = crd_to_v3("BGPPeer", cr)[1]["metadata"]
    assert md["name"] == "default.x" and md["creationTimestamp"] == "2024-01-01T00:00:00Z"
    assert "annotations" not in md


def test_bad_metadata_annotation() -> None:
    cr = {"metadata": {"name": "x", "annotations": {"projectcalico.org/metadata": "{"}}}
    with pytest.raises(CRDConversionError):
        crd_to_v3("BGPPeer", cr)
