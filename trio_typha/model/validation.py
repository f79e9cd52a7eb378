"""Typha's validation filter (``typha/pkg/calc/validation_filter.go``).

Every value that is a Go struct is validated before it reaches the snapshot cache: v1 values
with ``libcalico-go/lib/validator/v1``, v3 (``ResourceKey``) values with
``libcalico-go/lib/validator/v3``.  A value that fails is replaced by nil, which the cache
treats as a deletion (the update keeps its type, as Typha passes it through).  A v1
WorkloadEndpoint without an interface name is nulled too.  Raw config strings, the ready
flag, the host IP and profile label maps are not structs and are never validated.

Validation works on the serialized value (parsed back from JSON) against the Go struct
layout and its ``validate`` tags (:data:`.goschema.VALIDATE_TAGS`), applying
go-playground/validator's rules (``omitempty``, ``dive``, ``required``, ``gt``/``lte``...,
``oneof``, ``unique``) and Calico's custom tags and struct-level checks.  Not reproduced:
the CRD OpenAPI-schema pass of the v3 validator and the struct-level checks of
FelixConfiguration and BGPConfiguration specs (their field tags are applied); regular
expressions in ``regexp`` fields are checked with Python's engine.
"""

from __future__ import annotations

__sans_io__ = True

import base64
import binascii
import dataclasses
import enum
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..gofmt import fields
from . import selectors
from .gojson import Custom, Field, GoJSONError, Map, Ptr, RawJSON, Slice, Struct
from .golang import ip_version, parse_cidr, parse_cidr_or_ip, parse_duration, parse_ip, parse_mac
from .goschema import ROOTS, VALIDATE_TAGS
from .goschema import T as GO_TYPES
from .gotypes import PORT, PROTOCOL, Port, Uint8OrString, protocol_supports_ports
from .jsonload import loads
from .kv import SerializedUpdate

log = logging.getLogger(__name__)


class _Invalid(Exception):
    """Raised on the first validation failure of a value."""


def _fail(why: str) -> None:
    raise _Invalid(why)


# --------------------------------------------------------------------------------------------
# Kubernetes name / label rules

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_KEY = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _is_qualified_name(k: str) -> bool:
    parts = k.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix):
            return False
    else:
        name = parts[0]
    return 0 < len(name) <= 63 and bool(_LABEL_KEY.fullmatch(name))


def _is_label_value(v: str) -> bool:
    return len(v) <= 63 and (v == "" or bool(_LABEL_KEY.fullmatch(v)))


def _is_port_name(s: str) -> bool:
    return (0 < len(s) <= 15 and bool(re.fullmatch(r"[-a-z0-9]+", s))
            and bool(re.search(r"[a-z]", s)) and "--" not in s
            and not s.startswith("-") and not s.endswith("-"))


# --------------------------------------------------------------------------------------------
# Field validators (tag name -> predicate on the JSON value)

def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _rx(pattern: str) -> Callable[[Any], bool]:
    compiled = re.compile(pattern)
    return lambda v: bool(compiled.fullmatch(_str(v)))


def _is_ip(v: Any) -> bool:
    return parse_ip(_str(v)) is not None


def _is_ipv4(v: Any) -> bool:
    ip = parse_ip(_str(v))
    return ip is not None and len(ip) == 4


def _is_ipv6(v: Any) -> bool:
    ip = parse_ip(_str(v))
    return ip is not None and len(ip) == 16


def _cidr_or_ip_addr(s: str) -> tuple[bytes, Any] | None:
    """(address part, network) of ``cnet.ParseCIDROrIP``."""
    net = parse_cidr_or_ip(s)
    if net is None:
        return None
    ip = parse_ip(s.partition("/")[0]) if "/" in s else parse_ip(s)
    return (ip if ip is not None else net.ip), net


def _is_network(v: Any, version: int | None = None) -> bool:
    parsed = _cidr_or_ip_addr(_str(v))
    if parsed is None:
        return False
    ip, net = parsed
    return ip == net.ip and (version is None or ip_version(ip) == version)


def _is_cidr(v: Any, version: int | None = None) -> bool:
    parsed = _cidr_or_ip_addr(_str(v))
    return parsed is not None and (version is None or ip_version(parsed[0]) == version)


