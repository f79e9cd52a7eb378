"""Byte-for-byte goldens for the KDD felix syncer's optional APIs.

``golden/kdd_optional_apis.json`` holds Kubernetes ClusterNetworkPolicies and KubeVirt
VirtualMachineInstanceMigrations written for these tests (the seed's, and the cases of
test_k8s_cluster_policy.py and test_kubevirt.py, with the edge cases of ports, peers, rules
that fail, tombstones and migration phases) with the keys, values and V3ResourceVersions that
Calico v3.32.1's own code produced for each: ``K8sClusterNetworkPolicyToCalico`` then the
GlobalNetworkPolicy update processor for kind KubernetesClusterNetworkPolicy, or the
LiveMigration client's List, then Typha's ``syncproto.SerializeUpdate`` (tools/gen_goldens.py,
Go 1.25.11, json-iterator v1.1.12).  Objects that yield nothing (tombstones, migrations in other
phases) have no KVs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trio_typha.model.kinds import kind_for
from trio_typha.model.syncers import DatastoreMode, syncer_definition

GOLDEN: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "golden" / "kdd_optional_apis.json").read_text("utf-8"))
FELIX = syncer_definition("felix", DatastoreMode.KDD)


def _case_id(case: dict[str, Any]) -> str:
    md = case["obj"]["metadata"]
    return f"{case['obj']['kind']}-{md.get('namespace', '')}/{md['name']}".replace("-/", "-")


@pytest.mark.parametrize("case", GOLDEN, ids=[_case_id(c) for c in GOLDEN])
def test_matches_calico(case: dict[str, Any]) -> None:
    obj = case["obj"]
    kind = kind_for(obj["apiVersion"], obj["kind"])
    got = [[kv.key, kv.value.decode("utf-8"), kv.v3_resource_version]
           for kv in FELIX.convert(kind, obj)]
    assert got == case["kvs"]


def test_goldens_cover_both_kinds_served_and_not() -> None:
    for kind in ("ClusterNetworkPolicy", "VirtualMachineInstanceMigration"):
        cases = [c for c in GOLDEN if c["obj"]["kind"] == kind]
        assert any(c["kvs"] for c in cases) and any(not c["kvs"] for c in cases)
