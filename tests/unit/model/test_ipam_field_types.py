"""What the syncers do with IPAM fields of each JSON type, per form: a BlockAffinity's
``deleted`` (whose type differs between the forms) and an IPAMBlock's fields.

Go's behaviour, stated here, read from Calico v3.32.1:

* ``crd.projectcalico.org/v1`` (KDD): the Go type is ``internalapi.BlockAffinitySpec``
  (``libcalico-go/lib/apis/crd.projectcalico.org/v1/block_affinity_types.go``,
  ``libcalico-go/lib/apis/internalapi/blockaffinity.go``): ``Deleted string``.  A value of
  another JSON type fails to decode, and so does the whole list holding it (client-go
  decodes the list into a typed list).  The BGP syncer's client turns the string into a
  bool with ``strconv.ParseBool``, ``""`` meaning false, and fails the list on anything
  else (``libcalico-go/lib/backend/k8s/resources/ipam_affinity_v1.go``).
* ``projectcalico.org/v3`` (KDD against Calico's API server or v3 CRDs):
  ``Deleted bool`` (``api/pkg/apis/projectcalico/v3/blockaffinity.go``); a string fails to
  decode.
* etcd: the v1 model at ``/calico/ipam/v2/host/...``, ``Deleted bool``
  (``libcalico-go/lib/backend/model/block_affinity.go``); a value that does not parse is
  skipped by the list (``libcalico-go/lib/backend/etcdv3/conversion.go``
  ``convertListResponse``).

trio-typha sends what Go sends wherever Go decodes the value, and refuses the object (one
WARNING, no KV) wherever Go refuses it; where Go fails the whole list, only that object is
refused (docs/datastores.md).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trio_typha.model import ipam
from trio_typha.model import kinds as K
from trio_typha.model.syncers import ConvertedKV, DatastoreMode, syncer_definition

KEY = "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26"
SENT = {False: b'{"state":"confirmed","deleted":false}',
        True: b'{"state":"confirmed","deleted":true}'}
REFUSED = None


def _affinity(group: str, deleted: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"state": "confirmed", "node": "node-1", "cidr": "10.244.1.0/26"}
    if deleted is not _ABSENT:
        spec["deleted"] = deleted
    return {"apiVersion": f"{group}/{'v1' if group == K.CALICO_CRD_GROUP else 'v3'}",
            "kind": "BlockAffinity", "metadata": {"name": "node-1-10-244-1-0-26"},
            "spec": spec}


_ABSENT = object()
_CRD_CASES = [("false", False), ("true", True), ("", False), ("T", True), ("0", False),
              ("TRUE", True), (None, False), (_ABSENT, False),
              ("yes", REFUSED), (False, REFUSED), (True, REFUSED), (0, REFUSED),
              ([], REFUSED), ({}, REFUSED)]
_V3_CASES = [(False, False), (True, True), (None, False), (_ABSENT, False),
             ("false", REFUSED), ("true", REFUSED), (0, REFUSED), ({}, REFUSED)]


def _converted(mode: DatastoreMode, group: str, obj: dict[str, Any],
               caplog: pytest.LogCaptureFixture) -> bool | None:
    definition = syncer_definition("bgp", mode, calico_group=group)
    kind = K.calico_kind("BlockAffinity", group)
    assert kind in definition.kinds
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        kvs = definition.convert(kind, obj)
    warnings = [r for r in caplog.records if r.name == "trio_typha.model.syncers"]
    if not kvs:
        assert len(warnings) == 1 and "BlockAffinity" in warnings[0].getMessage()
        assert "deleted" in warnings[0].getMessage()
        return REFUSED
    assert warnings == []
    (kv,) = kvs
    assert kv.key == KEY
    return next(d for d, sent in SENT.items() if sent == kv.value)


@pytest.mark.parametrize(("deleted", "expected"), _CRD_CASES)
def test_the_crd_form_takes_a_string_as_parse_bool_does(
        deleted: Any, expected: bool | None, caplog: pytest.LogCaptureFixture) -> None:
    obj = _affinity(K.CALICO_CRD_GROUP, deleted)
    assert _converted(DatastoreMode.KDD, K.CALICO_CRD_GROUP, obj, caplog) is expected


@pytest.mark.parametrize(("deleted", "expected"), _V3_CASES)
@pytest.mark.parametrize("mode", list(DatastoreMode))
def test_the_v3_form_takes_a_bool(mode: DatastoreMode, deleted: Any, expected: bool | None,
                                  caplog: pytest.LogCaptureFixture) -> None:
    """KDD against projectcalico.org/v3, and etcd mode's v3 documents (seed files) alike."""
    obj = _affinity(K.CALICO_V3_GROUP, deleted)
    assert _converted(mode, K.CALICO_V3_GROUP, obj, caplog) is expected


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"state":"confirmed","deleted":false}', False),
    (b'{"state":"confirmed","deleted":true}', True),
    (b'{"state":"confirmed"}', False),
    (b'{"state":"confirmed","deleted":"false"}', REFUSED),
    (b'{"state":"confirmed","deleted":1}', REFUSED),
])
def test_etcd_s_v1_value_takes_a_bool(raw: bytes, expected: bool | None,
                                      caplog: pytest.LogCaptureFixture) -> None:
    obj = ipam.etcd_v1_object("BlockAffinity", KEY, raw)
    assert _converted(DatastoreMode.ETCD, K.CALICO_V3_GROUP, obj, caplog) is expected


