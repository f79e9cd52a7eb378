"""Syncer definitions: which kinds each syncer type watches and how each converts.

One :class:`SyncerDefinition` per (syncer type, datastore mode) mirrors
``libcalico-go/lib/backend/syncersv1/{felixsyncer,bgpsyncer,tunnelipsyncer,
nodestatussyncer}`` as Typha v3.32.1 builds them (felix as leader, BGP and tunnel syncers
for all nodes).  ``convert(kind, obj)`` returns every serialized KV one source object yields,
deterministically and without state: the pipeline diffs successive results per object into
new / updated / deleted updates, which also covers the update processors' habit of emitting
``nil`` values for keys that went away.

Objects Calico's backend or update processors refuse (undecodable fields, bad UIDs, bad
CIDRs, ...) raise the model's ``ValueError`` family inside the conversion and yield no KVs,
with one warning naming the object; the pipeline turns that into deletions of whatever they
yielded before, the way Typha treats them as deleted.  Any other exception is a bug and
propagates.
"""

from __future__ import annotations

__sans_io__ = True

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from . import kinds as K
from .crd import crd_to_v3
from .endpoints import host_endpoint_kvs, workload_endpoint_kvs
from .felix_config import config_kvs
from .goschema import ROOTS
from .ipam import block_affinity_kvs, etcd_v1_kvs, ip_pool_kvs, ipam_block_kvs, is_etcd_v1_object
from .k8s_cluster_policy import (
    KUBERNETES_CLUSTER_NETWORK_POLICY_KIND,
    cluster_network_policy_to_calico,
)
from .keys import RESOURCE_KEY_PREFIX
from .kinds import ResourceKind
from .kubevirt import vmim_to_live_migration
from .netsets import global_network_set_kvs, network_set_kvs
from .nodes import felix_node_kvs
from .passthrough import resource_kv
from .policy import policy_kvs, staged_k8s_policy_as_k8s, staged_k8s_policy_kvs, tier_kvs
from .profiles import profile_kvs
from .shape import check_shape, field_map, field_str, root

log = logging.getLogger(__name__)

#: What a conversion raises for an object Calico would refuse: the model's own ``ValueError``
#: family (``MalformedResource`` for the wrong shape, ``GoJSONError``, ``SelectorError``,
#: CRD and Kubernetes conversion errors).  Anything else is a bug in the conversion and
#: propagates: treating the object as absent would withdraw its keys from every client.
REFUSED: tuple[type[Exception], ...] = (ValueError,)

# Kinds whose decoded object is checked against its Go struct layout before conversion.
_SHAPE_CHECKED = frozenset(ROOTS)
# Kinds whose crd.projectcalico.org/v1 form has its own layout, internalapi's
# (libcalico-go/lib/apis/crd.projectcalico.org/v1): a BlockAffinity's ``deleted`` is a
# string there.
_CRD_LAYOUT = frozenset({"IPAMBlock", "BlockAffinity"})


class DatastoreMode(enum.Enum):
    KDD = "kubernetes"
    ETCD = "etcdv3"


@dataclass(frozen=True, slots=True)
class ConvertedKV:
    key: str
    value: bytes
    v3_resource_version: str = ""


class Converter(Protocol):
    def __call__(self, kind: ResourceKind, obj: Mapping[str, Any], *,
                 key: tuple[str, str] | None = None) -> list[ConvertedKV]: ...


