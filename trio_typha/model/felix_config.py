"""ClusterInformation and FelixConfiguration → raw-string config keys
(``configurationprocessor.go``, ``felixconfigprocessor.go``, ``clusterinfoprocessor.go``).

Name ``default`` → ``/calico/v1/config/<Name>``; ``node.<n>`` → ``/calico/v1/host/<n>/
config/<Name>``; any other name is selector-scoped and passed through as a v3 object.  One
key per *set* spec field (an unset field's key is simply absent), values stringified the way
the Go processor's ``fmt`` calls print them.  FelixConfiguration annotations
``config.projectcalico.org/<Name>`` add or override keys.
"""

from __future__ import annotations

__sans_io__ = True

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..gofmt import format_v
from . import keys
from .gojson import GoJSONError
from .golang import format_duration, parse_cidr_or_ip, parse_duration
from .goschema import CLUSTER_INFO_FIELDS, FELIX_CONFIG_FIELDS
from .gotypes import Port, Uint8OrString
from .passthrough import resource_kv
from .shape import maps, strs

log = logging.getLogger(__name__)

GLOBAL_NAME = "default"
NODE_PREFIX = "node."
ANNOTATION_PREFIX = "config.projectcalico.org/"


def _proto_ports(v: list[Mapping[str, Any]]) -> str | None:
    if not v:
        return "none"
    parts = []
    for pp in maps(v, "a protocol/port list"):
        proto = (pp.get("protocol") or "").lower()
        port = pp.get("port", 0)
        net = pp.get("net") or ""
        if net:
            n = parse_cidr_or_ip(net)
            # Calico wraps the net in brackets only when it parses as IPv6; the text is
            # copied as written.
            parts.append(f"{proto}:[{net}]:{port}" if n is not None and n.version == 6
                         else f"{proto}:{net}:{port}")
        else:
            parts.append(f"{proto}:{port}")
    return ",".join(parts)


def _route_table_range(v: Mapping[str, Any]) -> str:
    return f"{v.get('min', 0)}-{v.get('max', 0)}"


def _route_table_ranges(v: list[Mapping[str, Any]]) -> str:
    return ",".join(_route_table_range(r) for r in maps(v, "routeTableRanges"))


def _health_timeout_overrides(v: list[Mapping[str, Any]] | None) -> str | None:
    if not v:
        return None
    return ",".join(f"{h.get('name', '')}={format_duration(_dur(h.get('timeout')))}"
                    for h in maps(v, "healthTimeoutOverrides"))


# BPFConntrackTimeouts prints ``GoFieldName=value`` for each set field, in field order.
_CONNTRACK_FIELDS = (("CreationGracePeriod", "creationGracePeriod"),
                     ("TCPSynSent", "tcpSynSent"), ("TCPEstablished", "tcpEstablished"),
                     ("TCPFinsSeen", "tcpFinsSeen"), ("TCPResetSeen", "tcpResetSeen"),
                     ("UDPTimeout", "udpTimeout"), ("GenericTimeout", "genericTimeout"),
                     ("ICMPTimeout", "icmpTimeout"))


def _bpf_conntrack(v: Mapping[str, Any]) -> str:
    return ",".join(f"{go}={v[js]}" for go, js in _CONNTRACK_FIELDS if v.get(js) is not None)


_CONVERTERS: dict[str, Callable[[Any], str | None]] = {
    "FailsafeInboundHostPorts": _proto_ports,
    "FailsafeOutboundHostPorts": _proto_ports,
    "RouteTableRange": _route_table_range,
    "RouteTableRanges": _route_table_ranges,
    "HealthTimeoutOverrides": _health_timeout_overrides,
    "BPFConntrackTimeouts": _bpf_conntrack,
}


def _dur(v: Any) -> int:
    if v is None:
        return 0
    if not isinstance(v, str):
        raise GoJSONError(f"invalid duration {v!r}")
    try:
        return parse_duration(v)
    except ValueError as e:
        raise GoJSONError(str(e)) from None


