"""IP pools, IPAM blocks and block affinities → v1 ``IPPoolKey``, ``BlockKey`` and
``BlockAffinityKey`` values (``ippoolprocessor.go`` / ``k8s/resources/ippool.go``,
``ipam_block.go``, ``ipam_affinity_v1.go``).

In etcd mode Calico does not keep blocks and affinities as v3 resources: libcalico's etcdv3
backend stores the v1 model itself, an ``AllocationBlock`` at its ``BlockKey`` path and a
``BlockAffinity`` (``{"state":..,"deleted":..}``) at its ``BlockAffinityKey`` path, and the
syncers list those paths (``BlockListOptions{}``, ``BlockAffinityListOptions{Host: ""}``).
Typha then sends the key it parsed out of the path, written back canonically, and the value
Go decoded into the model struct, marshalled again.  The etcd datastore hands such an entry
to the converter as :func:`etcd_v1_object`; :func:`etcd_v1_kvs` does the rest.
"""

from __future__ import annotations

__sans_io__ = True

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from . import keys
from .gojson import BOOL, INT, STRING, GoJSONError, GoType, Map, Ptr, Slice, Struct, dumps
from .golang import IPNet, NilIPNet, parse_cidr, parse_ip, parse_rfc3339
from .goschema import ROOTS
from .gotypes import IPNET, TIME
from .shape import MalformedResource, field_map, field_str, maps

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
    spec = field_map(block, "spec")
    cidr = parse_cidr(field_str(spec, "cidr"))
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
                       for a in maps(spec.get("attributes"), "spec.attributes")],
        "sequenceNumber": spec.get("sequenceNumber", 0),
        "sequenceNumberForAllocation": spec.get("sequenceNumberForAllocation"),
        "deleted": bool(spec.get("deleted")),
    }
    return [(keys.block_key(cidr), dumps(_BLOCK, value))]


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def block_affinity_kvs(affinity: Mapping[str, Any], *, crd: bool = False
                       ) -> list[tuple[str, bytes]]:
    """A BlockAffinity → ``BlockAffinityKey`` ``{"state":..,"deleted":..}``.

    The two forms type ``deleted`` differently: the ``crd.projectcalico.org/v1`` CRD
    (``crd``; ``libcalico-go/lib/apis/internalapi/blockaffinity.go``) as a string, which
    the BGP syncer's client reads with ``strconv.ParseBool`` ("" is false;
    ``k8s/resources/ipam_affinity_v1.go``), and ``projectcalico.org/v3``
    (``api/pkg/apis/projectcalico/v3/blockaffinity.go``) as a bool.  A value of the other
    type, or a string ParseBool refuses, raises :class:`MalformedResource`: Go fails to
    decode (or convert) such an object, so it is refused (see docs/datastores.md).
    """
    spec = field_map(affinity, "spec")
    cidr = parse_cidr(field_str(spec, "cidr"))
    if cidr is None:
        return []
    deleted = _affinity_deleted(spec.get("deleted"), crd=crd)
    try:
        key = keys.block_affinity_key(cidr, field_str(spec, "node"),
                                      field_str(spec, "type") or "host")
    except keys.InvalidKeyError:
        return []
    return [(key, dumps(_AFFINITY, {"state": field_str(spec, "state"), "deleted": deleted}))]


def _affinity_deleted(value: Any, *, crd: bool) -> bool:
    if value is None:  # absent, or null: Go's decoder leaves the zero value
        return False
    if crd:
        if not isinstance(value, str):
            raise MalformedResource(f"spec.deleted: the CRD declares a string, got "
                                    f"{type(value).__name__} {value!r}")
        if value in _TRUE:
            return True
        if value in _FALSE or value == "":
            return False
        raise MalformedResource(f"spec.deleted: {value!r} does not parse as a bool")
    if not isinstance(value, bool):
        raise MalformedResource(f"spec.deleted: projectcalico.org/v3 declares a bool, got "
                                f"{type(value).__name__} {value!r}")
    return value


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


# --------------------------------------------------------------------------------------------
# etcd mode: the v1 model as libcalico's etcdv3 backend stores it