@dataclass(frozen=True)
class SyncerDefinition:
    syncer_type: str
    kinds: tuple[ResourceKind, ...]
    convert: Converter
    static_kvs: tuple[ConvertedKV, ...] = ()
    #: Revision of the static KVs: Calico's in-memory default-allow profile is revision "1".
    static_revision: str = "1"

    def source_revision(self, kind: ResourceKind, revision: str) -> str:
        """The Revision Typha sends for KVs derived from an object at ``revision``.

        KDD profiles combine a namespace's and a service account's versions into one
        revision string, ``"<nsRV>/"`` for ``kns.*`` and ``"/<saRV>"`` for ``ksa.*``.
        """
        if kind == K.NAMESPACE:
            return f"{revision}/"
        if kind == K.SERVICE_ACCOUNT:
            return f"/{revision}"
        return revision

    def stamped_v3_resource_version(self, kind: ResourceKind, key: str,
                                    v3_resource_version: str, stamp: str) -> str:
        """The V3ResourceVersion Typha sends for the KV ``key`` derived from a Namespace or
        ServiceAccount that Calico's KDD profile watcher stamped with ``stamp``
        (``trio_typha.datastore.k8s_profile_watch``).

        Only the v3 Profile value carries a resourceVersion, so only its KV takes the stamp;
        the labels and rules keys keep what the conversion gave them.
        """
        if kind in (K.NAMESPACE, K.SERVICE_ACCOUNT) and key.startswith(RESOURCE_KEY_PREFIX):
            return stamp
        return v3_resource_version


DEFAULT_ALLOW_PROFILE_NAME = "projectcalico-default-allow"

# Calico kinds each syncer watches, in the order the Go syncers list them.  KDD derives
# Profiles, WorkloadEndpoints and Nodes from Kubernetes objects instead of Calico ones, and
# LiveMigrations from KubeVirt's VirtualMachineInstanceMigrations.
_FELIX_CALICO = ("ClusterInformation", "FelixConfiguration", "GlobalNetworkPolicy",
                 "StagedGlobalNetworkPolicy", "GlobalNetworkSet", "IPPool", "Node", "Profile",
                 "WorkloadEndpoint", "NetworkPolicy", "StagedNetworkPolicy",
                 "StagedKubernetesNetworkPolicy", "NetworkSet", "Tier", "HostEndpoint",
                 "BGPConfiguration", "BGPPeer", "LiveMigration")
_KDD_FROM_KUBERNETES = frozenset({"Node", "Profile", "WorkloadEndpoint", "LiveMigration"})
_BGP_CALICO = ("IPPool", "BGPConfiguration", "Node", "BGPPeer", "BGPFilter")
_TUNNEL_CALICO = ("IPPool", "Node")

# Kinds etcd stores as the v1 model at v1 keys (``model.ipam.etcd_v1_object``); their v3
# form (seed files, tests) still converts like any v3 object.
_ETCD_V1_LAYOUT = frozenset({"IPAMBlock", "BlockAffinity"})

# Kinds whose v3 object goes out as it is.
_PASSTHROUGH = frozenset({"BGPConfiguration", "BGPPeer", "BGPFilter", "CalicoNodeStatus",
                          "LiveMigration"})


def _kinds(syncer_type: str, mode: DatastoreMode, calico_group: str,
           use_pod_cidr: bool) -> tuple[ResourceKind, ...]:
    kdd = mode is DatastoreMode.KDD
    group = calico_group if kdd else K.CALICO_V3_GROUP

    def calico(names: tuple[str, ...]) -> list[ResourceKind]:
        return [K.calico_kind(n, group) for n in names
                if not (kdd and n in _KDD_FROM_KUBERNETES)]

    if syncer_type == "felix":
        out = calico(_FELIX_CALICO)
        if kdd:
            out += [K.POD, K.NAMESPACE, K.SERVICE_ACCOUNT, K.NODE, K.KUBEVIRT_MIGRATION,
                    K.K8S_NETWORK_POLICY, K.K8S_CLUSTER_NETWORK_POLICY, K.ENDPOINT_SLICE,
                    K.SERVICE]
        if not use_pod_cidr:
            out.append(K.calico_kind("IPAMBlock", group))
    elif syncer_type == "bgp":
        out = calico(_BGP_CALICO) + ([K.NODE] if kdd else [])
        if not use_pod_cidr:
            out.append(K.calico_kind("BlockAffinity", group))
    elif syncer_type == "tunnel-ip-allocation":
        out = calico(_TUNNEL_CALICO) + ([K.NODE] if kdd else [])
    elif syncer_type == "node-status":
        out = [K.calico_kind("CalicoNodeStatus", group)]
    else:
        raise KeyError(f"unknown syncer type {syncer_type!r}")
    return tuple(out)