def _stringify(go_type: str, timescale: str, v: Any) -> str | None:
    """``fmt``'s rendering of one (dereferenced) field value; None = unset."""
    t = go_type.lstrip("*")
    if t == "string":
        if not isinstance(v, str):
            raise GoJSONError(f"expected a string, got {v!r}")
        # A non-pointer empty string counts as unset; a pointer to "" is a value, but an
        # empty raw value reads as a deletion on the wire, so both are left out.
        return v or None
    if t == "bool":
        if not isinstance(v, bool):
            raise GoJSONError(f"expected a bool, got {v!r}")
        return "true" if v else "false"
    if t in ("int", "uint"):
        if isinstance(v, bool) or not isinstance(v, int):
            raise GoJSONError(f"expected an integer, got {v!r}")
        return str(v)
    if t == "Duration":
        # Duration.Seconds() (or whole ms + ns/1e6), Go integer division truncating to zero.
        ns = _dur(v)
        unit, scale = (1_000_000, 1e6) if timescale == "milliseconds" else (1_000_000_000, 1e9)
        whole = abs(ns) // unit * (-1 if ns < 0 else 1)
        return format_v(float(whole) + float(ns - whole * unit) / scale)
    if t == "[]string":
        return ",".join(strs(v, "a string list"))
    if t == "map":
        # Go iterates the map in random order; sorted here so the value is deterministic.
        return "".join(f"{k}={val}," for k, val in sorted((v or {}).items()))
    if t == "Port":
        return str(Port.parse(v))
    if t == "[]Port":
        return "[" + " ".join(str(Port.parse(p)) for p in v or []) + "]"
    if t == "DSCP":
        return str(Uint8OrString.parse(v))
    raise GoJSONError(f"no stringification for Go type {go_type}")


def _config_key(node: str, name: str, *, cluster_info: bool) -> str | None:
    if cluster_info and name == "DatastoreReady":
        return None if node else keys.READY_FLAG_KEY
    return keys.host_config_key(node, name) if node else keys.global_config_key(name)


def config_kvs(kind: str, key_name: str, obj: Mapping[str, Any]) -> list[tuple[str, bytes, str]]:
    """All KVs of a FelixConfiguration or ClusterInformation named ``key_name``."""
    if key_name == GLOBAL_NAME:
        node = ""
    elif key_name.startswith(NODE_PREFIX):
        node = key_name[len(NODE_PREFIX):]
    else:
        return [resource_kv(kind, obj, key_name=key_name)]
    cluster_info = kind == "ClusterInformation"
    fields = CLUSTER_INFO_FIELDS if cluster_info else FELIX_CONFIG_FIELDS
    spec = obj.get("spec") or {}
    overrides: dict[str, Any] = {}  # as the object has them; emit() checks
    if not cluster_info:
        for k, v in ((obj.get("metadata") or {}).get("annotations") or {}).items():
            if k.startswith(ANNOTATION_PREFIX):
                overrides[k[len(ANNOTATION_PREFIX):]] = v
    out: list[tuple[str, bytes, str]] = []

    def emit(name: str, value: str | bytes | None) -> None:
        if value is None or value == "":
            return
        try:
            key = _config_key(node, name, cluster_info=cluster_info)
        except keys.InvalidKeyError:
            return
        if key is not None:
            out.append((key, value.encode() if isinstance(value, str) else value, ""))

    for name, json_name, go_type, timescale in fields:
        if name == "-":
            continue
        if name in overrides:
            emit(name, overrides.pop(name))
            continue
        v = spec.get(json_name)
        if v is None:
            continue
        if cluster_info and name == "DatastoreReady":
            emit(name, "true" if v is True else "false")
        elif name in _CONVERTERS:
            emit(name, _CONVERTERS[name](v))
        else:
            emit(name, _stringify(go_type, timescale, v))
    for name in sorted(overrides):
        emit(name, overrides[name])
    return out
