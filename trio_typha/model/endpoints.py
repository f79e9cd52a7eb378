"""Workload and host endpoints → v1 ``WorkloadEndpointKey`` / ``HostEndpointKey`` values
(``workloadendpointprocessor.go``, ``hostendpointprocessor.go``)."""

from __future__ import annotations

__sans_io__ = True

import logging
from collections.abc import Callable, Mapping
from typing import Any

from . import keys
from .gojson import GoJSONError, dumps, go_string
from .golang import IPNet, parse_cidr_or_ip, parse_ip, parse_mac
from .goschema import ROOTS
from .gotypes import DSCP_VALUES, Uint8OrString, protocol_to_v1
from .rules import LABEL_SERVICE_ACCOUNT, NAMESPACE_LABEL_PREFIX, SERVICE_ACCOUNT_LABEL_PREFIX
from .shape import maps, strs

log = logging.getLogger(__name__)

_WEP = ROOTS["v1.WorkloadEndpoint"]
_HEP = ROOTS["v1.HostEndpoint"]

ANNOTATION_QOS_EGRESS_DSCP = "qos.projectcalico.org/dscp"


def _extract_parts(name: str) -> list[str]:
    """Split a WEP name on single dashes; ``--`` is an escaped dash."""
    parts: list[str] = []
    last = -1
    i = 1
    while i < len(name):
        if name[i] == "-":
            if i < len(name) - 1 and name[i + 1] == "-":
                i += 2
                continue
            parts.append(name[last + 1:i].replace("--", "-"))
            last = i
        i += 1
    parts.append(name[last + 1:].replace("--", "-"))
    return parts


def workload_endpoint_key(name: str, namespace: str) -> str | None:
    """``ConvertWorkloadEndpointV3KeyToV1Key``: the v1 key from the v3 name
    ``<node>-<orchestrator>-<workload>-<endpoint>`` (dashes in segments doubled); None if
    the name does not split into four parts or the namespace is empty."""
    if len(name) < 7:
        return None
    parts = _extract_parts(name)
    if len(parts) != 4 or not namespace:
        return None
    try:
        return keys.workload_endpoint_key(parts[0], parts[1], f"{namespace}/{parts[2]}",
                                          parts[3])
    except keys.InvalidKeyError:
        return None


