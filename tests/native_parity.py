"""Runs the model's golden conversions and validations in this interpreter and prints, as one
JSON object, every output and which model modules were compiled.

    python tests/native_parity.py TREE

``TREE`` (put first on ``sys.path``) holds a trio_typha build; with ``TRIO_TYPHA_PURE=1`` the
same tree runs from its sources (``trio_typha.native``).  tests/integration/test_native_build.py
runs both and compares the outputs byte for byte.  The inputs: the golden Calico objects in
every syncer / mode / group they were generated for, the optional APIs' goldens, the
validation goldens, the malformed objects' goldens, and the ``small`` synthetic cluster (every
Kubernetes and Calico kind the test bed generates) through all four KDD syncers, each KV then
through the validation filter.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "unit" / "model" / "golden"


def _kv_rows(kvs: Any) -> list[list[str]]:
    return [[kv.key, kv.value.hex(), kv.v3_resource_version] for kv in kvs]


def _synthetic(size: str) -> list[tuple[Any, dict[str, Any]]]:
    from testbed.cluster import cluster_objects
    from trio_typha.model import kinds as K

    out = []
    for kind, obj in cluster_objects(size, K.CALICO_CRD_GROUP):
        md = obj.setdefault("metadata", {})
        # what the API server would have stamped
        md.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL,
                                            f"{kind.kind}/{md.get('namespace')}/{md['name']}")))
        md.setdefault("resourceVersion", "7")
        md.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        out.append((kind, obj))
    return out


def convert_golden(case: dict[str, Any]) -> list[Any]:
    """The KVs of one ``golden/calico_v3.json`` case, read as its syncer, mode and group
    would (tests/unit/model/test_golden_calico.py compares them with Calico's)."""
    from trio_typha.model import kinds as K
    from trio_typha.model.syncers import DatastoreMode, syncer_definition

    mode = DatastoreMode.KDD if case["mode"] == "kdd" else DatastoreMode.ETCD
    group = case["group"] if mode is DatastoreMode.KDD else K.CALICO_V3_GROUP
    definition = syncer_definition(case["syncer"], mode, calico_group=group,
                                   use_pod_cidr=case["use_pod_cidr"])
    obj = dict(case["obj"])
    if group == K.CALICO_CRD_GROUP:
        obj["apiVersion"] = "crd.projectcalico.org/v1"
    return definition.convert(K.calico_kind(obj["kind"], group), obj)


def run() -> dict[str, Any]:
    from trio_typha import native
    from trio_typha.model import kinds as K
    from trio_typha.model.kinds import kind_for
    from trio_typha.model.kv import SerializedUpdate
    from trio_typha.model.syncers import DatastoreMode, syncer_definition
    from trio_typha.model.validation import ValidationFilter

    out: dict[str, Any] = {"golden": [], "optional": [], "validation": [], "synthetic": []}
    for case in json.loads((GOLDEN / "calico_v3.json").read_text("utf-8")):
        out["golden"].append(_kv_rows(convert_golden(case)))
    felix = syncer_definition("felix", DatastoreMode.KDD)
    for case in json.loads((GOLDEN / "kdd_optional_apis.json").read_text("utf-8")):
        obj = case["obj"]
        out["optional"].append(_kv_rows(felix.convert(kind_for(obj["apiVersion"],
                                                               obj["kind"]), obj)))
    vf = ValidationFilter()
    for case in json.loads((GOLDEN / "validation.json").read_text("utf-8")):
        value = case["value"]
        raw = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        out["validation"].append(vf.error(case["key"], raw))
    objects = _synthetic("small")
    for syncer in ("felix", "bgp", "tunnel-ip-allocation", "node-status"):
        definition = syncer_definition(syncer, DatastoreMode.KDD,
                                       calico_group=K.CALICO_CRD_GROUP)
        kinds = set(definition.kinds)
        for kind, obj in objects:
            if kind not in kinds:
                continue
            kvs = definition.convert(kind, obj)
            valid = vf([SerializedUpdate(kv.key, kv.value, "7", kv.v3_resource_version)
                        for kv in kvs])
            out["synthetic"].append([_kv_rows(kvs),
                                     [u.value.hex() if u.value else None for u in valid]])
    out["compiled"] = native.compiled_modules()
    out["state"] = native.STATE.describe()
    return out


if __name__ == "__main__":
    # Only the tree: the checkout's own directory may hold an in-place build (and the
    # test bed comes from its installed distribution, trio-typha-testbed).
    sys.path[0] = str(Path(sys.argv[1]).resolve())
    logging.disable(logging.WARNING)  # refused objects each log a line; the outputs say it
    json.dump(run(), sys.stdout)
