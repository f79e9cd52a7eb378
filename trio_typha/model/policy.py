"""Policies and tiers → modern v1 ``PolicyKey`` / ``TierKey`` values.

Mirrors the (Global/Staged/Kubernetes) network-policy and tier update processors of
``libcalico-go/lib/backend/syncersv1/updateprocessors``.  The tier is part of the value, not
the key; the key name is the datastore object's name.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from . import keys, selectors
from .gojson import dumps
from .goschema import ROOTS
from .rules import (
    LABEL_NAMESPACE,
    NAMESPACE_LABEL_PREFIX,
    SERVICE_ACCOUNT_LABEL_PREFIX,
    rules_v3_to_v1,
)
from .shape import as_str, strs

_POLICY = ROOTS["v1.Policy"]
_TIER = ROOTS["v1.Tier"]

DEFAULT_TIER_ORDER = 1_000_000.0


def _prefix_and_append(current: str, new: str, prefix: str) -> str:
    """``prefixAndAppendSelector``."""
    if new:
        prefixed = selectors.prefixed(new, prefix)
        if prefixed:
            return f"({current}) && {prefixed}" if current else prefixed
    return current


def _types(spec: Mapping[str, Any]) -> list[str] | None:
    types = strs(spec.get("types"), "spec.types")
    return [t.lower() for t in types] if types else None


def network_policy_value(policy: Mapping[str, Any]) -> dict[str, Any]:
    """``ConvertNetworkPolicyV3ToV1Value`` for a namespaced v3 NetworkPolicy dict."""
    md = policy.get("metadata") or {}
    spec = policy.get("spec") or {}
    # checked here, not only where the value is encoded: the rules are built with it first
    ns = as_str(md.get("namespace") or "", "metadata.namespace")
    selector = spec.get("selector") or ""
    if ns:
        ns_sel = f"{LABEL_NAMESPACE} == '{ns}'"
        selector = f"({selector}) && {ns_sel}" if selector else ns_sel
    selector = _prefix_and_append(selector, spec.get("serviceAccountSelector") or "",
                                  SERVICE_ACCOUNT_LABEL_PREFIX)
    return {
        "namespace": ns,
        "tier": spec.get("tier") or "default",
        "order": spec.get("order"),
        "inbound_rules": rules_v3_to_v1(spec.get("ingress"), ns),
        "outbound_rules": rules_v3_to_v1(spec.get("egress"), ns),
        "selector": selector,
        "types": _types(spec),
        "performance_hints": spec.get("performanceHints"),
    }


def global_network_policy_value(policy: Mapping[str, Any]) -> dict[str, Any]:
    """``ConvertGlobalNetworkPolicyV3ToV1Value`` for a v3 GlobalNetworkPolicy dict."""
    spec = policy.get("spec") or {}
    selector = spec.get("selector") or ""
    ns_sel = spec.get("namespaceSelector") or ""
    if ns_sel:
        selector = _prefix_and_append(selector, ns_sel, NAMESPACE_LABEL_PREFIX)
        selector = selector.replace("all()", f"has({LABEL_NAMESPACE})")
    sa_sel = spec.get("serviceAccountSelector") or ""
    if sa_sel:
        selector = _prefix_and_append(selector, sa_sel, SERVICE_ACCOUNT_LABEL_PREFIX)
        selector = selector.replace("all()", "has(projectcalico.org/serviceaccount)")
    return {
        "tier": spec.get("tier") or "default",
        "order": spec.get("order"),
        "inbound_rules": rules_v3_to_v1(spec.get("ingress"), ""),
        "outbound_rules": rules_v3_to_v1(spec.get("egress"), ""),
        "selector": selector,
        "untracked": bool(spec.get("doNotTrack")),
        "pre_dnat": bool(spec.get("preDNAT")),
        "apply_on_forward": bool(spec.get("applyOnForward")),
        "types": _types(spec),
        "performance_hints": spec.get("performanceHints"),
    }


def _staged(value: dict[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    action = spec.get("stagedAction") or ""
    if action:
        value["staged_action"] = action
    return value


def _is_staged_delete(policy: Mapping[str, Any]) -> bool:
    return (policy.get("spec") or {}).get("stagedAction") == "Delete"


def policy_kvs(kind: str, key_name: str, policy: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """All v1 KVs of one v3 policy of ``kind`` (GlobalNetworkPolicy, NetworkPolicy,
    StagedGlobalNetworkPolicy, StagedNetworkPolicy, or KubernetesNetworkPolicy /
    KubernetesClusterNetworkPolicy for a Calico-shaped conversion of a Kubernetes policy).

    ``key_name`` is the datastore object's name (which can differ from the v3 name for
    legacy ``default.``-prefixed CRDs).  A staged policy with ``stagedAction: Delete``
    yields nothing.
    """
    md = policy.get("metadata") or {}
    spec = policy.get("spec") or {}
    if kind in ("GlobalNetworkPolicy", "KubernetesClusterNetworkPolicy"):
        value = global_network_policy_value(policy)
        key = keys.policy_key(kind, "", key_name)
    elif kind == "StagedGlobalNetworkPolicy":
        if _is_staged_delete(policy):
            return []
        value = _staged(global_network_policy_value(policy), spec)
        key = keys.policy_key(kind, "", key_name)
    elif kind in ("NetworkPolicy", "KubernetesNetworkPolicy"):
        ns = md.get("namespace") or ""
        if not ns:
            return []
        value = network_policy_value(policy)
        key = keys.policy_key(kind, ns, key_name)
    elif kind == "StagedNetworkPolicy":
        ns = md.get("namespace") or ""
        if not ns or _is_staged_delete(policy):
            return []
        value = _staged(network_policy_value(policy), spec)
        key = keys.policy_key(kind, ns, key_name)
    else:
        raise ValueError(f"not a policy kind: {kind}")
    return [(key, dumps(_POLICY, value))]


def staged_k8s_policy_as_k8s(staged: Mapping[str, Any]) -> dict[str, Any]:
    """``ConvertStagedKubernetesPolicyToK8SEnforced``: the networking.k8s.io NetworkPolicy a
    StagedKubernetesNetworkPolicy stands for (resourceVersion and uid cleared)."""
    md = dict(staged.get("metadata") or {})
    md.pop("resourceVersion", None)
    md.pop("uid", None)
    spec = staged.get("spec") or {}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": md,
        "spec": {k: spec[k] for k in ("podSelector", "ingress", "egress", "policyTypes")
                 if k in spec},
    }


def staged_k8s_policy_kvs(key_name: str, staged: Mapping[str, Any],
                          converted: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """A StagedKubernetesNetworkPolicy, given ``converted`` = the Kubernetes→Calico
    conversion of :func:`staged_k8s_policy_as_k8s` (done by :mod:`.k8s`)."""
    ns = (staged.get("metadata") or {}).get("namespace") or ""
    if not ns or _is_staged_delete(staged):
        return []
    value = _staged(network_policy_value(converted), staged.get("spec") or {})
    return [(keys.policy_key("StagedKubernetesNetworkPolicy", ns, key_name),
             dumps(_POLICY, value))]


def tier_kvs(key_name: str, tier: Mapping[str, Any], *, kdd: bool) -> list[tuple[str, bytes]]:
    """``TierKey`` value.  The KDD backend defaults a missing order to 1000000 (and the
    action to Deny) before the processor sees the tier; etcd does not."""
    spec = tier.get("spec") or {}
    order = spec.get("order")
    if order is None and kdd:
        order = DEFAULT_TIER_ORDER
    action = "Pass" if spec.get("defaultAction") == "Pass" else "Deny"
    return [(keys.tier_key(key_name), dumps(_TIER, {"order": order, "defaultAction": action}))]