class _Converter:
    """``convert`` of one syncer definition."""

    def __init__(self, syncer_type: str, mode: DatastoreMode, use_pod_cidr: bool,
                 interface_prefix: str | None) -> None:
        self.syncer_type = syncer_type
        self.mode = mode
        self.use_pod_cidr = use_pod_cidr
        self.interface_prefix = interface_prefix

    def __call__(self, kind: ResourceKind, obj: Mapping[str, Any], *,
                 key: tuple[str, str] | None = None) -> list[ConvertedKV]:
        """Every KV of ``obj``; ``key`` is the ``(namespace, name)`` the datastore stores it
        under, which in etcd mode names the resource whatever its ``metadata`` says (as
        Calico's etcdv3 backend parses the ResourceKey from the etcd key)."""
        try:
            triples = self._convert(kind, root(obj), key)
        except REFUSED as e:
            md = obj.get("metadata") if isinstance(obj, Mapping) else None
            md = md if isinstance(md, Mapping) else {}
            namespace, name = key if key is not None else (md.get("namespace"), md.get("name"))
            log.warning("The %s syncer treats %s %s/%s as absent: it does not convert: %s",
                        self.syncer_type, kind.kind, namespace or "", name or "", e)
            return []
        return [ConvertedKV(k, v, rv) for k, v, rv in triples]

    # -- dispatch ---------------------------------------------------------------------------

    def _convert(self, kind: ResourceKind, obj: Mapping[str, Any],
                 key: tuple[str, str] | None) -> list[tuple[str, bytes, str]]:
        if kind.group in (K.CALICO_V3_GROUP, K.CALICO_CRD_GROUP):
            if (self.mode is DatastoreMode.ETCD and kind.kind in _ETCD_V1_LAYOUT
                    and is_etcd_v1_object(obj)):
                # Blocks and affinities as etcd stores them: the v1 key and value.
                if kind.kind == "IPAMBlock" and self.syncer_type != "felix":
                    return []
                return _no_rv(etcd_v1_kvs(kind.kind, obj))
            if kind.group == K.CALICO_CRD_GROUP:
                key_name, v3 = crd_to_v3(kind.kind, obj)
            else:
                v3 = dict(obj)
                v3.setdefault("kind", kind.kind)
                v3.setdefault("apiVersion", "projectcalico.org/v3")
                key_name = field_str(field_map(obj, "metadata"), "name")
            crd = kind.group == K.CALICO_CRD_GROUP
            if kind.kind in _SHAPE_CHECKED:
                layout = (f"{kind.kind}Internal" if crd and kind.kind in _CRD_LAYOUT
                          else kind.kind)
                check_shape(ROOTS[layout], v3)
            if self.mode is DatastoreMode.ETCD and key is not None:
                # The etcd key names the resource; v3 values still go out as stored.
                namespace, key_name = key
                return self._calico(kind.kind, key_name, _named(v3, namespace, key_name),
                                    body=v3, crd=crd)
            return self._calico(kind.kind, key_name, v3, crd=crd)
        return self._kubernetes(kind, obj)

    def _kubernetes(self, kind: ResourceKind, obj: Mapping[str, Any]
                    ) -> list[tuple[str, bytes, str]]:
        from . import k8s  # part B's conversions (imported lazily)

        if kind == K.NODE:
            node = k8s.node_to_calico_node(obj, use_pod_cidr=self.use_pod_cidr)
            return self._node(node)
        if self.syncer_type != "felix":
            return []
        if kind == K.POD:
            if self.interface_prefix is not None:
                wep = k8s.pod_to_workload_endpoint(obj, interface_prefix=self.interface_prefix)
            else:
                wep = k8s.pod_to_workload_endpoint(obj)
            return [] if wep is None else _no_rv(workload_endpoint_kvs(wep))
        if kind in (K.NAMESPACE, K.SERVICE_ACCOUNT):
            profile = (k8s.namespace_to_profile(obj) if kind == K.NAMESPACE
                       else k8s.service_account_to_profile(obj))
            return profile_kvs((profile.get("metadata") or {}).get("name") or "", profile)
        if kind == K.K8S_NETWORK_POLICY:
            policy = k8s.k8s_network_policy_to_calico(obj)
            name = field_str(field_map(obj, "metadata"), "name")
            return _no_rv(policy_kvs("KubernetesNetworkPolicy", name, policy))
        if kind == K.K8S_CLUSTER_NETWORK_POLICY:
            cluster_policy = cluster_network_policy_to_calico(obj)
            if cluster_policy is None:  # a tombstone: whatever it yielded before goes
                return []
            name = field_str(field_map(obj, "metadata"), "name")
            return _no_rv(policy_kvs(KUBERNETES_CLUSTER_NETWORK_POLICY_KIND, name,
                                     cluster_policy))
        if kind == K.KUBEVIRT_MIGRATION:
            migration = vmim_to_live_migration(obj)
            return [] if migration is None else [resource_kv("LiveMigration", migration)]
        if kind in (K.SERVICE, K.ENDPOINT_SLICE):
            check_shape(ROOTS[kind.kind], obj)
        if kind == K.SERVICE:
            return [resource_kv("KubernetesService", k8s.service_passthrough(obj),
                                schema="Service", stamp=False)]
        if kind == K.ENDPOINT_SLICE:
            return [resource_kv("KubernetesEndpointSlice", k8s.endpoint_slice_passthrough(obj),
                                schema="EndpointSlice", stamp=False)]
        return []

    def _node(self, node: Mapping[str, Any], body: Mapping[str, Any] | None = None
              ) -> list[tuple[str, bytes, str]]:
        if self.syncer_type == "felix":
            return felix_node_kvs(node, use_pod_cidr=self.use_pod_cidr)
        name = (node.get("metadata") or {}).get("name") or ""
        return [resource_kv("Node", node if body is None else body, key_name=name)]

    def _calico(self, kind: str, key_name: str, obj: Mapping[str, Any],
                body: Mapping[str, Any] | None = None, *, crd: bool = False
                ) -> list[tuple[str, bytes, str]]:
        """KVs of the v3 ``obj`` named ``key_name``; ``body`` (default ``obj``) is what the
        kinds sent as v3 resources carry as their value; ``crd``: ``obj`` was converted from
        a ``crd.projectcalico.org/v1`` object, whose field types can differ."""
        felix = self.syncer_type == "felix"
        value = obj if body is None else body
        if kind == "IPPool":
            return _no_rv(ip_pool_kvs(obj))
        if kind == "Node":
            return self._node(obj, value)
        if kind in _PASSTHROUGH:
            namespace = (obj.get("metadata") or {}).get("namespace") or ""
            return [resource_kv(kind, value, key_name=key_name, key_namespace=namespace)]
        if kind == "BlockAffinity":
            return _no_rv(block_affinity_kvs(obj, crd=crd))
        if not felix:
            return []
        if kind in ("ClusterInformation", "FelixConfiguration"):
            return config_kvs(kind, key_name, value)
        if kind in ("GlobalNetworkPolicy", "StagedGlobalNetworkPolicy", "NetworkPolicy",
                    "StagedNetworkPolicy"):
            return _no_rv(policy_kvs(kind, key_name, obj))
        if kind == "StagedKubernetesNetworkPolicy":
            if (obj.get("spec") or {}).get("stagedAction") == "Delete":
                return []
            from . import k8s

            converted = k8s.k8s_network_policy_to_calico(staged_k8s_policy_as_k8s(obj))
            return _no_rv(staged_k8s_policy_kvs(key_name, obj, converted))
        if kind == "GlobalNetworkSet":
            return _no_rv(global_network_set_kvs(obj))
        if kind == "NetworkSet":
            return _no_rv(network_set_kvs(key_name, obj))
        if kind == "Tier":
            return _no_rv(tier_kvs(key_name, obj, kdd=self.mode is DatastoreMode.KDD))
        if kind == "HostEndpoint":
            return _no_rv(host_endpoint_kvs(obj))
        if kind == "Profile":
            return profile_kvs(key_name, value)
        if kind == "WorkloadEndpoint":
            return _no_rv(workload_endpoint_kvs(obj))
        if kind == "IPAMBlock":
            return _no_rv(ipam_block_kvs(obj))
        return []