def _is_ip_port(v: Any) -> bool:
    s = _str(v)
    if not s:
        return False
    host = s
    if re.fullmatch(r"(\d+).(\d+).(\d+).(\d+):(\d+)", s) or \
            re.fullmatch(r"\[[0-9a-fA-F:.]+\]:(\d+)", s):
        host, _, port = s.rpartition(":")
        host = host.strip("[]")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            return False
    return parse_ip(host) is not None


def _is_wireguard_key(v: Any) -> bool:
    try:
        return len(base64.b64decode(_str(v), validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def _is_key_value_list(v: Any) -> bool:
    s = _str(v)
    if not s.strip():
        return True
    return all(not item or re.fullmatch(r"\s*(\w+)=(.*)", item, re.S)
               for item in s.split(","))


def _is_regexp(v: Any) -> bool:
    try:
        re.compile(_str(v))
    except re.error:
        return False
    return True


def _is_selector(v: Any) -> bool:
    return selectors.validate(_str(v))


def _labels_ok(v: Any) -> bool:
    return all(_is_qualified_name(k) and _is_label_value(_str(x)) for k, x in (v or {}).items())


def _bpf_log_filters(v: Any) -> bool:
    return isinstance(v, Mapping) and all(
        re.fullmatch(r"[a-zA-Z0-9_.-]{1,15}", k) for k in v)


def _slice_all(rx: str) -> Callable[[Any], bool]:
    compiled = re.compile(rx)
    return lambda v: all(compiled.fullmatch(_str(x)) for x in v or [])


_IFACE = r"[a-zA-Z0-9_.-]{1,15}"
_IFACE_FILTER = r"[a-zA-Z0-9:._+-]{1,15}"

V3_FIELD: dict[str, Callable[[Any], bool]] = {
    "action": _rx("Allow|Deny|Log|Pass"),
    "interface": lambda v: v == "*" or bool(re.fullmatch(_IFACE, _str(v))),
    "bgpFilterInterface": lambda v: v == "*" or bool(re.fullmatch(r"[a-zA-Z0-9_.*-]{1,15}",
                                                                  _str(v))),
    "bgpFilterPrefixLengthV4": lambda v: bool(re.fullmatch(r"[0-9]|[12][0-9]|3[0-2]", str(v))),
    "bgpFilterPrefixLengthV6": lambda v: bool(
        re.fullmatch(r"[0-9]|[1-9][0-9]|1[0-1][0-9]|12[0-8]", str(v))),
    "ignoredInterface": lambda v: v != "*" and bool(re.fullmatch(r"[a-zA-Z0-9_.*-]{1,15}",
                                                                 _str(v))),
    "name": _rx(_DNS_SUBDOMAIN.pattern),
    "selector": _is_selector,
    "labels": _labels_ok,
    "ipVersion": lambda v: v in (4, 6),
    "logLevel": _rx("Trace|Debug|Info|Warning|Error|Fatal"),
    "bpfLogLevel": _rx("Debug|Info|Off"),
    "bpfLogFilters": _bpf_log_filters,
    "bpfServiceMode": _rx("Tunnel|DSR"),
    "dropAcceptReturn": _rx("Drop|Accept|Return"),
    "acceptReturn": _rx("Accept|Return"),
    "dropReject": _rx("Drop|Reject"),
    "portName": lambda v: _is_port_name(_str(v)),
    "ifaceFilter": _rx(_IFACE_FILTER),
    "ifaceFilterSlice": _slice_all(_IFACE_FILTER),
    "interfaceSlice": _slice_all(_IFACE),
    "mac": lambda v: parse_mac(_str(v)) is not None,
    "iptablesBackend": lambda v: v in ("", "Auto", "NFT", "Legacy"),
    "keyValueList": _is_key_value_list,
    "prometheusHost": _rx(r"[a-zA-Z0-9:._+-]{1,64}"),
    "ipType": _rx("CalicoNodeIP|InternalIP|ExternalIP"),
    "sourceAddress": _rx("UseNodeIP|None"),
    "regexp": _is_regexp,
    "routeSource": _is_regexp,
    "wireguardPublicKey": _is_wireguard_key,
    "IP:port": _is_ip_port,
    "reachableBy": lambda v: not v or parse_ip(_str(v)) is not None,
    "filterAction": _rx("Accept|Reject"),
    "matchOperator": _rx("Equal|In|NotEqual|NotIn"),
    "netv4": lambda v: _is_network(v, 4),
    "netv6": lambda v: _is_network(v, 6),
    "net": _is_network,
    "ip": _is_ip,
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "cidrv4": lambda v: _is_cidr(v, 4),
    "cidrv6": lambda v: _is_cidr(v, 6),
    "cidr": _is_cidr,
    "cidrs": lambda v: all(_is_cidr(x) for x in v or []),
}

V1_FIELD: dict[str, Callable[[Any], bool]] = {
    **V3_FIELD,
    "action": _rx("allow|deny|log|pass"),
    "name": _rx(r"[a-zA-Z0-9_.-]{1,128}"),
    "namespacedName": _rx(r"[a-zA-Z0-9_./-]{1,128}"),
    "tag": _rx(r"[a-zA-Z0-9_.-]{1,128}"),
    "labels": lambda v: all(
        re.fullmatch(r"[a-zA-Z0-9_./-]{1,512}", k)
        and re.fullmatch(r"[a-zA-Z0-9]?([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?", _str(x))
        for k, x in (v or {}).items()),
    "ipIpMode": _rx("always|cross-subnet|"),
}


# --------------------------------------------------------------------------------------------
# Struct-level validators


def _protocol(p: Uint8OrString, names: str) -> None:
    n = p.num_value()
    if n is not None:
        if n == 0:
            _fail("protocol number invalid")
    elif not re.fullmatch(names, p.str):
        _fail("protocol name invalid")


def _port(v: Any) -> None:
    try:
        p = Port.parse(v)
    except GoJSONError:
        _fail(f"invalid port {v!r}")
        return
    if p.name:
        if not _is_port_name(p.name):
            _fail("invalid port name")
    elif p.min < 1 or p.max < 1:
        _fail("port number must be between 1 and 65535")


def _all_named(ports: Any) -> bool:
    return all(Port.parse(p).name for p in ports or [])


def _ports_vs_protocol(protocol: Any, port_lists: list[Any]) -> None:
    if protocol is None:
        if not all(_all_named(ps) for ps in port_lists):
            _fail("rules with numeric port or port range must set protocol to TCP or UDP or "
                  "SCTP")
    elif not protocol_supports_ports(Uint8OrString.parse(protocol)) and any(port_lists):
        _fail("rules that specify ports must set protocol to TCP or UDP or SCTP")


def _v1_rule(r: Mapping[str, Any]) -> None:
    _ports_vs_protocol(r.get("protocol"), [r.get("src_ports"), r.get("!src_ports"),
                                           r.get("dst_ports"), r.get("!dst_ports")])


def _v1_endpoint_port(p: Mapping[str, Any]) -> None:
    if str(Uint8OrString.parse(p.get("protocol"))) not in ("tcp", "udp", "sctp"):
        _fail("EndpointPort protocol must be 'tcp' or 'udp' or 'sctp'")


def _object_meta(md: Mapping[str, Any]) -> None:
    name = md.get("name") or ""
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        _fail(f"invalid name {name!r}")
    annotations = md.get("annotations") or {}
    size = 0
    for k, v in annotations.items():
        if not _is_qualified_name(k.lower()):
            _fail(f"invalid annotation key {k!r}")
        size += len(k.encode()) + len(_str(v).encode())
    if size > 256 * 1024:
        _fail("annotations too large")
    if not _labels_ok(md.get("labels")):
        _fail("invalid labels")


def _rule_metadata(md: Mapping[str, Any]) -> None:
    _object_meta({"name": "x", "annotations": md.get("annotations")})


_TCP = "TCP"


def _v3_rule(r: Mapping[str, Any]) -> None:
    src = r.get("source") or {}
    dst = r.get("destination") or {}
    protocol = r.get("protocol")
    _ports_vs_protocol(protocol, [src.get("ports"), src.get("notPorts"), dst.get("ports"),
                                  dst.get("notPorts")])
    proto = Uint8OrString.parse(protocol) if protocol is not None else None
    not_proto = Uint8OrString.parse(r["notProtocol"]) if r.get("notProtocol") is not None \
        else None
    if r.get("http") is not None and proto is not None and \
            (proto.num is not None or proto.str != _TCP):
        _fail("rules that specify HTTP fields must set protocol to TCP or empty")
    is_icmp = proto is not None and proto.num is None and proto.str in ("ICMP", "ICMPv6")
    if r.get("icmp") is not None and not is_icmp:
        _fail("rules that specify ICMP fields must set protocol to ICMP")
    ip_ver = r.get("ipVersion")
    for p in (proto, not_proto):
        if p is not None and p.num is None:
            if p.str == "ICMP" and ip_ver is not None and ip_ver != 4:
                _fail("must set ipversion to '4' with protocol icmp")
            if p.str == "ICMPv6" and ip_ver is not None and ip_ver != 6:
                _fail("must set ipversion to '6' with protocol icmpv6")
    seen4 = seen6 = False
    for nets, negated in ((src.get("nets"), False), (src.get("notNets"), True),
                          (dst.get("nets"), False), (dst.get("notNets"), True)):
        v4 = v6 = False
        for n in nets or []:
            net = parse_cidr(n)
            if net is None:
                _fail(f"invalid CIDR {n!r}")
                continue
            v4 = v4 or net.version == 4
            v6 = v6 or net.version == 6
            if negated and ((net.version == 4 and n == "0.0.0.0/0")
                            or (net.version == 6 and net.prefix == 0)):
                _fail("catch-all CIDR in negation")
        if ip_ver is not None and ((v4 and ip_ver != 4) or (v6 and ip_ver != 6)):
            _fail("rule IP version doesn't match CIDR version")
        if (v4 and seen6) or (v6 and seen4) or (v4 and v6):
            _fail("rule contains both IPv4 and IPv6 CIDRs")
        seen4, seen6 = seen4 or v4, seen6 or v6
    if r.get("action") != "Allow" and r.get("http") is not None:
        _fail("HTTP match only valid for Allow rules")
    if dst.get("services") is not None and (dst.get("ports") or dst.get("notPorts")):
        _fail("cannot specify ports with a service selector")


def _entity_rule(er: Mapping[str, Any]) -> None:
    if "global()" in (er.get("selector") or ""):
        _fail("global() can only be used in an EntityRule namespaceSelector")
    ns_sel = er.get("namespaceSelector") or ""
    if "global(" in ns_sel and ns_sel != "global()":
        try:
            tokens = selectors.tokenize(ns_sel)
        except selectors.SelectorError:
            tokens = []
        if len(tokens) != 2 or tokens[0][0] != selectors.GLOBAL:
            _fail("global() cannot be combined with other selectors")
    svc = er.get("services")
    if svc is not None:
        if not svc.get("name"):
            _fail("must specify a service name")
        if ns_sel or er.get("selector") or er.get("notSelector") or \
                er.get("serviceAccounts") is not None or er.get("nets") or er.get("notNets"):
            _fail("Services cannot be combined with other entity matches")


def _icmp(f: Mapping[str, Any]) -> None:
    if f.get("code") is not None and f.get("type") is None:
        _fail("ICMP code specified without an ICMP type")


def _http(h: Mapping[str, Any]) -> None:
    methods = h.get("methods") or []
    if len(set(methods)) != len(methods):
        _fail("duplicate HTTP methods")
    for p in h.get("paths") or []:
        exact, prefix = p.get("exact") or "", p.get("prefix") or ""
        if exact and prefix:
            _fail("both exact and prefix set")
        v = exact or prefix
        if not v or not v.startswith("/") or any(c in v for c in "? #"):
            _fail(f"invalid HTTP path {v!r}")


def _node_spec(spec: Mapping[str, Any]) -> None:
    bgp = spec.get("bgp")
    if bgp is not None and not any(bgp.get(k) for k in bgp):
        _fail("Spec.BGP should not be empty")


def _bgp_peer_spec(ps: Mapping[str, Any]) -> None:
    peer_ip, peer_sel = ps.get("peerIP") or "", ps.get("peerSelector") or ""
    local_sel, asn = ps.get("localWorkloadSelector") or "", ps.get("asNumber") or 0
    if ps.get("node") and ps.get("nodeSelector"):
        _fail("Node must be empty when NodeSelector is specified")
    if peer_ip and peer_sel:
        _fail("PeerIP must be empty when PeerSelector is specified")
    if asn and peer_sel:
        _fail("ASNumber must be empty when PeerSelector is specified")
    if not asn and local_sel:
        _fail("ASNumber must be set when LocalWorkloadSelector is specified")
    if (peer_ip or peer_sel) and local_sel:
        _fail("PeerIP/PeerSelector must be empty when LocalWorkloadSelector is specified")
    reachable = ps.get("reachableBy") or ""
    if reachable:
        if not peer_ip:
            _fail("ReachableBy must be empty when PeerIP is empty")
        r = parse_ip(reachable)
        host = peer_ip.rpartition(":")[0].strip("[]") if re.fullmatch(
            r"(\d+).(\d+).(\d+).(\d+):(\d+)|\[[0-9a-fA-F:.]+\]:(\d+)", peer_ip) else peer_ip
        p = parse_ip(host)
        if r is None or p is None or len(r) != len(p):
            _fail("ReachableBy and PeerIP mismatch")
    if ps.get("keepOriginalNextHop") and ps.get("nextHopMode") is not None:
        _fail("KeepOriginalNextHop must not be set with NextHopMode")


def _bgp_filter_rule(r: Mapping[str, Any]) -> None:
    cidr, op = r.get("cidr") or "", r.get("matchOperator") or ""
    if bool(cidr) != bool(op):
        _fail("CIDR and MatchOperator go together")
    if not cidr and r.get("prefixLength") is not None:
        _fail("CIDR cannot be empty when PrefixLength is not")


def _bgp_filter_operation(op: Mapping[str, Any]) -> None:
    if sum(op.get(k) is not None for k in ("addCommunity", "prependASPath", "setPriority")) != 1:
        _fail("exactly one operation must be set")


def _route_table_range(r: Mapping[str, Any]) -> None:
    lo, hi = r.get("min", 0), r.get("max", 0)
    if not (lo >= 1 and hi >= lo and hi <= 250):
        _fail("must be a range of route table indices within 1..250")


def _route_table_id_range(r: Mapping[str, Any]) -> None:
    lo, hi = r.get("min", 0), r.get("max", 0)
    # (Calico's reserved-table check is disabled in v3.32.1; the size limit lives in the
    # FelixConfiguration spec check, which is not reproduced.)
    if lo > hi or lo <= 0 or hi > 0xFFFFFFFF:
        _fail("invalid route table ID range")


def _proto_port(pp: Mapping[str, Any]) -> None:
    if pp.get("protocol") not in ("TCP", "UDP", "SCTP"):
        _fail("protocol must be 'TCP' or 'UDP' or 'SCTP'")


def _health_timeout_override(h: Mapping[str, Any]) -> None:
    if not re.fullmatch(r"[a-zA-Z0-9_ -]+", _str(h.get("name"))):
        _fail("invalid health timeout override name")
    try:
        if parse_duration(_str(h.get("timeout")) or "0") < 0:
            _fail("negative timeout")
    except ValueError:
        _fail("invalid timeout")


def _v3_endpoint_port(p: Mapping[str, Any]) -> None:
    if not protocol_supports_ports(Uint8OrString.parse(p.get("protocol"))):
        _fail("EndpointPort protocol does not support ports")


V3_STRUCT: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "meta.ObjectMeta": _object_meta,
    "v3.Rule": _v3_rule,
    "v3.EntityRule": _entity_rule,
    "v3.ICMPFields": _icmp,
    "v3.HTTPMatch": _http,
    "v3.RuleMetadata": _rule_metadata,
    "internal.NodeSpec": _node_spec,
    "v3.BGPPeerSpec": _bgp_peer_spec,
    "v3.BGPFilterRuleV4": _bgp_filter_rule,
    "v3.BGPFilterRuleV6": _bgp_filter_rule,
    "v3.BGPFilterOperation": _bgp_filter_operation,
    "v3.RouteTableRange": _route_table_range,
    "v3.RouteTableIDRange": _route_table_id_range,
    "v3.ProtoPort": _proto_port,
    "v3.HealthTimeoutOverride": _health_timeout_override,
    "v3.EndpointPort": _v3_endpoint_port,
}

V1_STRUCT: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "v1.Rule": _v1_rule,
    "v1.EndpointPort": _v1_endpoint_port,
}


