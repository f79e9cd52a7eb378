"""Kubernetes Node -> Calico v3 Node, as Calico's KDD backend derives it.

Mirrors libcalico-go v3.32.1 ``K8sNodeToCalico`` (``k8s/resources/node.go``): the BGP,
tunnel, wireguard and interface settings that calico/node records as
``projectcalico.org/*`` annotations become the v3 Node spec (each validated; invalid
values are dropped), Kubernetes labels are merged over the Calico labels Calico keeps in
an annotation, and the node's addresses and pod CIDRs are copied over.  Keyed by a
ResourceKey of kind ``Node`` and the node name; revision = the node's
``resourceVersion`` (also kept in ``metadata.resourceVersion``, as Calico does).
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from .golang import IPNet, format_ip, ip_version, parse_cidr, parse_cidr_or_ip, parse_ip, parse_mac
from .k8s_meta import (
    CALICO_API_VERSION,
    ORCHESTRATOR_K8S,
    ConversionError,
    go_marshal_string_map,
    go_time,
    go_unmarshal,
    go_unmarshal_string_map,
    mapping,
    sorted_map,
    str_or_empty,
)
from .shape import as_list

NODE_KIND = "Node"

ANNOTATION_IPV4_ADDRESS = "projectcalico.org/IPv4Address"
ANNOTATION_IPV6_ADDRESS = "projectcalico.org/IPv6Address"
ANNOTATION_AS_NUMBER = "projectcalico.org/ASNumber"
ANNOTATION_RR_CLUSTER_ID = "projectcalico.org/RouteReflectorClusterID"
ANNOTATION_IPIP_TUNNEL_ADDR = "projectcalico.org/IPv4IPIPTunnelAddr"
ANNOTATION_IPV4_VXLAN_TUNNEL_ADDR = "projectcalico.org/IPv4VXLANTunnelAddr"
ANNOTATION_VXLAN_TUNNEL_MAC = "projectcalico.org/VXLANTunnelMACAddr"
ANNOTATION_IPV6_VXLAN_TUNNEL_ADDR = "projectcalico.org/IPv6VXLANTunnelAddr"
ANNOTATION_VXLAN_TUNNEL_MAC_V6 = "projectcalico.org/VXLANTunnelMACAddrV6"
ANNOTATION_WIREGUARD_IPV4_ADDR = "projectcalico.org/IPv4WireguardInterfaceAddr"
ANNOTATION_WIREGUARD_IPV6_ADDR = "projectcalico.org/IPv6WireguardInterfaceAddr"
ANNOTATION_WIREGUARD_PUBLIC_KEY = "projectcalico.org/WireguardPublicKey"
ANNOTATION_WIREGUARD_PUBLIC_KEY_V6 = "projectcalico.org/WireguardPublicKeyV6"
ANNOTATION_INTERFACES = "projectcalico.org/Interfaces"
ANNOTATION_KUBE_LABELS = "projectcalico.org/kube-labels"
ANNOTATION_CALICO_LABELS = "projectcalico.org/labels"
ANNOTATION_CALICO_ANNOTATIONS = "projectcalico.org/annotations"


def node_to_calico_node(node: Mapping[str, Any], *, use_pod_cidr: bool = False
                        ) -> dict[str, Any]:
    """The v3 Node Calico's KDD backend derives from a Kubernetes Node.

    ``use_pod_cidr`` is Calico's ``USE_POD_CIDR`` (host-local IPAM): then a node with a
    ``spec.podCIDR`` gets its IPIP tunnel address (and, if it has a wireguard public key,
    its wireguard IPv4 address) computed from that CIDR instead of the annotations.
    Raises ``ConversionError`` if that pod CIDR does not parse (Calico fails there too).
    """
    meta = mapping(node.get("metadata"))
    spec = mapping(node.get("spec"))
    annotations = {k: str_or_empty(v) for k, v in mapping(meta.get("annotations")).items()}
    name = str_or_empty(meta.get("name"))

    labels, calico_annotations = _metadata_from_annotations(annotations)
    # Kubernetes labels win over Calico's own; an empty label map reaches Calico as nil.
    k8s_labels = {k: str_or_empty(v) for k, v in mapping(meta.get("labels")).items()}
    if k8s_labels:
        labels = {**(labels or {}), **k8s_labels}
    calico_annotations = dict(calico_annotations or {})
    calico_annotations[ANNOTATION_KUBE_LABELS] = go_marshal_string_map(k8s_labels or None)

    def annotation(key: str, valid: Any) -> str:
        value = annotations.get(key, "")
        return value if value and valid(value) else ""

    bgp: dict[str, Any] = {}
    as_number = _as_number(annotations[ANNOTATION_AS_NUMBER]) \
        if ANNOTATION_AS_NUMBER in annotations else None
    if as_number is not None:
        bgp["asNumber"] = as_number
    ipv4_address = annotation(ANNOTATION_IPV4_ADDRESS, _is_cidr_v4)
    ipv6_address = annotation(ANNOTATION_IPV6_ADDRESS, _is_cidr_v6)
    if ipv4_address:
        bgp["ipv4Address"] = ipv4_address
    if ipv6_address:
        bgp["ipv6Address"] = ipv6_address

    wireguard: dict[str, str] = {}
    pod_cidr = str_or_empty(spec.get("podCIDR"))
    if use_pod_cidr and pod_cidr:
        tunnel_addr = _static_tunnel_address(pod_cidr)
        if tunnel_addr:
            bgp["ipv4IPIPTunnelAddr"] = tunnel_addr
        if annotations.get(ANNOTATION_WIREGUARD_PUBLIC_KEY) and tunnel_addr:
            wireguard["interfaceIPv4Address"] = tunnel_addr
    else:
        ipip = annotation(ANNOTATION_IPIP_TUNNEL_ADDR, _is_network_v4)
        if ipip:
            bgp["ipv4IPIPTunnelAddr"] = ipip
        wg4 = annotation(ANNOTATION_WIREGUARD_IPV4_ADDR, _is_network_v4)
        wg6 = annotation(ANNOTATION_WIREGUARD_IPV6_ADDR, _is_network_v6)
        if wg4:
            wireguard["interfaceIPv4Address"] = wg4
        if wg6:
            wireguard["interfaceIPv6Address"] = wg6
    rr_cluster_id = annotation(ANNOTATION_RR_CLUSTER_ID, _is_network_v4)
    if rr_cluster_id:
        bgp["routeReflectorClusterID"] = rr_cluster_id

    calico_spec: dict[str, Any] = {}
    if bgp:
        calico_spec["bgp"] = bgp
    for field, key, valid in (
        ("ipv4VXLANTunnelAddr", ANNOTATION_IPV4_VXLAN_TUNNEL_ADDR, _is_network_v4),
        ("vxlanTunnelMACAddr", ANNOTATION_VXLAN_TUNNEL_MAC, parse_mac),
        ("ipv6VXLANTunnelAddr", ANNOTATION_IPV6_VXLAN_TUNNEL_ADDR, _is_network_v6),
        ("vxlanTunnelMACAddrV6", ANNOTATION_VXLAN_TUNNEL_MAC_V6, parse_mac),
    ):
        value = annotation(key, valid)
        if value:
            calico_spec[field] = value
    calico_spec["orchRefs"] = [{"nodeName": name, "orchestrator": ORCHESTRATOR_K8S}] \
        if name else [{"orchestrator": ORCHESTRATOR_K8S}]
    if wireguard:
        calico_spec["wireguard"] = wireguard
    addresses = _addresses(ipv4_address, ipv6_address, mapping(node.get("status")))
    if addresses:
        calico_spec["addresses"] = addresses
    interfaces = _interfaces(annotations)
    if interfaces:
        calico_spec["interfaces"] = interfaces

    status: dict[str, Any] = {}
    if annotations.get(ANNOTATION_WIREGUARD_PUBLIC_KEY):
        status["wireguardPublicKey"] = annotations[ANNOTATION_WIREGUARD_PUBLIC_KEY]
    if annotations.get(ANNOTATION_WIREGUARD_PUBLIC_KEY_V6):
        status["wireguardPublicKeyV6"] = annotations[ANNOTATION_WIREGUARD_PUBLIC_KEY_V6]
    pod_cidrs = [str_or_empty(c) for c in as_list(spec.get("podCIDRs"), "spec.podCIDRs")]
    if pod_cidrs:
        status["podCIDRs"] = pod_cidrs

    metadata: dict[str, Any] = {}
    if name:
        metadata["name"] = name
    if meta.get("uid"):
        metadata["uid"] = str(meta["uid"])
    if meta.get("resourceVersion"):
        metadata["resourceVersion"] = str(meta["resourceVersion"])
    metadata["creationTimestamp"] = go_time(meta.get("creationTimestamp"))
    if labels:
        metadata["labels"] = sorted_map(labels)
    metadata["annotations"] = sorted_map(calico_annotations)

    return {
        "kind": NODE_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": metadata,
        "spec": calico_spec,
        "status": status,
    }


def _metadata_from_annotations(annotations: Mapping[str, str]
                               ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """Calico labels/annotations stored as JSON annotations; unparsable ones are ignored."""
    out: list[dict[str, str] | None] = []
    for key in (ANNOTATION_CALICO_LABELS, ANNOTATION_CALICO_ANNOTATIONS):
        value = None
        if key in annotations:
            try:
                value = go_unmarshal_string_map(annotations[key])
            except ValueError:
                value = None
        out.append(value)
    return out[0], out[1]


def _as_number(text: str) -> int | None:
    """``numorstring.ASNumberFromString``: plain 32-bit or dotted ``<16>.<16>`` form."""
    value = _go_parse_uint(text, 32)
    if value is not None:
        return value
    parts = text.split(".")
    if len(parts) != 2:
        return None
    high, low = _go_parse_uint(parts[0], 16), _go_parse_uint(parts[1], 16)
    if high is None or low is None:
        return None
    return (high << 16) + low


def _go_parse_uint(text: str, bits: int) -> int | None:
    """``strconv.ParseUint(text, 10, bits)``."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value < (1 << bits) else None