def workload_endpoint_kvs(wep: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """A v3 WorkloadEndpoint → its v1 KV; nothing when it has no IP networks (the
    processor filters those) or does not convert (treated as deleted)."""
    md = wep.get("metadata") or {}
    key = workload_endpoint_key(md.get("name") or "", md.get("namespace") or "")
    if key is None:
        log.warning("workload endpoint %s has no valid v1 key", md.get("name"))
        return []
    try:
        value = workload_endpoint_value(wep)
    except (GoJSONError, ValueError) as e:
        log.warning("workload endpoint %s does not convert (%s); treating as deleted", key, e)
        return []
    return [] if value is None else [(key, encode_workload_endpoint(value))]


# --- the v1 WorkloadEndpoint value, encoded without the generic walk ------------------------
#
# One per pod, so the hottest encoding at start-up.  Each field's text is independent of the
# others', so each field is written by a fast encoder for the Python types
# ``workload_endpoint_value`` produces, or, for anything else, by its Go type as
# ``dumps(_WEP, value)`` would; tests/unit/model/test_endpoints_encode.py checks the bytes
# against ``dumps`` on generated values.


def _fast_string(v: Any) -> str | None:
    return go_string(v) if type(v) is str else None


def _fast_strings(v: Any) -> str | None:
    if type(v) is not list:
        return None
    if not all(type(s) is str for s in v):
        return None
    return "[" + ",".join([go_string(s) for s in v]) + "]"


def _fast_nets(v: Any) -> str | None:
    if type(v) is not list or not all(isinstance(n, IPNet) for n in v):
        return None
    return "[" + ",".join([go_string(str(n)) for n in v]) + "]"


def _fast_labels(v: Any) -> str | None:
    # uniquelabels.Map: encoding/json strings, keys in byte order, which for str keys is
    # code-point order (UTF-8 preserves it), so plain sorted() agrees with gojson.Map.
    if type(v) is not dict:
        return None
    parts = []
    for k in sorted(v) if all(type(k) is str for k in v) else ():
        x = v[k]
        if type(x) is not str:
            return None
        parts.append(go_string(k, std=True) + ":" + go_string(x, std=True))
    if len(parts) != len(v):
        return None
    return "{" + ",".join(parts) + "}"


_FAST: dict[str, Callable[[Any], str | None]] = {
    "state": _fast_string, "name": _fast_string, "active_instance_id": _fast_string,
    "generate_name": _fast_string, "profile_ids": _fast_strings, "ipv4_nets": _fast_nets,
    "ipv6_nets": _fast_nets, "labels": _fast_labels,
}
_WEP_FIELDS = tuple((f, _FAST.get(f.name)) for f in _WEP.fields)


def encode_workload_endpoint(value: Any) -> bytes:
    """``dumps(_WEP, value)``, byte for byte (and the same GoJSONError), faster."""
    if type(value) is not dict:
        return dumps(_WEP, value)
    out: list[str] = []
    for f, fast in _WEP_FIELDS:
        val = value.get(f.name)
        if f.omitempty and f.type.is_empty(val):
            continue
        text = None if val is None or fast is None else fast(val)
        out.append(f.key)
        if text is None:
            f.type.encode(val if val is not None else f.type.zero(), out)
        else:
            out.append(text)
        out.append(",")
    if out:
        out.pop()
    return ("{" + "".join(out) + "}").encode("utf-8", errors="surrogatepass")


def workload_endpoint_value(wep: Mapping[str, Any]) -> dict[str, Any] | None:
    md = wep.get("metadata") or {}
    spec = wep.get("spec") or {}
    ip_networks = strs(spec.get("ipNetworks"), "spec.ipNetworks")
    if not ip_networks:
        return None
    v4: list[IPNet] = []
    v6: list[IPNet] = []
    for s in ip_networks:
        n = parse_cidr_or_ip(s)
        if n is None:
            raise ValueError(f"invalid IP network {s!r}")
        (v4 if n.version == 4 else v6).append(n)
    nat4: list[dict[str, bytes]] = []
    nat6: list[dict[str, bytes]] = []
    for nat in maps(spec.get("ipNATs"), "spec.ipNATs"):
        internal = parse_ip(nat.get("internalIP") or "")
        external = parse_ip(nat.get("externalIP") or "")
        if internal is not None and external is not None:
            (nat4 if len(internal) == 4 else nat6).append({"int_ip": internal,
                                                           "ext_ip": external})
    gw4 = _gateway(spec.get("ipv4Gateway") or "")
    gw6 = _gateway(spec.get("ipv6Gateway") or "")
    mac = None
    if spec.get("mac"):
        mac = parse_mac(spec["mac"])
        if mac is None:
            raise ValueError(f"invalid MAC {spec['mac']!r}")
    ports = [{"name": p["name"], "protocol": protocol_to_v1(p.get("protocol")),
              "port": p.get("port", 0)}
             for p in maps(spec.get("ports"), "spec.ports") if p.get("name")]
    labels = {k: v for k, v in (md.get("labels") or {}).items()
              if not k.startswith((NAMESPACE_LABEL_PREFIX, SERVICE_ACCOUNT_LABEL_PREFIX))}
    if spec.get("serviceAccountName"):
        labels[LABEL_SERVICE_ACCOUNT] = spec["serviceAccountName"]
    allowed = []
    for prefix in strs(spec.get("allowSpoofedSourcePrefixes"),
                       "spec.allowSpoofedSourcePrefixes"):
        n = parse_cidr_or_ip(prefix)
        if n is None:
            raise ValueError(f"invalid allowSpoofedSourcePrefix {prefix!r}")
        allowed.append(n)
    return {
        "state": "active",
        "name": spec.get("interfaceName") or "",
        "active_instance_id": "",
        "mac": mac,
        "profile_ids": spec.get("profiles"),
        "ipv4_nets": v4 or None,
        "ipv6_nets": v6 or None,
        "ipv4_nat": nat4 or None,
        "ipv6_nat": nat6 or None,
        "labels": labels,
        "ipv4_gateway": gw4,
        "ipv6_gateway": gw6,
        "ports": ports,
        "generate_name": md.get("generateName") or "",
        "allow_spoofed_source_ips": allowed or None,
        "annotations": md.get("annotations"),
        "qosControls": spec.get("qosControls"),
    }


def _gateway(s: str) -> bytes | None:
    """The address part of ``cnet.ParseCIDROrIP`` (a CIDR keeps its host bits)."""
    if not s:
        return None
    ip = parse_ip(s.partition("/")[0]) if "/" in s and parse_cidr_or_ip(s) else parse_ip(s)
    if ip is None:
        raise ValueError(f"invalid gateway {s!r}")
    return ip


def _qos_from_annotations(annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """``handleQoSControlsAnnotations``: only the DSCP annotation, when valid."""
    s = annotations.get(ANNOTATION_QOS_EGRESS_DSCP)
    if s is None:
        return None
    for name in DSCP_VALUES:
        if name.lower() == s.lower():
            dscp = Uint8OrString(None, name)
            break
    else:
        dscp = Uint8OrString.parse(s) if s.isdigit() else Uint8OrString(None, s)
    n = dscp.num_value()
    if n is not None:
        if n > 63:
            log.warning("invalid DSCP annotation %r", s)
            return None
    elif dscp.str.strip().upper() not in DSCP_VALUES:
        log.warning("invalid DSCP annotation %r", s)
        return None
    return {"dscp": dscp}


def host_endpoint_kvs(hep: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """A v3 HostEndpoint → its v1 KV (key host = ``spec.node``, id = object name)."""
    md = hep.get("metadata") or {}
    spec = hep.get("spec") or {}
    v4: list[bytes] = []
    v6: list[bytes] = []
    for s in strs(spec.get("expectedIPs"), "spec.expectedIPs"):
        ip = parse_ip(s)
        if ip is not None:
            (v4 if len(ip) == 4 else v6).append(ip)
    ports = [{"name": p.get("name", ""), "protocol": protocol_to_v1(p.get("protocol")),
              "port": p.get("port", 0)} for p in maps(spec.get("ports"), "spec.ports")]
    value = {
        "name": spec.get("interfaceName") or "",
        "expected_ipv4_addrs": v4 or None,
        "expected_ipv6_addrs": v6 or None,
        "labels": md.get("labels"),
        "profile_ids": spec.get("profiles"),
        "ports": ports,
        "qosControls": _qos_from_annotations(md.get("annotations") or {}),
    }
    key = keys.host_endpoint_key(spec.get("node") or "", md.get("name") or "")
    return [(key, dumps(_HEP, value))]
