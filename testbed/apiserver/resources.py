"""Which resources the test bed serves, and the discovery documents that describe them.

The set follows what Typha's KDD syncers list and watch (trio_typha/model/syncers.py lists them per syncer type): the core
kinds, EndpointSlices, Kubernetes NetworkPolicies, optionally ClusterNetworkPolicies and KubeVirt's
VirtualMachineInstanceMigrations (also once running, as when their CRD is installed later), and the
Calico kinds in ``crd.projectcalico.org/v1`` and/or ``projectcalico.org/v3``.  Calico picks
its API group by discovery, so a group that is not served must be absent from ``/apis``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trio_typha.model import kinds as K

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_STATUS_VERBS = ["get", "patch", "update"]

# Core kinds whose status is only written through the /status subresource.
_STATUS_SUBRESOURCE = frozenset({("", "pods"), ("", "nodes"), ("", "namespaces"),
                                 ("", "services")})
_SHORT_NAMES: dict[tuple[str, str], list[str]] = {
    ("", "pods"): ["po"], ("", "namespaces"): ["ns"], ("", "serviceaccounts"): ["sa"],
    ("", "nodes"): ["no"], ("", "services"): ["svc"], ("", "endpoints"): ["ep"],
    ("networking.k8s.io", "networkpolicies"): ["netpol"],
}

ENDPOINTS = K.ResourceKind("", "v1", "Endpoints", "endpoints", True)

CALICO_GROUPS = (K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP)
# Calico resources derived from other objects (Kubernetes nodes and pods, KubeVirt
# migrations): neither group serves them.  Profiles are derived too under KDD, so there is
# no CRD for them, but Calico's API server does serve them in projectcalico.org/v3.
_DERIVED_CALICO_KINDS = frozenset({"Node", "WorkloadEndpoint", "LiveMigration"})
_NO_CRD_CALICO_KINDS = frozenset({"Profile"})


@dataclass(frozen=True, slots=True)
class ServedKind:
    """One REST resource the test bed serves."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    builtin: bool  # False for custom resources (no strategic merge patch)
    status_subresource: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}/{self.version}"

    def discovery_entries(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {"name": self.plural, "singularName": self.kind.lower(),
                                 "namespaced": self.namespaced, "kind": self.kind,
                                 "verbs": ALL_VERBS}
        if short := _SHORT_NAMES.get(self.key):
            entry["shortNames"] = short
        entries = [entry]
        if self.status_subresource:
            entries.append({"name": f"{self.plural}/status", "singularName": "",
                            "namespaced": self.namespaced, "kind": self.kind,
                            "verbs": _STATUS_VERBS})
        return entries


def served(kind: K.ResourceKind, *, builtin: bool = True) -> ServedKind:
    return ServedKind(kind.group, kind.version, kind.kind, kind.plural, kind.namespaced,
                      builtin, (kind.group, kind.plural) in _STATUS_SUBRESOURCE)


def calico_kinds(group: str) -> list[ServedKind]:
    skip = _DERIVED_CALICO_KINDS | (_NO_CRD_CALICO_KINDS if group == K.CALICO_CRD_GROUP
                                    else frozenset())
    return [served(K.calico_kind(name, group), builtin=False)
            for name, _, _ in K.CALICO_KINDS if name not in skip]


class ApiSurface:
    """The served kinds, looked up by URL, plus discovery documents (pure)."""

    def __init__(self, *, calico_groups: Sequence[str] = (K.CALICO_CRD_GROUP,),
                 cluster_network_policy: bool = False, kubevirt: bool = False) -> None:
        unknown = set(calico_groups) - set(CALICO_GROUPS)
        if unknown:
            raise ValueError(f"unknown Calico API group(s): {sorted(unknown)}")
        self.kinds: tuple[ServedKind, ...] = ()
        self._by_path: dict[tuple[str, str, str], ServedKind] = {}
        self._by_key: dict[tuple[str, str], ServedKind] = {}
        self.versions: dict[str, str] = {}  # group -> its (single) version
        for kind in (K.NAMESPACE, K.POD, K.SERVICE_ACCOUNT, K.NODE, K.SERVICE, ENDPOINTS,
                     K.ENDPOINT_SLICE, K.K8S_NETWORK_POLICY):
            self._add(served(kind))
        if cluster_network_policy:
            self.install(K.K8S_CLUSTER_NETWORK_POLICY)
        if kubevirt:
            self.install(K.KUBEVIRT_MIGRATION)
        for group in calico_groups:
            for calico in calico_kinds(group):
                self._add(calico)

    def install(self, kind: K.ResourceKind) -> ServedKind:
        """Serve ``kind`` as a custom resource from now on, as installing its CRD does (an
        optional API: ClusterNetworkPolicies, KubeVirt's migrations)."""
        if self._by_key.get((kind.group, kind.plural)) is not None:
            raise ValueError(f"{kind} is already served")
        return self._add(served(kind, builtin=False))

    def uninstall(self, kind: K.ResourceKind) -> ServedKind:
        """Stop serving the optional API ``kind``: it leaves discovery and its requests are
        404 (its stored objects stay, for when it is installed again)."""
        served_kind = self._by_key.pop((kind.group, kind.plural), None)
        if served_kind is None or served_kind.builtin:
            raise ValueError(f"{kind} is not an installed optional API")
        self.kinds = tuple(k for k in self.kinds if k is not served_kind)
        del self._by_path[(served_kind.group, served_kind.version, served_kind.plural)]
        if not any(k.group == served_kind.group for k in self.kinds):
            del self.versions[served_kind.group]
        return served_kind

    def _add(self, kind: ServedKind) -> ServedKind:
        self.kinds += (kind,)
        self._by_path[(kind.group, kind.version, kind.plural)] = kind
        self._by_key[kind.key] = kind
        self.versions.setdefault(kind.group, kind.version)
        return kind

    def lookup(self, group: str, version: str, plural: str) -> ServedKind | None:
        return self._by_path.get((group, version, plural))

    def by_key(self, group: str, plural: str) -> ServedKind | None:
        return self._by_key.get((group, plural))

    def for_kind(self, kind: Any) -> ServedKind:
        """The served kind for a ServedKind/ResourceKind-like value (KeyError if not served)."""
        found = self._by_key.get((kind.group, kind.plural))
        if found is None:
            raise KeyError(f"{kind} is not served by this test bed")
        return found

    def _in_group(self, group: str) -> Iterable[ServedKind]:
        return (k for k in self.kinds if k.group == group)

    # -- discovery documents -----------------------------------------------------------

    def api_versions(self, server_address: str) -> dict[str, Any]:
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": server_address}]}

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        if self.versions.get(group) != version:
            return None
        resources = [e for k in self._in_group(group) for e in k.discovery_entries()]
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": resources}

    def _group_body(self, group: str) -> dict[str, Any]:
        gv = {"groupVersion": f"{group}/{self.versions[group]}", "version": self.versions[group]}
        return {"name": group, "versions": [gv], "preferredVersion": gv}

    def group(self, group: str) -> dict[str, Any] | None:
        if not group or group not in self.versions:
            return None
        return {"kind": "APIGroup", "apiVersion": "v1", **self._group_body(group)}

    def group_list(self) -> dict[str, Any]:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group_body(g) for g in self.versions if g]}