def _parse(text: str) -> tuple[bytes, IPNet] | None:
    """``cnet.ParseCIDROrIP``: the address as written (IPv4 as 4 bytes) and the masked
    network, or None."""
    net = parse_cidr_or_ip(text)
    if net is None:
        return None
    addr = parse_ip(text.partition("/")[0])
    assert addr is not None  # the network parsed, so its address does
    return addr, net


def _is_cidr_v4(text: str) -> bool:
    """validator ``ValidateCIDRv4``: any IPv4 address or CIDR."""
    parsed = _parse(text)
    return parsed is not None and ip_version(parsed[0]) == 4


def _is_cidr_v6(text: str) -> bool:
    parsed = _parse(text)
    return parsed is not None and ip_version(parsed[0]) == 6


def _is_network_v4(text: str) -> bool:
    """validator ``ValidateIPv4Network``: an IPv4 address, or a CIDR whose address is its
    own network address."""
    parsed = _parse(text)
    return (parsed is not None and ip_version(parsed[0]) == 4
            and format_ip(parsed[1].ip) == format_ip(parsed[0]))


def _is_network_v6(text: str) -> bool:
    parsed = _parse(text)
    return (parsed is not None and ip_version(parsed[0]) == 6
            and format_ip(parsed[1].ip) == format_ip(parsed[0]))