# --------------------------------------------------------------------------------------------
# The tag engine


@dataclasses.dataclass(frozen=True, eq=False)
class _Rules:
    """One validator's rules (v1 or v3): its field tags, struct-level checks and protocol
    names."""

    fields: Mapping[str, Callable[[Any], bool]]
    structs: Mapping[str, Callable[[Mapping[str, Any]], None]]
    protocol_names: str


class _Validator:
    """One set of :class:`_Rules` applied with the memos of one owner: what it has worked
    out of the Go types (:meth:`_info`, :meth:`_plan`) and the verdicts of flat structs."""

    def __init__(self, rules: _Rules) -> None:
        self.fields = rules.fields
        self.structs = rules.structs
        self.protocol_names = rules.protocol_names
        self._types: dict[Any, _TypeInfo] = {}
        self._plans: dict[Struct, _Plan] = {}
        # The verdicts of flat structs (None: valid, else the failure), by struct type and
        # field values; cleared when full.
        self._verdicts: dict[tuple[Any, ...], str | None] = {}

    def check(self, t: Any, v: Any) -> None:
        """Descend into ``v`` (of Go type ``t``) running struct-level validators.  Like
        go-playground, slice and map elements are only visited under a ``dive`` tag."""
        if v is None:
            return
        info = self._info(t)
        if info.shape is _Shape.STRUCT:
            self._struct(info.base, v)
        elif info.shape is _Shape.PORT:
            _port(v)
        elif info.shape is _Shape.PROTOCOL:
            _protocol(Uint8OrString.parse(v), self.protocol_names)

    def _struct(self, t: Struct, v: Mapping[str, Any]) -> None:
        if type(v) is dict and t in _LEAVES:
            # Small flat structs (ports, NATs) repeat across thousands of values: their
            # verdict depends only on the field values, their types and the validator.
            items = tuple(v.items())
            if all(type(x) in _MEMO_SCALARS for _, x in items):
                key = (t, tuple((k, type(x), x) for k, x in items))
                verdict = self._verdicts.get(key, _UNKNOWN)
                if verdict is _UNKNOWN:
                    try:
                        self._struct_walk(t, v)
                    except _Invalid as exc:
                        verdict = str(exc)
                    else:
                        verdict = None
                    if len(self._verdicts) >= _VERDICTS_MAX:
                        self._verdicts.clear()
                    self._verdicts[key] = verdict
                if verdict is not None:
                    raise _Invalid(verdict)
                return
        self._struct_walk(t, v)

    def _struct_walk(self, t: Struct, v: Mapping[str, Any]) -> None:
        if t.fields:
            get = v.get  # a value that is not an object fails here, whatever its fields
            for f, tags in self._plan(t):
                value = get(f.name)
                if tags is not None:
                    self._tags(f.name, f.type, tags, value)
                else:
                    self.check(f.type, value)
        fn = self.structs.get(t.name)
        if fn is not None:
            fn(v)

    def _tags(self, name: str, t: Any, tags: list[str], value: Any) -> None:
        info = self._info(t)
        if info.struct_kind:
            # go-playground runs no tags on a struct-kind field (all our marshalers are
            # structs in Go); it validates the struct itself.
            if value is None and "omitempty" not in tags and "required" in tags:
                _fail(f"{name} is required")
            self.check(t, value)
            return
        for i, tag in enumerate(tags):
            if tag == "omitempty":
                if _is_zero(value):
                    return
            elif tag == "required":
                if _is_zero(value):
                    _fail(f"{name} is required")
            elif tag == "dive":
                rest = tags[i + 1:]
                items = (value.values() if type(value) is dict or isinstance(value, Mapping)
                         else value or [])
                elem = info.elem
                for item in items:
                    if rest:
                        self._tags(name, elem, rest, item)
                    else:
                        self.check(elem, item)
                return
            elif tag == "unique":
                items = list(value or [])
                if len({json.dumps(x, sort_keys=True) for x in items}) != len(items):
                    _fail(f"{name} has duplicates")
            elif "=" in tag and tag.split("=", 1)[0] in _COMPARE:
                op, arg = tag.split("=", 1)
                if value is not None and not _COMPARE[op](_size(value), float(arg)):
                    _fail(f"{name} fails {tag}")
            elif tag.startswith("oneof="):
                if str(value) not in tag[len("oneof="):].split():
                    _fail(f"{name} is not one of {tag[6:]}")
            else:
                fn = self.fields.get(tag)
                if fn is not None and not fn(value):
                    _fail(f"{name} fails {tag}: {value!r}")
        self.check(t, value)

    def _info(self, t: Any) -> _TypeInfo:
        """What the validator needs of the Go type ``t``, worked out once per type object
        (the gojson types derive from ``abc.ABC``, whose isinstance checks are slow on this
        path)."""
        info = self._types.get(t)
        if info is None:
            base = t
            while isinstance(base, Ptr):
                base = base.elem
            shape = (_Shape.STRUCT if isinstance(base, Struct) else _Shape.PORT
                     if base is PORT else _Shape.PROTOCOL if base is PROTOCOL
                     else _Shape.NOTHING)
            info = self._types[t] = _TypeInfo(
                shape, base, isinstance(base, (Struct, Custom, RawJSON)),
                base.elem if isinstance(base, (Slice, Map)) else base)
        return info

    def _plan(self, t: Struct) -> _Plan:
        """The fields of ``t`` that :meth:`_struct` must visit, with their tags (None:
        none), in declaration order.  A field without tags whose type :meth:`check` never
        descends into (strings, numbers, slices and maps not under ``dive``, marshalers
        other than ports and protocols) cannot fail and is left out."""
        plan = self._plans.get(t)
        if plan is None:
            tags = VALIDATE_TAGS.get(t.name, {})
            plan = []
            for f in t.fields:
                tag = tags.get(f.name)
                if tag:
                    plan.append((f, tag.split(",")))
                elif self._info(f.type).shape is not _Shape.NOTHING:
                    plan.append((f, None))
            self._plans[t] = plan
        return plan