#: Where the felix syncer lists blocks (``BlockListOptions{}``).
ETCD_BLOCK_PREFIX = "/calico/ipam/v2/assignment/"
#: Where the BGP syncer lists affinities (``BlockAffinityListOptions{Host: ""}``: only the
#: ``host`` affinity type; ``virtual`` affinities are not read).
ETCD_AFFINITY_PREFIX = "/calico/ipam/v2/host/"
#: Field of an :func:`etcd_v1_object` holding the decoded JSON of the stored value.
ETCD_V1_VALUE = "v1Value"

# The path patterns of ``BlockListOptions`` / ``BlockAffinityListOptions.KeyFromDefaultPath``
# (``ipv.`` really is any one character there).
_BLOCK_PATH = re.compile(r"/?calico/ipam/v2/assignment/ipv./block/([^/]+)")
_AFFINITY_PATH = re.compile(r"/?calico/ipam/v2/(@|host|virtual)/([^/]+)/ipv./block/([^/]+)")


def _path_cidr(segment: str) -> IPNet | None:
    # The first "-" stands for the "/"; the network comes back masked.
    return parse_cidr(segment.replace("-", "/", 1))


def block_key_from_path(path: str) -> str | None:
    """The ``BlockKey`` Typha sends for a block stored at ``path``, or None if ``path`` is
    not a block path.  Written back canonically: ``ipv4/block/10.0.0.7-26`` becomes
    ``ipv4/block/10.0.0.0-26``, and the ``ipv`` digit follows the CIDR."""
    m = _BLOCK_PATH.fullmatch(path)
    cidr = _path_cidr(m.group(1)) if m else None
    return keys.block_key(cidr) if cidr is not None else None


def block_affinity_key_from_path(path: str) -> str | None:
    """The ``BlockAffinityKey`` Typha sends for an affinity stored at ``path``, or None."""
    m = _AFFINITY_PATH.fullmatch(path)
    cidr = _path_cidr(m.group(3)) if m else None
    if m is None or cidr is None:
        return None
    return keys.block_affinity_key(cidr, m.group(2), m.group(1))


_KEY_FROM_PATH = {"IPAMBlock": block_key_from_path,
                  "BlockAffinity": block_affinity_key_from_path}


def etcd_key_from_path(kind: str, path: str) -> str | None:
    """The v1 key of ``kind`` (``IPAMBlock`` or ``BlockAffinity``) stored at ``path``."""
    return _KEY_FROM_PATH[kind](path)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def etcd_v1_object(kind: str, key: str, raw: bytes) -> dict[str, Any]:
    """What the etcd datastore reports for the entry ``raw`` stored under the v1 ``key``
    (as :func:`etcd_key_from_path` gives it): ``kind``, ``apiVersion`` and the key as
    ``metadata.name``, and the JSON of the value under :data:`ETCD_V1_VALUE`.

    Raises ValueError when ``raw`` is not JSON, so the entry is skipped as Calico's list
    skips it.  An empty affinity value stands for ``{}`` (affinities used to be stored
    without one).  Invalid UTF-8 bytes survive as lone surrogates, which the encoder writes
    as ``\\ufffd`` one per byte, as Go does.
    """
    if not raw and kind == "BlockAffinity":
        raw = b"{}"
    try:
        value = json.loads(raw.decode("utf-8", errors="surrogateescape"),
                           parse_constant=_reject_constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"value is not JSON: {exc}") from None
    return {"apiVersion": "projectcalico.org/v3", "kind": kind, "metadata": {"name": key},
            ETCD_V1_VALUE: value}


def is_etcd_v1_object(obj: Mapping[str, Any]) -> bool:
    return ETCD_V1_VALUE in obj