def _named(obj: Mapping[str, Any], namespace: str, name: str) -> Mapping[str, Any]:
    """``obj`` with ``metadata.name``/``namespace`` set to the datastore key's."""
    md = obj.get("metadata") or {}
    if md.get("name") == name and (md.get("namespace") or "") == namespace:
        return obj
    named = {k: v for k, v in md.items() if k != "namespace"}
    named["name"] = name
    if namespace:
        named["namespace"] = namespace
    return {**obj, "metadata": named}


def _no_rv(kvs: list[tuple[str, bytes]]) -> list[tuple[str, bytes, str]]:
    return [(k, v, "") for k, v in kvs]


def default_allow_profile_kvs() -> tuple[ConvertedKV, ...]:
    """The always-present ``projectcalico-default-allow`` profile's KVs (rules and the v3
    object; it has no labels)."""
    from . import k8s

    return tuple(ConvertedKV(k, v, rv) for k, v, rv in
                 profile_kvs(DEFAULT_ALLOW_PROFILE_NAME, k8s.DEFAULT_ALLOW_PROFILE))


def syncer_definition(syncer_type: str, mode: DatastoreMode = DatastoreMode.KDD, *,
                      calico_group: str = K.CALICO_V3_GROUP,
                      use_pod_cidr: bool = False,
                      felix_interface_prefix: str | None = None) -> SyncerDefinition:
    """The definition of ``syncer_type`` for a datastore in ``mode``.

    ``calico_group`` is the API group KDD reads Calico resources from
    (``projectcalico.org`` v3 objects, or ``crd.projectcalico.org`` v1 CRDs converted on the
    way in); etcd mode always reads projectcalico.org/v3 objects, except IPAM blocks and
    affinities, which arrive as ``model.ipam.etcd_v1_object`` objects.  ``use_pod_cidr`` is
    Calico's ``USE_POD_CIDR`` (host-local IPAM: no IPAM blocks or affinities are watched and
    the felix syncer synthesizes a block per node pod CIDR).  ``felix_interface_prefix`` is
    the raw value of Felix's ``FELIX_INTERFACEPREFIX`` as the caller found it in Typha's
    environment (None when unset); the KDD felix syncer names workload interfaces after its
    first entry, as Calico's pod conversion does.  The model never reads the environment.
    """
    kinds = _kinds(syncer_type, mode, calico_group, use_pod_cidr)
    prefix = None
    if (felix_interface_prefix is not None and syncer_type == "felix"
            and mode is DatastoreMode.KDD):
        from . import k8s

        prefix = k8s.interface_prefix_from_env(felix_interface_prefix)
    static = default_allow_profile_kvs() if syncer_type == "felix" else ()
    return SyncerDefinition(syncer_type, kinds,
                            _Converter(syncer_type, mode, use_pod_cidr, prefix), static)


__all__ = ["ConvertedKV", "DatastoreMode", "SyncerDefinition", "default_allow_profile_kvs",
           "syncer_definition"]
