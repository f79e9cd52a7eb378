"""v3 policy rules → v1 (Felix) rules, as ``updateprocessors/rules.go`` converts them.

The v1 rule keeps the raw v3 selectors in ``orig_*`` fields and adds the combined
``src_selector``/``dst_selector`` that also restrict by namespace and service account.
Namespace and service-account selectors are re-printed in canonical form with their label
prefix; the endpoint ``selector`` is used verbatim.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping, Sequence
from typing import Any

from . import selectors
from .golang import IPNet, parse_cidr_or_ip
from .gotypes import protocol_to_v1
from .shape import maps, strs

NAMESPACE_LABEL_PREFIX = "pcns."
SERVICE_ACCOUNT_LABEL_PREFIX = "pcsa."
LABEL_NAMESPACE = "projectcalico.org/namespace"
LABEL_SERVICE_ACCOUNT = "projectcalico.org/serviceaccount"

Rule = dict[str, Any]


def normalize_nets(nets: Sequence[str] | None) -> list[IPNet] | None:
    """``NormalizeIPNets``: each entry parsed as a CIDR or bare IP and masked; empty and
    unparsable ones dropped.  Nil when nothing survives."""
    out = [n for n in (parse_cidr_or_ip(s) for s in strs(nets, "nets")) if n is not None]
    return out or None


def convert_nets(nets: Sequence[str] | None) -> list[IPNet] | None:
    """``ConvertStringsToNets`` (source nets, network sets): like :func:`normalize_nets`
    but an empty string survives as Go's nil IPNet, printed ``<nil>``."""
    out = [n for n in (parse_cidr_or_ip(s, allow_empty=True) for s in strs(nets, "nets"))
           if n is not None]
    return out or None


def _service_account_selector(sam: Mapping[str, Any]) -> str:
    sel = sam.get("selector") or ""
    updated = selectors.prefixed(sel, SERVICE_ACCOUNT_LABEL_PREFIX) if sel else ""
    names = strs(sam.get("names"), "serviceAccounts.names")
    if not names:
        return updated
    joined = "', '".join(names)
    try:
        names_sel = selectors.canonical(f"{LABEL_SERVICE_ACCOUNT} in {{ '{joined}' }}")
    except selectors.SelectorError:
        return ""
    if updated:
        return f"({updated}) && ({names_sel})"
    return names_sel


def entity_selector(er: Mapping[str, Any], ns: str) -> str:
    """``GetEntityRuleSelector``: the combined v1 selector for one side of a rule."""
    sa = _service_account_selector(er["serviceAccounts"]) if er.get("serviceAccounts") else ""
    ns_selector_raw = er.get("namespaceSelector") or ""
    endpoint_sel = er.get("selector") or ""
    not_sel = er.get("notSelector") or ""
    if ns_selector_raw:
        ns_sel = selectors.prefixed(ns_selector_raw, NAMESPACE_LABEL_PREFIX)
        ns_sel = ns_sel.replace("all()", f"has({LABEL_NAMESPACE})")
        ns_sel = ns_sel.replace("global()", f"!has({LABEL_NAMESPACE})")
    elif ns:
        ns_sel = f"{LABEL_NAMESPACE} == '{ns}'"
    else:
        ns_sel = ""
    parts = [p for p in (sa, endpoint_sel) if p]
    selector = parts[0] if len(parts) == 1 else ("(" + ") && (".join(parts) + ")" if parts else "")
    if ns_sel and (selector or not_sel or ns_selector_raw):
        selector = f"({ns_sel}) && ({selector})" if selector else ns_sel
    return selector


def _action(action: str | None) -> str:
    if action == "Pass":
        return "next-tier"
    return (action or "").lower()


def rule_v3_to_v1(ar: Mapping[str, Any], ns: str) -> Rule:
    """``RuleAPIV3ToBackend``: one v3 rule dict → one v1 rule dict (JSON field names)."""
    src: Mapping[str, Any] = ar.get("source") or {}
    dst: Mapping[str, Any] = ar.get("destination") or {}
    icmp = ar.get("icmp") or {}
    not_icmp = ar.get("notICMP") or {}
    src_sa = src.get("serviceAccounts") or {}
    dst_sa = dst.get("serviceAccounts") or {}
    src_svc = src.get("services") or {}
    dst_svc = dst.get("services") or {}
    r: Rule = {
        "action": _action(ar.get("action")),
        "ip_version": ar.get("ipVersion"),
        "protocol": protocol_to_v1(ar["protocol"]) if ar.get("protocol") is not None else None,
        "!protocol": (protocol_to_v1(ar["notProtocol"])
                      if ar.get("notProtocol") is not None else None),
        "icmp_type": icmp.get("type"),
        "icmp_code": icmp.get("code"),
        "!icmp_type": not_icmp.get("type"),
        "!icmp_code": not_icmp.get("code"),
        "src_nets": convert_nets(src.get("nets")),
        "src_selector": entity_selector(src, ns),
        "src_ports": src.get("ports"),
        "src_service": src_svc.get("name", ""),
        "src_service_ns": src_svc.get("namespace", ""),
        "dst_selector": entity_selector(dst, ns),
        "dst_nets": normalize_nets(dst.get("nets")),
        "dst_ports": dst.get("ports"),
        "dst_service": dst_svc.get("name", ""),
        "dst_service_ns": dst_svc.get("namespace", ""),
        "!src_nets": convert_nets(src.get("notNets")),
        "!src_selector": src.get("notSelector", ""),
        "!src_ports": src.get("notPorts"),
        "!dst_selector": dst.get("notSelector", ""),
        "!dst_nets": normalize_nets(dst.get("notNets")),
        "!dst_ports": dst.get("notPorts"),
        "orig_src_selector": src.get("selector", ""),
        "orig_src_namespace_selector": src.get("namespaceSelector", ""),
        "orig_dst_selector": dst.get("selector", ""),
        "orig_dst_namespace_selector": dst.get("namespaceSelector", ""),
        "!orig_src_selector": src.get("notSelector", ""),
        "!orig_dst_selector": dst.get("notSelector", ""),
        "orig_src_service_acct_names": src_sa.get("names"),
        "orig_src_service_acct_selector": src_sa.get("selector", ""),
        "orig_dst_service_acct_names": dst_sa.get("names"),
        "orig_dst_service_acct_selector": dst_sa.get("selector", ""),
    }
    http = ar.get("http")
    if http is not None:
        r["http"] = {"methods": http.get("methods"), "paths": http.get("paths")}
    md = ar.get("metadata")
    if md is not None and md.get("annotations") is not None:
        r["metadata"] = {"annotations": dict(md["annotations"])}
    return r


def rules_v3_to_v1(rules: Sequence[Mapping[str, Any]] | None, ns: str) -> list[Rule] | None:
    if not rules:
        return None
    return [rule_v3_to_v1(r, ns) for r in maps(rules, "rules")]