def etcd_v1_kvs(kind: str, obj: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """An :func:`etcd_v1_object` → its ``BlockKey`` / ``BlockAffinityKey`` KV, the value
    decoded into the Go model struct and marshalled again (unknown fields dropped, field
    names matched ignoring ASCII case, ``cidr`` kept unmasked, ...).

    Raises GoJSONError (a ValueError) where Go's decoder refuses the value.
    """
    key = etcd_key_from_path(kind, field_str(field_map(obj, "metadata"), "name"))
    if key is None:
        raise GoJSONError(f"not a {kind} key: {obj.get('metadata')!r}")
    schema = _BLOCK if kind == "IPAMBlock" else _AFFINITY
    return [(key, dumps(schema, _go_decode(schema, obj[ETCD_V1_VALUE])))]


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _go_decode(t: GoType, v: Any) -> Any:
    """What json-iterator's ``Unmarshal`` leaves in a Go value of type ``t`` after decoding
    the JSON ``v``, as the data :func:`.gojson.dumps` encodes; GoJSONError where it fails.

    Covers the types of the IPAM model structs.  ``null`` sets pointers, slices and maps to
    nil and leaves anything else at its zero value, except a custom unmarshaler (IPNet),
    which sees it.
    """
    if t is IPNET:
        return _value_cidr(v)
    if isinstance(t, Ptr):
        return None if v is None else _go_decode(t.elem, v)
    if v is None:
        return None if isinstance(t, (Slice, Map)) else _zero(t)
    if isinstance(t, Struct):
        if not isinstance(v, dict):
            raise GoJSONError(f"cannot decode {type(v).__name__} into {t.name}")
        fields = {f.name.translate(_ASCII_LOWER): f for f in t.fields}
        out = _zero(t)
        for name, item in v.items():
            f = fields.get(name.translate(_ASCII_LOWER))
            if f is not None:  # unknown fields are ignored
                try:
                    out[f.name] = _go_decode(f.type, item)
                except GoJSONError as exc:  # say which field
                    raise GoJSONError(f"{f.name}: {exc}") from None
        return out
    if isinstance(t, Slice):
        if not isinstance(v, list):
            raise GoJSONError(f"cannot decode {type(v).__name__} into {t.name}")
        return [_go_decode(t.elem, item) for item in v]
    if isinstance(t, Map):
        if not isinstance(v, dict):
            raise GoJSONError(f"cannot decode {type(v).__name__} into {t.name}")
        return {k: _go_decode(t.elem, item) for k, item in v.items()}
    if t is TIME:
        if not isinstance(v, str):
            raise GoJSONError(f"cannot decode {v!r} into a time")
        try:
            parse_rfc3339(v)
        except ValueError as bad:  # not `exc`: mypyc types a name by its first except
            raise GoJSONError(str(bad)) from None
        return v
    if isinstance(t, type(STRING)):
        if not isinstance(v, str):
            raise GoJSONError(f"cannot decode {v!r} into a string")
        return v
    if t is BOOL:
        if not isinstance(v, bool):
            raise GoJSONError(f"cannot decode {v!r} into a bool")
        return v
    if isinstance(t, type(INT)):
        # Go refuses fractions and exponents (Python's float) for integer fields.
        if isinstance(v, bool) or not isinstance(v, int) or not t.lo <= v <= t.hi:
            raise GoJSONError(f"cannot decode {v!r} into {t.name}")
        return v
    raise GoJSONError(f"no decoder for {t.name}")


def _zero(t: GoType) -> Any:
    if isinstance(t, Struct):
        return {f.name: _zero(f.type) for f in t.fields}
    # A zero IPNet marshals as "<nil>", which the encoder only prints for NilIPNet.
    return NilIPNet() if t is IPNET else t.zero()


def _value_cidr(v: Any) -> IPNet:
    """``cnet.IPNet.UnmarshalJSON``: ``ParseCIDROrIP`` keeping the address's host bits, a
    bare IP as /32 or /128, and ``""`` (or null) as the nil network."""
    if v is None:
        v = ""
    if not isinstance(v, str):
        raise GoJSONError(f"cannot decode {v!r} into a CIDR")
    if v == "":
        return NilIPNet()
    addr, sep, _ = v.partition("/")
    masked = parse_cidr(v) if sep else None
    ip = parse_ip(addr)
    if ip is None or (sep and masked is None):
        raise GoJSONError(f"invalid CIDR {v!r}")
    if masked is None:
        return IPNet(ip, len(ip) * 8)
    prefix = masked.prefix
    if ":" in addr and len(ip) == 4:
        # An IPv4-mapped address with an IPv6 mask: Go prints the mask's last 32 bits.
        prefix = int(v.rpartition("/")[2]) - 96
    return IPNet(ip, max(prefix, 0))