def test_a_refused_affinity_withdraws_only_itself() -> None:
    """Go fails the whole KDD list for one such object, so its BGP syncer never syncs; here
    the other affinities are still sent."""
    definition = syncer_definition("bgp", DatastoreMode.KDD, calico_group=K.CALICO_CRD_GROUP)
    kind = K.calico_kind("BlockAffinity", K.CALICO_CRD_GROUP)
    good = _affinity(K.CALICO_CRD_GROUP, "false")
    other = {**good, "metadata": {"name": "node-2-10-244-2-0-26"},
             "spec": {**good["spec"], "node": "node-2", "cidr": "10.244.2.0/26"}}
    assert definition.convert(kind, _affinity(K.CALICO_CRD_GROUP, False)) == []
    assert definition.convert(kind, other) == [ConvertedKV(
        "/calico/ipam/v2/host/node-2/ipv4/block/10.244.2.0-26", SENT[False], "")]


@pytest.mark.parametrize("group", [K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP])
@pytest.mark.parametrize(("field", "value"), [("deleted", "false"), ("deleted", 0),
                                              ("sequenceNumber", "7"),
                                              ("strictAffinity", "no")])
def test_an_ipam_block_field_of_the_wrong_type_is_refused(
        group: str, field: str, value: Any, caplog: pytest.LogCaptureFixture) -> None:
    """IPAMBlock's fields have the same JSON types in both forms
    (``internalapi.IPAMBlockSpec``, ``api/pkg/apis/projectcalico/v3/ipamblocks.go``):
    ``deleted`` a bool, which a string "false" must not pass for (it used to read as
    true)."""
    definition = syncer_definition("felix", DatastoreMode.KDD, calico_group=group)
    kind = K.calico_kind("IPAMBlock", group)
    block = {"apiVersion": f"{group}/{'v1' if group == K.CALICO_CRD_GROUP else 'v3'}",
             "kind": "IPAMBlock", "metadata": {"name": "10-244-1-0-26"},
             "spec": {"cidr": "10.244.1.0/26", "allocations": [None], "unallocated": [0],
                      "attributes": [], "strictAffinity": False, "deleted": False}}
    assert len(definition.convert(kind, block)) == 1
    with caplog.at_level(logging.WARNING):
        assert definition.convert(kind, {**block, "spec": {**block["spec"],
                                                           field: value}}) == []
    (warning,) = [r for r in caplog.records if r.name == "trio_typha.model.syncers"]
    assert f"spec.{field}" in warning.getMessage()
