"""v3 Nodes in the felix syncer (``felixnodeprocessor.go``): the host IP (``bird_ip``),
tunnel-address host config, the v3 Node itself and the WireGuard key, plus pod-CIDR blocks
with ``usePodCIDR``.  Other syncers pass Nodes through untouched."""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from . import keys
from .gojson import dumps
from .golang import format_ip, parse_cidr_or_ip, parse_ip
from .goschema import ROOTS
from .ipam import pod_cidr_block_kvs
from .passthrough import resource_kv

_WIREGUARD = ROOTS["v1.Wireguard"]


def _address_ip(addr: str) -> bytes | None:
    """The address part of ``cnet.ParseCIDROrIP`` (host bits kept)."""
    if parse_cidr_or_ip(addr) is None:
        return None
    return parse_ip(addr.partition("/")[0]) if "/" in addr else parse_ip(addr)


def find_node_address(node: Mapping[str, Any], ip_type: str, version: int) -> bytes | None:
    """``FindNodeAddress``: the first ``spec.addresses`` entry of ``ip_type`` and version."""
    for a in (node.get("spec") or {}).get("addresses") or []:
        if a.get("type") == ip_type:
            ip = _address_ip(a.get("address") or "")
            if ip is not None and (4 if len(ip) == 4 else 6) == version:
                return ip
    return None


def _normalized_ip(s: str | None) -> str | None:
    if not s:
        return None
    ip = parse_ip(s)
    return format_ip(ip) if ip is not None else None


def host_ip(node: Mapping[str, Any]) -> bytes | None:
    """The ``bird_ip`` address: ``spec.bgp.ipv4Address``'s IP, else the first IPv4
    InternalIP, else the first IPv4 ExternalIP."""
    bgp = (node.get("spec") or {}).get("bgp") or {}
    if bgp.get("ipv4Address"):
        ip = _address_ip(bgp["ipv4Address"])
        if ip is not None:
            return ip
    return (find_node_address(node, "InternalIP", 4)
            or find_node_address(node, "ExternalIP", 4))


def felix_node_kvs(node: Mapping[str, Any], *,
                   use_pod_cidr: bool) -> list[tuple[str, bytes, str]]:
    """(key, value, V3ResourceVersion) in the processor's emission order."""
    name = (node.get("metadata") or {}).get("name") or ""
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    bgp = spec.get("bgp") or {}
    out: list[tuple[str, bytes, str]] = []

    ip = host_ip(node)
    if ip is not None:
        out.append((keys.host_ip_key(name), format_ip(ip).encode(), ""))

    # Raw-string host config: unparsable addresses are skipped; MACs go through as written.
    tunnel = (("IpInIpTunnelAddr", _normalized_ip(bgp.get("ipv4IPIPTunnelAddr"))),
              ("IPv4VXLANTunnelAddr", _normalized_ip(spec.get("ipv4VXLANTunnelAddr"))),
              ("VXLANTunnelMACAddr", spec.get("vxlanTunnelMACAddr") or None),
              ("IPv6VXLANTunnelAddr", _normalized_ip(spec.get("ipv6VXLANTunnelAddr"))),
              ("VXLANTunnelMACAddrV6", spec.get("vxlanTunnelMACAddrV6") or None))
    if name:
        for cfg, val in tunnel:
            if val is not None:
                out.append((keys.host_config_key(name, cfg), val.encode(), ""))

    out.append(resource_kv("Node", node))

    wg = spec.get("wireguard") or {}
    wg4 = parse_ip(wg["interfaceIPv4Address"]) if wg.get("interfaceIPv4Address") else None
    wg6 = parse_ip(wg["interfaceIPv6Address"]) if wg.get("interfaceIPv6Address") else None
    pub4 = status.get("wireguardPublicKey") or ""
    pub6 = status.get("wireguardPublicKeyV6") or ""
    if name and (wg4 is not None or pub4 or wg6 is not None or pub6):
        out.append((keys.wireguard_key(name), dumps(_WIREGUARD, {
            "interfaceIPv4Addr": wg4, "publicKey": pub4,
            "interfaceIPv6Addr": wg6, "publicKeyV6": pub6}), ""))

    if use_pod_cidr:
        out.extend((k, v, "") for k, v in pod_cidr_block_kvs(name, status.get("podCIDRs")))
    return out