# Flat-struct verdicts are remembered for values of these types only.  Floats are left out:
# -0.0 == 0.0 but their repr, which a failure message may quote, differs.
_MEMO_SCALARS = frozenset({str, int, bool, type(None)})
_VERDICTS_MAX = 4096
_UNKNOWN = object()


class _Shape(enum.Enum):
    """What :meth:`_Validator.check` does with a Go type (pointers unwrapped)."""

    STRUCT = "struct"
    PORT = "port"
    PROTOCOL = "protocol"
    NOTHING = "nothing"


class _TypeInfo(NamedTuple):
    shape: _Shape
    base: Any  # the type without its pointers
    struct_kind: bool  # go-playground runs no tags on it (our marshalers are Go structs)
    elem: Any  # what ``dive`` visits: a slice's or map's element type, else ``base``


_Plan = list[tuple[Field, "list[str] | None"]]


def _flat(t: Struct) -> bool:
    """Every field of ``t`` is a scalar or a string-like marshaler (no struct, slice, map
    or pointer): ``t``'s validation depends on its field values only."""
    return bool(t.fields) and all(
        not isinstance(f.type, (Struct, Slice, Map, Ptr, RawJSON)) for f in t.fields)


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
    "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b,
}


def _size(v: Any) -> float:
    """go-playground compares numbers by value and strings/slices/maps by length."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return float(len(v))


def _is_zero(v: Any) -> bool:
    return v is None or v == "" or v is False or (isinstance(v, (int, float)) and v == 0)


_V1 = _Rules(V1_FIELD, V1_STRUCT, r"tcp|udp|icmp|icmpv6|sctp|udplite")
_V3 = _Rules(V3_FIELD, V3_STRUCT, r"TCP|UDP|ICMP|ICMPv6|SCTP|UDPLite")

# v3 passthrough plural → schema root.
_V3_ROOTS = {"nodes": "Node", "profiles": "Profile", "bgpconfigurations": "BGPConfiguration",
             "bgppeers": "BGPPeer", "bgpfilters": "BGPFilter",
             "caliconodestatuses": "CalicoNodeStatus",
             "felixconfigurations": "FelixConfiguration",
             "clusterinformations": "ClusterInformation", "livemigrations": "LiveMigration",
             "kubernetesservice": "Service", "kubernetesendpointslices": "EndpointSlice",
             "ippools": "IPPool", "tiers": "Tier", "hostendpoints": "HostEndpoint",
             "workloadendpoints": "WorkloadEndpoint", "networksets": "NetworkSet",
             "globalnetworksets": "GlobalNetworkSet"}


def _classify(key: str) -> tuple[_Rules, Struct] | None:
    """The validator's rules and Go type of the value stored under ``key``; None when the value is
    not a struct (raw strings, booleans, IPs, label maps)."""
    parts = key.split("/")
    if key.startswith("/calico/resources/v3/projectcalico.org/") and len(parts) >= 7:
        root = _V3_ROOTS.get(parts[5])
        return (_V3, ROOTS[root]) if root else None
    if key.startswith("/calico/v1/policy/"):
        if parts[4] == "tier":
            return _V1, ROOTS["v1.Tier"]
        if parts[4] == "profile":
            return (_V1, ROOTS["v1.ProfileRules"]) if parts[-1] == "rules" else None
        return _V1, ROOTS["v1.Policy"]
    if key.startswith("/calico/v1/host/"):
        if "/workload/" in key:
            return _V1, ROOTS["v1.WorkloadEndpoint"]
        if len(parts) > 5 and parts[5] == "endpoint":
            return _V1, ROOTS["v1.HostEndpoint"]
        if parts[-1] == "wireguard":
            return _V1, ROOTS["v1.Wireguard"]
        return None
    if key.startswith("/calico/v1/netset/"):
        return _V1, ROOTS["v1.NetworkSet"]
    if key.startswith("/calico/v1/ipam/"):
        return _V1, ROOTS["v1.IPPool"]
    if key.startswith("/calico/ipam/v2/assignment/"):
        return _V1, ROOTS["v1.AllocationBlock"]
    if key.startswith("/calico/ipam/v2/"):
        return _V1, ROOTS["v1.BlockAffinity"]
    return None


class ValidationFilter:
    """Typha's validation filter with its memos: one per owner (the daemon's pipelines
    share one), so what it remembers lives and goes with that owner.

    Called with a batch of updates it returns the batch with failing values nulled (the
    pipeline's ``Validator``); :meth:`error` says why one value would be.
    """

    def __init__(self) -> None:
        self._validators = {_V1: _Validator(_V1), _V3: _Validator(_V3)}

    def error(self, key: str, value: bytes) -> str | None:
        """Why Typha's validation filter would null this value, or None if it passes."""
        target = _classify(key)
        if target is None:
            return None
        rules, root = target
        try:
            decoded = loads(value)
        except ValueError as e:
            return f"value is not JSON: {e}"
        if not isinstance(decoded, dict):
            return "value is not an object"
        if root.name == "v1.WorkloadEndpoint" and not decoded.get("name"):
            return "missing name"
        try:
            self._validators[rules].check(root, decoded)
        except _Invalid as e:
            return str(e)
        except ValueError as e:
            return f"malformed value: {e}"
        return None

    def __call__(self, updates: list[SerializedUpdate]) -> list[SerializedUpdate]:
        """The validation filter over one batch: failing values become nil (deletions)."""
        out: list[SerializedUpdate] = []
        for u in updates:
            if u.value:
                why = self.error(u.key, u.value)
                if why is not None:
                    log.warning("Validation failed; treating as missing: %s", why,
                                extra=fields(key=str(u.key)))
                    u = dataclasses.replace(u, value=None, v3_resource_version="")
            out.append(u)
        return out


_LEAVES = frozenset(t for t in GO_TYPES.values() if _flat(t))
