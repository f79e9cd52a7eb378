"""IP pools, IPAM blocks and block affinities → v1 ``IPPoolKey``, ``BlockKey`` and
``BlockAffinityKey`` values (``ippoolprocessor.go`` / ``k8s/resources/ippool.go``,
``ipam_block.go``, ``ipam_affinity_v1.go``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import keys
from .gojson import dumps
from .golang import parse_cidr
from .goschema import ROOTS

log = logging.getLogger(__name__)

_POOL = ROOTS["v1.IPPool"]
_BLOCK = ROOTS["v1.AllocationBlock"]
_AFFINITY = ROOTS["v1.BlockAffinity"]

_ENCAP = {"Always": "always", "CrossSubnet": "cross-subnet"}


def ip_pool_kvs(pool: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """``IPPoolV3ToV1``; nothing if the CIDR does not parse."""
    spec = pool.get("spec") or {}
    cidr = parse_cidr(spec.get("cidr") or "")
    if cidr is None:
        log.warning("IP pool %s has an invalid CIDR", (pool.get("metadata") or {}).get("name"))
        return []
    ipip = _ENCAP.get(spec.get("ipipMode") or "", "")
    disabled = bool(spec.get("disabled"))
    value = {
        "cidr": cidr,
        "ipip": "tunl0" if ipip else "",
        "ipip_mode": ipip,
        "vxlan_mode": _ENCAP.get(spec.get("vxlanMode") or "", ""),
        "masquerade": bool(spec.get("natOutgoing")),
        "ipam": not disabled,
        "disabled": disabled,
        "disableBGPExport": bool(spec.get("disableBGPExport")),
        "assignment_mode": (spec["assignmentMode"] if spec.get("assignmentMode") is not None
                            else "Automatic"),
        "allowed_uses": spec.get("allowedUses"),
    }
    return [(keys.ip_pool_key(cidr), dumps(_POOL, value))]


def ipam_block_kvs(block: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """An IPAMBlock (v3 or CRD) → ``BlockKey`` with its ``AllocationBlock``."""
    spec = block.get("spec") or {}
    cidr = parse_cidr(spec.get("cidr") or "")
    if cidr is None:
        return []
    value = {
        "cidr": cidr,
        "affinity": spec.get("affinity"),
        "affinity_claim_time": spec.get("affinityClaimTime"),
        "allocations": spec.get("allocations"),
        "unallocated": spec.get("unallocated"),
        # Always a list (never null): the backend rebuilds it attribute by attribute.
        "attributes": [{"handle_id": a.get("handle_id"), "secondary": a.get("secondary"),
                        "alternateOwnerAttrs": a.get("alternateOwnerAttrs")}
                       for a in spec.get("attributes") or []],
        "sequenceNumber": spec.get("sequenceNumber", 0),
        "sequenceNumberForAllocation": spec.get("sequenceNumberForAllocation"),
        "deleted": bool(spec.get("deleted")),
    }
    return [(keys.block_key(cidr), dumps(_BLOCK, value))]


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def block_affinity_kvs(affinity: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """A BlockAffinity → ``BlockAffinityKey`` ``{"state":..,"deleted":..}``.  The CRD form
    carries ``deleted`` as a string (``strconv.ParseBool``), the v3 form as a bool."""
    spec = affinity.get("spec") or {}
    cidr = parse_cidr(spec.get("cidr") or "")
    if cidr is None:
        return []
    deleted = spec.get("deleted", False)
    if isinstance(deleted, str):
        if deleted == "":
            deleted = False
        elif deleted in _TRUE:
            deleted = True
        elif deleted in _FALSE:
            deleted = False
        else:
            log.warning("block affinity %s: invalid deleted value %r",
                        (affinity.get("metadata") or {}).get("name"), deleted)
            return []
    try:
        key = keys.block_affinity_key(cidr, spec.get("node") or "", spec.get("type") or "host")
    except keys.KeyError_:
        return []
    return [(key, dumps(_AFFINITY, {"state": spec.get("state") or "",
                                    "deleted": bool(deleted)}))]


def pod_cidr_block_kvs(node_name: str, pod_cidrs: list[str] | None) -> list[tuple[str, bytes]]:
    """With ``usePodCIDR`` the felix node processor invents a block per pod CIDR, affine to
    the node."""
    out = []
    for c in pod_cidrs or []:
        cidr = parse_cidr(c)
        if cidr is None:
            continue
        out.append((keys.block_key(cidr), dumps(_BLOCK, {
            "cidr": cidr, "affinity": f"host:{node_name}"})))
    return out
