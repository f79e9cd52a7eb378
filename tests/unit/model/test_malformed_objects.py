"""Malformed datastore objects are refused one by one: one named warning, no crash.

Calico decodes each object into its Go struct before converting it, and one whose JSON has
a field of the wrong type fails to decode and is treated as absent
(``libcalico-go/lib/backend/k8s/resources/customresource.go`` for KDD,
``libcalico-go/lib/backend/etcdv3/conversion.go`` for etcd).  Here every object of
``testbed/seeds/all-kinds.yaml`` (and etcd's stored IPAM values) is damaged at every path in
turn (a field removed, or replaced by a value of each JSON type) and converted by every
syncer definition that watches its kind: the conversion either yields KVs or refuses the
object with the model's own ``ValueError`` family and exactly one warning naming it.  An
exception of any other type would be a bug that the tracker lets crash the process
(tests/unit/test_tracker.py), so none may come from bad data.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cluster import in_calico_group
from trio_typha.model import ipam
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES
from trio_typha.model.shape import MalformedResource, as_list, as_map, as_str, check_shape
from trio_typha.model.syncers import REFUSED, DatastoreMode, syncer_definition
from trio_typha.model.validation import ValidationFilter

SEEDS = Path(__file__).parents[3] / "testbed" / "seeds" / "all-kinds.yaml"
DOCS: list[dict[str, Any]] = [d for d in yaml.safe_load_all(SEEDS.read_text()) if d]
V3, CRD = K.CALICO_V3_GROUP, K.CALICO_CRD_GROUP
_DELETE = object()
DAMAGE: tuple[Any, ...] = (_DELETE, None, 7, "x", True, [], {}, [1], {"a": 1})

# etcd stores IPAM blocks and affinities as the v1 model (``model.ipam.etcd_v1_object``).
_BLOCK = (b'{"cidr":"10.244.1.0/26","affinity":"host:node-1","allocations":[0,null],'
          b'"unallocated":[1],"attributes":[{"handle_id":"h","secondary":{"a":"b"}}],'
          b'"deleted":false}')
_ETCD_V1 = [ipam.etcd_v1_object("IPAMBlock",
                                "/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26", _BLOCK),
            ipam.etcd_v1_object("BlockAffinity",
                                "/calico/ipam/v2/host/node-1/ipv4/block/10.244.1.0-26",
                                b'{"state":"confirmed","deleted":false}')]


def _kind_of(doc: dict[str, Any], group: str) -> K.ResourceKind:
    if doc["apiVersion"].startswith(V3 + "/"):
        return K.calico_kind(doc["kind"], group)
    return K.kind_for(doc["apiVersion"], doc["kind"])


def _cases() -> Iterator[Any]:
    for mode in DatastoreMode:
        for group in ([V3, CRD] if mode is DatastoreMode.KDD else [V3]):
            docs = DOCS + (_ETCD_V1 if mode is DatastoreMode.ETCD else [])
            kinds = sorted({_kind_of(d, group) for d in docs}, key=lambda k: k.kind)
            for kind in kinds:
                syncers = [s for s in SYNCER_TYPES
                           if kind in syncer_definition(s, mode, calico_group=group).kinds]
                if syncers:
                    yield pytest.param(mode, group, kind, syncers,
                                       id=f"{mode.name}-{group}-{kind.kind}")


def _paths(o: Any, p: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield p
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, (*p, k))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, (*p, i))


def _damaged(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(obj)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


@pytest.mark.parametrize(("mode", "group", "kind", "syncers"), list(_cases()))
def test_every_damaged_object_converts_or_is_refused_with_one_warning(
        mode: DatastoreMode, group: str, kind: K.ResourceKind, syncers: list[str],
        caplog: pytest.LogCaptureFixture) -> None:
    docs = DOCS + (_ETCD_V1 if mode is DatastoreMode.ETCD else [])
    validation = ValidationFilter()
    refused = 0
    for syncer in syncers:
        definition = syncer_definition(syncer, mode, calico_group=group)
        for doc in (d for d in docs if _kind_of(d, group) == kind):
            base = in_calico_group(doc, CRD)[1] if group == CRD else doc
            name = base["metadata"]["name"]
            key = (base["metadata"].get("namespace") or "", name)
            for path in _paths(base):
                for value in DAMAGE:
                    if value is _DELETE and not path:
                        continue
                    obj = _damaged(base, path, value)
                    caplog.clear()
                    with caplog.at_level(logging.WARNING):
                        kvs = definition.convert(kind, obj, key=key)
                        for kv in kvs:  # validation reads what the conversion wrote
                            validation.error(kv.key, kv.value)
                    where = f"{syncer} {path} := {value!r}"
                    mine = [r for r in caplog.records
                            if r.name == "trio_typha.model.syncers"]
                    if mine:
                        refused += 1
                        assert kvs == [], where
                        assert len(mine) == 1, where
                        message = mine[0].getMessage()
                        assert kind.kind in message and name in message, message
                        assert mine[0].levelno == logging.WARNING
    assert refused  # the damage reached the accessors


def test_the_refusal_family_is_the_models_value_error() -> None:
    assert (ValueError,) == REFUSED
    assert issubclass(MalformedResource, ValueError)


@pytest.mark.parametrize(("accessor", "good", "bad"), [
    (as_map, {"a": 1}, [1]), (as_list, [1], {"a": 1}), (as_list, [1], "abc"),
    (as_str, "s", 5), (as_str, "s", ["s"]),
])
def test_accessors_name_the_field(accessor: Any, good: Any, bad: Any) -> None:
    assert accessor(good, "spec.x") == good
    assert not accessor(None, "spec.x")  # absent and null are Go's zero value
    with pytest.raises(MalformedResource, match=r"^spec\.x: expected"):
        accessor(bad, "spec.x")


def test_check_shape_names_the_path_go_would_refuse() -> None:
    from trio_typha.model.goschema import ROOTS

    gnp = ROOTS["GlobalNetworkPolicy"]
    check_shape(gnp, {"metadata": {"name": "p"}, "spec": {"order": 10, "ingress": [
        {"action": "Allow", "source": {"nets": ["10.0.0.0/8"]}}]}})
    with pytest.raises(MalformedResource, match=r"spec\.ingress\[0\]\.source\.nets\[0\]: "
                                                r"expected a string, got a number"):
        check_shape(gnp, {"spec": {"ingress": [{"source": {"nets": [10]}}]}})
    with pytest.raises(MalformedResource, match=r"spec\.order: expected a number"):
        check_shape(gnp, {"spec": {"order": "first"}})
    with pytest.raises(MalformedResource, match=r"spec\.doNotTrack: expected a bool"):
        check_shape(gnp, {"spec": {"doNotTrack": "yes"}})
    with pytest.raises(MalformedResource, match=r"metadata: expected an object"):
        check_shape(gnp, {"metadata": "p"})