def _static_tunnel_address(pod_cidr: str) -> str:
    """The host-local IPAM tunnel address: the pod CIDR's address (as written, not
    masked) with its last IPv4 byte incremented, wrapping without carry; "" for IPv6."""
    if parse_cidr(pod_cidr) is None:
        raise ConversionError(f"invalid pod CIDR {pod_cidr!r} for node")
    ip = parse_ip(pod_cidr.partition("/")[0])
    if ip is None or len(ip) != 4:
        return ""
    return format_ip(ip[:3] + bytes([(ip[3] + 1) & 0xFF]))


def _addresses(ipv4_address: str, ipv6_address: str,
               status: Mapping[str, Any]) -> list[dict[str, str]]:
    """BGP addresses (type CalicoNodeIP), then the node's InternalIP/ExternalIP ones."""
    out = [{"address": a, "type": "CalicoNodeIP"} for a in (ipv4_address, ipv6_address) if a]
    for entry in as_list(status.get("addresses"), "status.addresses"):
        entry = mapping(entry)
        if entry.get("type") in ("InternalIP", "ExternalIP"):
            out.append({"address": str_or_empty(entry.get("address")), "type": entry["type"]})
    return out


def _interfaces(annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """Interfaces from the ``projectcalico.org/Interfaces`` JSON annotation.

    Like Calico, an annotation that does not decode is ignored, and addresses that are not
    IPs are removed with Calico's in-place slice deletion, whose index arithmetic skips
    the entry after each removed one (so consecutive bad addresses can survive).
    """
    if ANNOTATION_INTERFACES not in annotations:
        return []
    try:
        decoded = go_unmarshal(annotations[ANNOTATION_INTERFACES])
        interfaces = _decode_interfaces(decoded)
    except ValueError:
        return []
    out = []
    for iface_name, addresses in interfaces:
        kept = _drop_invalid_addresses(addresses) if addresses is not None else None
        iface: dict[str, Any] = {}
        if iface_name:
            iface["name"] = iface_name
        if kept:
            iface["addresses"] = kept
        out.append(iface)
    return out


def _decode_interfaces(decoded: Any) -> list[tuple[str, list[str] | None]]:
    """JSON into ``[]NodeInterface`` with Go's rules: field names match ignoring case,
    unknown fields are skipped, null gives the zero value, wrong types fail."""
    if decoded is None:
        return []
    if not isinstance(decoded, list):
        raise ValueError("interfaces annotation is not a list")
    out: list[tuple[str, list[str] | None]] = []
    for item in decoded:
        if item is None:
            out.append(("", None))
            continue
        if not isinstance(item, dict):
            raise ValueError("interface is not an object")
        name = ""
        addresses: list[str] | None = None
        for key, value in item.items():
            if key.lower() == "name":
                if value is not None and not isinstance(value, str):
                    raise ValueError("interface name is not a string")
                name = value or ""
            elif key.lower() == "addresses":
                if value is None:
                    addresses = None
                elif isinstance(value, list):
                    if not all(v is None or isinstance(v, str) for v in value):
                        raise ValueError("interface address is not a string")
                    addresses = [v or "" for v in value]
                else:
                    raise ValueError("interface addresses is not a list")
        out.append((name, addresses))
    return out


def _drop_invalid_addresses(addresses: list[str]) -> list[str]:
    """Replays Calico's loop: it ranges over the original slice header while deleting
    from a shorter and shorter view of the same backing array."""
    backing = list(addresses)
    length = len(backing)
    for j in range(len(addresses)):
        if parse_ip(backing[j]) is not None:
            continue
        if j + 1 > length:
            # Go panics slicing past the view's length; Calico's node watch would die.
            raise ConversionError("invalid interface addresses in node annotation")
        tail = backing[j + 1:length]
        backing[j:j + len(tail)] = tail
        length -= 1
    return backing[:length]
