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

__sans_io__ = True

import logging
import re
from collections.abc import Mapping
from typing import Any

from .golang import parse_cidr
from .k8s_meta import CALICO_API_VERSION, policy_metadata
from .k8s_policy import (
    SELECTOR_NAMESPACE,
    SELECTOR_POD,
    entity_rule,
    k8s_selector_to_calico,
    simplify_ports,
)
from .shape import (
    MalformedResource,
    as_int,
    as_map,
    as_str,
    field_map,
    field_str,
    maps,
    root,
    strs,
)

log = logging.getLogger(__name__)

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

    Raises ``ConversionError`` if the UID is set but is not a UUID, and
    ``MalformedResource`` for a field of the wrong JSON type (Go's decoder refuses the
    object).
    """
    meta = field_map(root(cnp), "metadata")
    spec = field_map(cnp, "spec")
    name = field_str(meta, "name")
    tier = TIERS.get(as_str(spec.get("tier"), "spec.tier"))
    if tier is None:
        log.warning("Skipping malformed ClusterNetworkPolicy %s: invalid tier %r", name,
                    spec.get("tier"))
        return None
    subject = as_map(spec.get("subject"), "spec.subject")
    if subject.get("namespaces") is not None:
        ns_selector = _selector(subject["namespaces"], SELECTOR_NAMESPACE, "spec.subject")
        pod_selector = k8s_selector_to_calico(None, SELECTOR_POD)
    elif subject.get("pods") is not None:
        ns_selector, pod_selector = _namespaced_pod(subject["pods"], "spec.subject.pods")
    else:
        log.warning("Skipping malformed ClusterNetworkPolicy %s: no subject selector", name)
        return None

    ingress = _rules(name, maps(spec.get("ingress"), "spec.ingress"), ingress=True)
    egress = _rules(name, maps(spec.get("egress"), "spec.egress"), ingress=False)
    order = float(_int32(spec.get("priority"), "spec.priority"))
    metadata = policy_metadata(meta)

    calico_spec: dict[str, Any] = {"tier": tier, "order": order}
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


def _selector(value: Any, selector_type: str, where: str) -> str:
    return k8s_selector_to_calico(as_map(value, where), selector_type)


def _namespaced_pod(pods: Any, where: str) -> tuple[str, str]:
    """(namespace selector, pod selector) of a ``NamespacedPod``; both of its selectors are
    values, not pointers, so an absent one selects everything."""
    pods = as_map(pods, where)
    return (_selector(pods.get("namespaceSelector"), SELECTOR_NAMESPACE, where),
            _selector(pods.get("podSelector"), SELECTOR_POD, where))


def _rules(policy: str, rules: list[Mapping[str, Any]], *, ingress: bool
           ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rule in rules:
        try:
            out += _rule(rule, ingress=ingress)
        except _RuleError as exc:
            log.warning("ClusterNetworkPolicy %s: dropping a rule that does not convert (%s)",
                        policy, exc)
            if rule.get("action") in ("Deny", "Pass"):  # fail closed
                out.append({"action": "Deny", "source": {}, "destination": {}})
    return out


def _rule(rule: Mapping[str, Any], *, ingress: bool) -> list[dict[str, Any]]:
    """``k8sClusterNetPol{Ingress,Egress}RuleToCalico``: one Calico rule per (protocol, peer)."""
    peer_field = "from" if ingress else "to"
    peers = maps(rule.get(peer_field), peer_field)
    name = field_str(rule, "name")
    raw_action = field_str(rule, "action")
    action = _ACTIONS.get(raw_action)
    if action is None:
        raise _RuleError(f"unsupported cluster network policy action {raw_action}")
    protocol_ports = _protocol_ports(maps(rule.get("protocols"), "protocols"))
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
    found = False
    if peer.get("namespaces") is not None:
        ns_selector = _selector(peer["namespaces"], SELECTOR_NAMESPACE, "namespaces")
        found = True
    if peer.get("pods") is not None:
        ns_selector, selector = _namespaced_pod(peer["pods"], "pods")
        found = True
    networks = strs(peer.get("networks"), "networks") if egress else []
    nets = []
    for network in networks:
        net = parse_cidr(network)
        if net is None:
            raise _RuleError(f"invalid CIDR in ANP rule: {network}")
        nets.append(str(net))
        found = True
    if not found:
        raise _RuleError(f"none of supported fields in {'To' if egress else 'From'!r} is set.")
    return selector, ns_selector, nets


def _protocol_ports(protocols: list[Mapping[str, Any]]) -> dict[str, list[_Port] | None]:
    """``unpackCNPProtocols``: protocol name ("" for none) -> its ports (None: all ports).

    No protocols, or an entry that names neither a protocol nor a port, allow everything.
    """
    out: dict[str, list[_Port] | None] = {}
    for entry in protocols or [{}]:
        protocol, port = _protocol_and_port(entry)
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
            port = as_map(entry[field], field).get("destinationPort")
            return protocol, _port(as_map(port, f"{field}.destinationPort"), field)
    named = field_str(entry, "destinationNamedPort")
    if named:
        if not _NAMED_PORT.fullmatch(named):
            raise _RuleError(f"invalid name for named port ({named})")
        return "", named
    return "", None


def _port(port: Mapping[str, Any], where: str) -> tuple[int, int] | None:
    """``k8sCNPPortToCalico``: ``number`` (when non-zero) or ``range`` (None: neither, or no
    port at all); numbers are cast to uint16 as Go does."""
    number = _int32(port.get("number"), f"{where}.number")
    if number:
        return number & 0xFFFF, number & 0xFFFF
    if port.get("range") is None:
        return None
    span = as_map(port["range"], f"{where}.range")
    start = _int32(span.get("start"), f"{where}.range.start") & 0xFFFF
    end = _int32(span.get("end"), f"{where}.range.end") & 0xFFFF
    if start > end:
        raise _RuleError(f"minimum port number ({start}) is greater than maximum port number "
                         f"({end}) in port range")
    return start, end


def _int32(value: Any, where: str) -> int:
    """An ``int32`` field as Go decodes it (absent: 0)."""
    number = as_int(value, where)
    if not -(2**31) <= number < 2**31:
        raise MalformedResource(f"{where}: {number} does not fit an int32")
    return number
