"""The test bed's Calico CRD checker holds facts stated by Calico v3.32.1's CRD manifests.

Each row is read from ``libcalico-go/config/crd/crd.projectcalico.org_<plural>.yaml``: a
field's JSON type, or that it is required.  The checker derives them from the Go layouts in
``trio_typha.model.goschema``, so a change there that breaks one shows up here.
"""

from __future__ import annotations

from typing import Any

import pytest

from testbed.apiserver.crd_schema import check
from testbed.apiserver.status import ApiError
from trio_typha.model import kinds as K


def _refusal(kind: str, spec: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        check(K.calico_kind(kind, K.CALICO_CRD_GROUP),
              {"apiVersion": "crd.projectcalico.org/v1", "kind": kind,
               "metadata": {"name": "x"}, "spec": spec})
    except ApiError as exc:
        assert (exc.code, exc.reason) == (422, "Invalid")
        assert exc.details is not None
        return [(c["reason"], c["field"]) for c in exc.details["causes"]]
    return []


BLOCK_AFFINITY = {"state": "confirmed", "node": "n", "cidr": "10.0.0.0/26", "deleted": "false"}
IPAM_BLOCK = {"cidr": "10.0.0.0/26", "allocations": [None], "unallocated": [0],
              "attributes": [], "strictAffinity": False}


@pytest.mark.parametrize(("kind", "spec", "causes"), [
    # blockaffinities: cidr, deleted, node, state required; deleted `type: string`
    ("BlockAffinity", BLOCK_AFFINITY, []),
    ("BlockAffinity", {**BLOCK_AFFINITY, "deleted": False},
     [("FieldValueInvalid", "spec.deleted")]),
    ("BlockAffinity", {"state": "confirmed"},
     [("FieldValueRequired", "spec.node"), ("FieldValueRequired", "spec.cidr"),
      ("FieldValueRequired", "spec.deleted")]),
    # ipamblocks: allocations, attributes, cidr, strictAffinity, unallocated required;
    # sequenceNumber and deleted are not
    ("IPAMBlock", IPAM_BLOCK, []),
    ("IPAMBlock", {k: v for k, v in IPAM_BLOCK.items() if k != "strictAffinity"},
     [("FieldValueRequired", "spec.strictAffinity")]),
    ("IPAMBlock", {**IPAM_BLOCK, "deleted": "false"}, [("FieldValueInvalid", "spec.deleted")]),
    # ippools: cidr required, `type: string`
    ("IPPool", {}, [("FieldValueRequired", "spec.cidr")]),
    ("IPPool", {"cidr": 10}, [("FieldValueInvalid", "spec.cidr")]),
    # felixconfigurations: routeTableRange requires max and min, integers
    ("FelixConfiguration", {"routeTableRange": {"min": 1}},
     [("FieldValueRequired", "spec.routeTableRange.max")]),
    ("FelixConfiguration", {"routeTableRange": {"min": 1, "max": "2"}},
     [("FieldValueInvalid", "spec.routeTableRange.max")]),
    # globalnetworkpolicies: a rule requires action; source and destination are optional;
    # a port is x-kubernetes-int-or-string
    ("GlobalNetworkPolicy", {"ingress": [{"action": "Allow"}]}, []),
    ("GlobalNetworkPolicy", {"ingress": [{"source": {}}]},
     [("FieldValueRequired", "spec.ingress[0].action")]),
    ("GlobalNetworkPolicy", {"egress": [{"action": "Allow", "destination": {
        "ports": [443, "https", [1]]}}]},
     [("FieldValueInvalid", "spec.egress[0].destination.ports[2]")]),
    # hostendpoints: a port requires name, port (integer) and protocol (int-or-string)
    ("HostEndpoint", {"ports": [{"name": "h", "port": 80, "protocol": "TCP"}]}, []),
    ("HostEndpoint", {"ports": [{"name": "h", "port": "80", "protocol": 6}]},
     [("FieldValueInvalid", "spec.ports[0].port")]),
    # tiers: spec required
    ("Tier", {"order": 100}, []),
])
def test_facts_from_calico_s_crd_manifests(kind: str, spec: dict[str, Any],
                                           causes: list[tuple[str, str]]) -> None:
    assert _refusal(kind, spec) == causes


def test_tier_requires_its_spec_and_other_groups_are_not_checked() -> None:
    with pytest.raises(ApiError, match=r'Tier\.crd\.projectcalico\.org "t" is invalid: '
                                       r"spec: Required value"):
        check(K.calico_kind("Tier", K.CALICO_CRD_GROUP), {"metadata": {"name": "t"}})
    # projectcalico.org/v3 declares BlockAffinity.deleted a bool; that group is not a CRD
    # here, and Kubernetes kinds are validated by their own server code.
    check(K.calico_kind("BlockAffinity", K.CALICO_V3_GROUP),
          {"metadata": {"name": "a"}, "spec": {"deleted": False}})
    check(K.POD, {"metadata": {"name": "p"}, "spec": {"containers": "not checked"}})
