"""Kubernetes ClusterNetworkPolicy -> Calico v3 GlobalNetworkPolicy, as Calico's KDD backend
derives it.

Mirrors libcalico-go v3.32.1 ``K8sClusterNetworkPolicyToCalico``
(``k8s/conversion/clusternetworkpolicy.go``) for ``policy.networking.k8s.io/v1alpha2``
objects (``sigs.k8s.io/network-policy-api`` v0.2.0):

* the tier comes from ``spec.tier`` (``Admin`` -> ``kube-admin``, ``Baseline`` ->
  ``kube-baseline``) and the order is ``spec.priority`` as a float;
* the subject becomes the namespace selector plus a pod selector restricted to Kubernetes
  endpoints;
* each rule becomes one rule per (protocol, peer), its ports merged as for Kubernetes
  NetworkPolicies, annotated with the rule's name; ``Accept`` is ``Allow``;
* a rule that cannot be converted is dropped, and a ``Deny`` or ``Pass`` rule is replaced by
  a bare ``Deny`` (fail closed);
* a policy with an unknown tier or no subject is a *tombstone*: it yields no policy, so what
  an earlier version of it yielded is withdrawn (:func:`cluster_network_policy_to_calico`
  returns None);
* a UID that is not a UUID makes the whole object unconvertible (``ConversionError``).

Types list ``Ingress``/``Egress`` only for the directions that have rules.  The result is
served through the GlobalNetworkPolicy update processor under ``PolicyKey{Kind:
KubernetesClusterNetworkPolicy}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .golang import parse_cidr
from .k8s_meta import (
    CALICO_API_VERSION,
    ConversionError,
    mapping,
    policy_metadata,
    str_or_empty,
)
from .k8s_policy import (
    SELECTOR_NAMESPACE,
    SELECTOR_POD,
    entity_rule,
    k8s_selector_to_calico,
    simplify_ports,
)

KUBERNETES_CLUSTER_NETWORK_POLICY_KIND = "KubernetesClusterNetworkPolicy"
GLOBAL_NETWORK_POLICY_KIND = "GlobalNetworkPolicy"

# ``spec.tier`` -> Calico tier (``libcalico-go/lib/names/policy.go``).
TIERS = {"Admin": "kube-admin", "Baseline": "kube-baseline"}
_ACTIONS = {"Accept": "Allow", "Deny": "Deny", "Pass": "Pass"}
# The annotation a converted rule carries its CNP rule name under (``K8sCNPRuleNameLabel``).
RULE_NAME_ANNOTATION = "name"
_NAMED_PORT = re.compile(r"[a-zA-Z0-9_.-]{1,128}")

_Port = tuple[int, int] | str


class _RuleError(ValueError):
    """One rule cannot be converted; the rest of the policy still is."""


def cluster_network_policy_to_calico(cnp: Mapping[str, Any]) -> dict[str, Any] | None:
    """The v3 GlobalNetworkPolicy Calico derives from a ClusterNetworkPolicy, or None for a
    tombstone (unknown tier, or neither ``subject.namespaces`` nor ``subject.pods``).

    Raises ``ConversionError`` if the UID is set but is not a UUID.
    """
    meta = mapping(cnp.get("metadata"))
    spec = mapping(cnp.get("spec"))
    tier = TIERS.get(str_or_empty(spec.get("tier")))
    if tier is None:
        return None
    subject = mapping(spec.get("subject"))
    if subject.get("namespaces") is not None:
        ns_selector = k8s_selector_to_calico(mapping(subject["namespaces"]), SELECTOR_NAMESPACE)
        pod_selector = k8s_selector_to_calico(None, SELECTOR_POD)
    elif subject.get("pods") is not None:
        ns_selector, pod_selector = _namespaced_pod(subject["pods"])
    else:
        return None

    ingress = _rules(spec.get("ingress"), ingress=True)
    egress = _rules(spec.get("egress"), ingress=False)

    metadata = policy_metadata(meta)

    calico_spec: dict[str, Any] = {"tier": tier, "order": float(_int32(spec.get("priority")))}
    if ingress:
        calico_spec["ingress"] = ingress
    if egress:
        calico_spec["egress"] = egress
    calico_spec["selector"] = pod_selector
    calico_spec["namespaceSelector"] = ns_selector
    types = [t for t, rules in (("Ingress", ingress), ("Egress", egress)) if rules]
    if types:
        calico_spec["types"] = types
    return {
        "kind": GLOBAL_NETWORK_POLICY_KIND,
        "apiVersion": CALICO_API_VERSION,
        "metadata": metadata,
        "spec": calico_spec,
    }


def _namespaced_pod(pods: Any) -> tuple[str, str]:
    """(namespace selector, pod selector) of a ``NamespacedPod``; both of its selectors are
    values, not pointers, so an absent one selects everything."""
    pods = mapping(pods)
    return (k8s_selector_to_calico(mapping(pods.get("namespaceSelector")), SELECTOR_NAMESPACE),
            k8s_selector_to_calico(mapping(pods.get("podSelector")), SELECTOR_POD))


def _rules(rules: Any, *, ingress: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rule in rules or []:
        rule = mapping(rule)
        try:
            out += _rule(rule, ingress=ingress)
        except _RuleError:
            if rule.get("action") in ("Deny", "Pass"):
                out.append({"action": "Deny", "source": {}, "destination": {}})
    return out


def _rule(rule: Mapping[str, Any], *, ingress: bool) -> list[dict[str, Any]]:
    """``k8sClusterNetPol{Ingress,Egress}RuleToCalico``: one Calico rule per (protocol, peer)."""
    action = _ACTIONS.get(str_or_empty(rule.get("action")))
    if action is None:
        raise _RuleError(f"unsupported cluster network policy action {rule.get('action')}")
    protocol_ports = _protocol_ports(rule.get("protocols"))
    name = str_or_empty(rule.get("name"))
    peers = [mapping(p) for p in rule.get("from" if ingress else "to") or []]
    out = []
    for protocol in sorted(protocol_ports):
        ports = simplify_ports(protocol_ports[protocol])
        for peer in peers:
            selector, ns_selector, nets = _peer(peer, egress=not ingress)
            if ingress:
                source = entity_rule(selector=selector, namespace_selector=ns_selector)
                destination = entity_rule(ports=ports)
            else:
                source = {}
                destination = entity_rule(ports=ports, selector=selector,
                                          namespace_selector=ns_selector, nets=nets)
            calico: dict[str, Any] = {}
            if name:
                calico["metadata"] = {"annotations": {RULE_NAME_ANNOTATION: name}}
            calico["action"] = action
            if protocol:
                calico["protocol"] = protocol
            calico["source"] = source
            calico["destination"] = destination
            out.append(calico)
    return out


def _peer(peer: Mapping[str, Any], *, egress: bool) -> tuple[str, str, list[str]]:
    """(pod selector, namespace selector, nets) of one peer: ``namespaces``, ``pods`` (which
    wins when both are set) and, for egress, ``networks``; other fields are not supported."""
    selector = ns_selector = ""
    nets: list[str] = []
    found = False
    if peer.get("namespaces") is not None:
        ns_selector = k8s_selector_to_calico(mapping(peer["namespaces"]), SELECTOR_NAMESPACE)
        found = True
    if peer.get("pods") is not None:
        ns_selector, selector = _namespaced_pod(peer["pods"])
        found = True
    networks = (peer.get("networks") or []) if egress else []
    for network in networks:
        net = parse_cidr(str_or_empty(network))
        if net is None:
            raise _RuleError(f"invalid CIDR in ANP rule: {network}")
        nets.append(str(net))
        found = True
    if not found:
        raise _RuleError(f"none of supported fields in {'To' if egress else 'From'!r} is set.")
    return selector, ns_selector, nets


def _protocol_ports(protocols: Any) -> dict[str, list[_Port] | None]:
    """``unpackCNPProtocols``: protocol name ("" for none) -> its ports (None: all ports).

    No protocols, or an entry that names neither a protocol nor a port, allow everything.
    """
    out: dict[str, list[_Port] | None] = {}
    for entry in protocols or [{}]:
        protocol, port = _protocol_and_port(mapping(entry))
        if protocol == "" and port is None:
            return {"": None}
        if port is None:
            out[protocol] = None
        elif protocol not in out or out[protocol]:
            # "every port" (None) is not narrowed by later entries for the protocol.
            out[protocol] = (out.get(protocol) or []) + [port]
    return out


def _protocol_and_port(entry: Mapping[str, Any]) -> tuple[str, _Port | None]:
    """``k8sCNPPortToCalicoFields``: the first of tcp/udp/sctp/destinationNamedPort set."""
    for field, protocol in (("tcp", "TCP"), ("udp", "UDP"), ("sctp", "SCTP")):
        if entry.get(field) is not None:
            return protocol, _port(mapping(entry[field]).get("destinationPort"))
    named = str_or_empty(entry.get("destinationNamedPort"))
    if named:
        if not _NAMED_PORT.fullmatch(named):
            raise _RuleError(f"invalid name for named port ({named})")
        return "", named
    return "", None


def _port(port: Any) -> tuple[int, int] | None:
    """``k8sCNPPortToCalico``: ``number`` (when non-zero) or ``range``; numbers are cast to
    uint16 as Go does."""
    if port is None:
        return None
    port = mapping(port)
    number = _int32(port.get("number")) & 0xFFFF
    if _int32(port.get("number")) != 0:
        return number, number
    span = port.get("range")
    if span is None:
        return None
    span = mapping(span)
    start, end = _int32(span.get("start")) & 0xFFFF, _int32(span.get("end")) & 0xFFFF
    if start > end:
        raise _RuleError(f"minimum port number ({start}) is greater than maximum port number "
                         f"({end}) in port range")
    return start, end


def _int32(value: Any) -> int:
    """An ``int32`` field as Go decodes it (absent: 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ConversionError(f"not an int32: {value!r}")
    if not -(2**31) <= int(value) < 2**31:
        raise ConversionError(f"int32 out of range: {value!r}")
    return int(value)
