"""Kubernetes NetworkPolicy -> Calico v3 NetworkPolicy, as Calico's KDD backend derives it.

Mirrors libcalico-go v3.32.1 ``K8sNetworkPolicyToCalico`` (``k8s/conversion/conversion.go``):
the policy lands in tier ``default`` at order 1000 under its own name; its selector is the
pod selector rewritten as a Calico selector restricted to Kubernetes endpoints; each
Kubernetes rule becomes one Allow rule per (protocol, peer), with the protocol's ports
merged into minimal ranges.

In KDD the result is keyed by a ResourceKey of kind ``KubernetesNetworkPolicy``
(:data:`KUBERNETES_NETWORK_POLICY_KIND`) while the object itself is an ordinary v3
``NetworkPolicy``; the felix syncer's NetworkPolicy processor then emits it under
``PolicyKey{Kind: KubernetesNetworkPolicy}``.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from .golang import parse_cidr
from .k8s_meta import (
    CALICO_API_VERSION,
    LABEL_ORCHESTRATOR,
    mapping,
    policy_metadata,
    str_or_empty,
)
from .shape import as_int, as_list

KUBERNETES_NETWORK_POLICY_KIND = "KubernetesNetworkPolicy"
NETWORK_POLICY_KIND = "NetworkPolicy"
K8S_POLICY_ORDER = 1000.0
DEFAULT_TIER = "default"

SELECTOR_POD = "pod"
SELECTOR_NAMESPACE = "namespace"

# numorstring's known protocol names; a match (ignoring case) takes this spelling.
_PROTOCOL_NAMES = ("UDP", "TCP", "ICMP", "ICMPv6", "SCTP", "UDPLite")


class _PortError(ValueError):
    pass


def k8s_selector_to_calico(label_selector: Mapping[str, Any] | None,
                           selector_type: str = SELECTOR_POD) -> str:
    """A Kubernetes label selector as the Calico selector text Calico writes for it.

    Pod selectors (``selector_type=SELECTOR_POD``) always start with
    ``projectcalico.org/orchestrator == 'k8s'``.  Then each ``matchLabels`` entry in key
    order as ``k == 'v'``, then each ``matchExpressions`` item in order (``In`` ->
    ``k in { 'a', 'b' }``, ``NotIn`` -> ``k not in { ... }``, ``Exists`` -> ``has(k)``,
    ``DoesNotExist`` -> ``! has(k)``; other operators are skipped), joined by `` && ``.
    A namespace selector (``SELECTOR_NAMESPACE``) that is absent gives ``""`` and one
    with no terms gives ``all()``.  The text is not normalised further (Calico keeps it
    verbatim; only its v1 processors re-parse namespace selectors).
    """
    terms = []
    if selector_type == SELECTOR_POD:
        terms.append(f"{LABEL_ORCHESTRATOR} == 'k8s'")
    if label_selector is None:
        return " && ".join(terms)
    match_labels = mapping(label_selector.get("matchLabels"))
    expressions = as_list(label_selector.get("matchExpressions"), "matchExpressions")
    if selector_type == SELECTOR_NAMESPACE and not match_labels and not expressions:
        return "all()"
    for key in sorted(match_labels):
        terms.append(f"{key} == '{str_or_empty(match_labels[key])}'")
    for expr in expressions:
        expr = mapping(expr)
        key = str_or_empty(expr.get("key"))
        values = "', '".join(str_or_empty(v) for v in as_list(expr.get("values"), "values"))
        operator = expr.get("operator")
        if operator == "In":
            terms.append(f"{key} in {{ '{values}' }}")
        elif operator == "NotIn":
            terms.append(f"{key} not in {{ '{values}' }}")
        elif operator == "Exists":
            terms.append(f"has({key})")
        elif operator == "DoesNotExist":
            terms.append(f"! has({key})")
    return " && ".join(terms)


def k8s_network_policy_to_calico(np: Mapping[str, Any]) -> dict[str, Any]:
    """The v3 NetworkPolicy Calico's KDD backend derives from a networking.k8s.io/v1
    NetworkPolicy.

    ResourceKey: (``KUBERNETES_NETWORK_POLICY_KIND``, namespace, name) -- no name prefix
    in KDD; revision = the policy's ``resourceVersion`` (also kept in
    ``metadata.resourceVersion``, as Calico does).  ``types`` lists Ingress and/or Egress
    from ``policyTypes``; with neither, ``[Ingress]`` (egress rules are still converted).
    A Kubernetes rule whose ports cannot be converted is dropped and the rest kept, which
    is what a Calico list yields (a Calico watch reports an error instead, and the resync
    that follows yields the same result).  Raises ``ConversionError`` if the UID is set
    but is not a UUID.
    """
    meta = mapping(np.get("metadata"))
    spec = mapping(np.get("spec"))

    ingress: list[dict[str, Any]] = []
    for rule in as_list(spec.get("ingress"), "spec.ingress"):
        rule = mapping(rule)
        try:
            ingress += _k8s_rule_to_calico(rule.get("from"), rule.get("ports"), ingress=True)
        except _PortError:
            continue
    egress: list[dict[str, Any]] = []
    for rule in as_list(spec.get("egress"), "spec.egress"):
        rule = mapping(rule)
        try:
            egress += _k8s_rule_to_calico(rule.get("to"), rule.get("ports"), ingress=False)
        except _PortError:
            continue

    policy_types = as_list(spec.get("policyTypes"), "spec.policyTypes")
    types = [t for t in ("Ingress", "Egress") if t in policy_types] or ["Ingress"]

    metadata = policy_metadata(meta)

    calico_spec: dict[str, Any] = {"tier": DEFAULT_TIER, "order": K8S_POLICY_ORDER}
    if ingress:
        calico_spec["ingress"] = ingress
    if egress:
        calico_spec["egress"] = egress
    # podSelector is a required (non-pointer) field: absent means "all pods".
    calico_spec["selector"] = k8s_selector_to_calico(mapping(spec.get("podSelector")))
    calico_spec["types"] = types

    return {
        "kind": NETWORK_POLICY_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": metadata,
        "spec": calico_spec,
    }


def _k8s_rule_to_calico(peers: Any, ports: Any, *, ingress: bool) -> list[dict[str, Any]]:
    """One Kubernetes ingress/egress rule as Calico rules (``k8sRuleToCalico``)."""
    peer_list: list[Mapping[str, Any] | None] = [mapping(p) for p in as_list(peers, "peers")] or [None]

    # protocol text -> ports (None = every port of that protocol); "" = no protocol.
    protocol_ports: dict[str, list[tuple[int, int] | str] | None] = {}
    for port in as_list(ports, "ports") or [None]:
        if port is None:
            protocol_ports = {"": None}  # no port entries: allow everything
            break
        protocol, calico_ports = _k8s_port_to_calico(mapping(port))
        if calico_ports is None:
            protocol_ports[protocol] = None
        elif protocol not in protocol_ports or protocol_ports[protocol]:
            # "every port" (None) is not narrowed by later entries for the protocol.
            protocol_ports[protocol] = (protocol_ports.get(protocol) or []) + calico_ports

    rules = []
    for protocol in sorted(protocol_ports):
        rule_ports = simplify_ports(protocol_ports[protocol])
        for peer in peer_list:
            selector, ns_selector, nets, not_nets = _k8s_peer_to_calico(peer)
            entity = entity_rule(nets=nets, selector=selector, namespace_selector=ns_selector,
                                  ports=rule_ports if not ingress else None, not_nets=not_nets)
            rule: dict[str, Any] = {"action": "Allow"}
            if protocol:
                rule["protocol"] = _protocol_json(protocol)
            if ingress:
                rule["source"] = entity
                rule["destination"] = entity_rule(ports=rule_ports)
            else:
                rule["source"] = {}
                rule["destination"] = entity
            rules.append(rule)
    return rules


def entity_rule(*, nets: list[str] | None = None, selector: str = "",
                 namespace_selector: str = "", ports: list[tuple[int, int] | str] | None = None,
                 not_nets: list[str] | None = None) -> dict[str, Any]:
    """A v3 EntityRule with its omitempty fields dropped, in Go field order."""
    out: dict[str, Any] = {}
    if nets:
        out["nets"] = nets
    if selector:
        out["selector"] = selector
    if namespace_selector:
        out["namespaceSelector"] = namespace_selector
    if ports:
        out["ports"] = [port_json(p) for p in ports]
    if not_nets:
        out["notNets"] = not_nets
    return out


def _k8s_port_to_calico(port: Mapping[str, Any]) -> tuple[str, list[tuple[int, int] | str] | None]:
    """(protocol text, ports or None for "all ports") for one NetworkPolicyPort."""
    raw_protocol = port.get("protocol")
    # TCP is Kubernetes' default; an explicit empty protocol stays empty, as in Calico.
    protocol = "TCP" if raw_protocol is None else _protocol_from_string(str(raw_protocol))
    value = port.get("port")
    if value is None:
        return protocol, None
    text = str(value)  # IntOrString.String()
    end_port = port.get("endPort")
    if end_port is not None:
        text = f"{text}:{as_int(end_port, 'endPort')}"
    return protocol, [_port_from_string(text)]


def _protocol_from_string(text: str) -> str:
    """``numorstring.ProtocolFromString``: known names take their canonical spelling."""
    for name in _PROTOCOL_NAMES:
        if name.casefold() == text.casefold():  # Go's strings.EqualFold
            return name
    return text


def _protocol_json(text: str) -> int | str:
    """A protocol as it marshals: a number when its text is a uint8, else the text."""
    if text.isascii() and text.isdigit() and int(text) <= 255:
        return int(text)
    return text


def _port_from_string(text: str) -> tuple[int, int] | str:
    """``numorstring.PortFromString``: a (min, max) range or a port name."""
    if text.isascii() and text.isdigit():
        if int(text) > 65535:
            raise _PortError(f"invalid port format ({text})")
        return int(text), int(text)
    lo, sep, hi = text.partition(":")
    if sep and lo.isascii() and lo.isdigit() and hi.isascii() and hi.isdigit():
        if int(lo) > 65535 or int(hi) > 65535 or int(lo) > int(hi):
            raise _PortError(f"invalid port range ({text})")
        return int(lo), int(hi)
    if not 1 <= len(text) <= 128 or not all(c.isascii() and (c.isalnum() or c in "_.-")
                                             for c in text):
        raise _PortError(f"invalid name for named port ({text})")
    return text


def port_json(port: tuple[int, int] | str) -> int | str:
    """A port as it marshals: name, single number, or ``"min:max"``."""
    if isinstance(port, str):
        return port
    lo, hi = port
    return lo if lo == hi else f"{lo}:{hi}"


def simplify_ports(ports: list[tuple[int, int] | str] | None
                    ) -> list[tuple[int, int] | str] | None:
    """Calico's ``SimplifyPorts``: named ports first (input order), then the numeric
    ports merged into minimal sorted ranges -- unless there are fewer than two numeric
    ports in total, in which case the list is returned as given."""
    if ports is None or len(ports) <= 1:
        return ports
    named = [p for p in ports if isinstance(p, str)]
    numbers = sorted(n for p in ports if not isinstance(p, str)
                     for n in range(p[0], p[1] + 1))
    if len(numbers) <= 1:
        return ports
    out: list[tuple[int, int] | str] = list(named)
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n > prev + 1:
            out.append((start, prev))
            start = n
        prev = n
    out.append((start, prev))
    return out


def _k8s_peer_to_calico(peer: Mapping[str, Any] | None
                        ) -> tuple[str, str, list[str] | None, list[str] | None]:
    """(selector, namespace selector, nets, not-nets) for one peer (``k8sPeerToCalicoFields``).

    An ipBlock gives masked nets and no selectors.  As in Calico, an unparsable CIDR
    stops the translation where it fails: a bad ``cidr`` leaves the peer empty (it then
    matches everything), a bad ``except`` entry keeps what was converted before it.
    """
    if peer is None:
        return "", "", None, None
    ip_block = peer.get("ipBlock")
    if ip_block is not None:
        ip_block = mapping(ip_block)
        net = parse_cidr(str_or_empty(ip_block.get("cidr")))
        if net is None:
            return "", "", None, None
        nets = [str(net)]
        not_nets: list[str] = []
        for exception in as_list(ip_block.get("except"), "ipBlock.except"):
            net = parse_cidr(str_or_empty(exception))
            if net is None:
                break
            not_nets.append(str(net))
        return "", "", nets, not_nets or None
    pod_selector = peer.get("podSelector")
    ns_selector = peer.get("namespaceSelector")
    return (
        k8s_selector_to_calico(None if pod_selector is None else mapping(pod_selector),
                               SELECTOR_POD),
        k8s_selector_to_calico(None if ns_selector is None else mapping(ns_selector),
                               SELECTOR_NAMESPACE),
        None,
        None,
    )
