"""Syncer definitions: which kinds each syncer type watches and how each converts.

PLACEHOLDER contract implementation (v3 passthrough for everything); the byte-exact model
replaces the body of this module but keeps its interface.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import kinds as K
from .kinds import ResourceKind


class DatastoreMode(enum.Enum):
    KDD = "kubernetes"
    ETCD = "etcdv3"


@dataclass(frozen=True, slots=True)
class ConvertedKV:
    key: str
    value: bytes
    v3_resource_version: str = ""


@dataclass(frozen=True)
class SyncerDefinition:
    syncer_type: str
    kinds: tuple[ResourceKind, ...]
    convert: Callable[[ResourceKind, Mapping[str, Any]], list[ConvertedKV]]
    static_kvs: tuple[ConvertedKV, ...] = ()


def _passthrough(kind: ResourceKind, obj: Mapping[str, Any]) -> list[ConvertedKV]:
    md = obj.get("metadata", {})
    ns = md.get("namespace", "")
    path = f"{ns}/{md['name']}" if kind.namespaced else md["name"]
    key = f"/calico/resources/v3/{kind.group or 'core'}/{kind.plural}/{path}"
    return [ConvertedKV(key, json.dumps(obj, separators=(",", ":"), sort_keys=True).encode())]


def syncer_definition(syncer_type: str, mode: DatastoreMode = DatastoreMode.KDD, *,
                      calico_group: str = K.CALICO_V3_GROUP,
                      use_pod_cidr: bool = False) -> SyncerDefinition:
    c = lambda k: K.calico_kind(k, calico_group)  # noqa: E731
    if syncer_type == "felix":
        kinds = (K.POD, K.NAMESPACE, K.SERVICE_ACCOUNT, K.NODE, K.K8S_NETWORK_POLICY,
                 c("NetworkPolicy"), c("GlobalNetworkPolicy"), c("Tier"), c("IPPool"))
    elif syncer_type == "bgp":
        kinds = (K.NODE, c("IPPool"), c("BGPConfiguration"), c("BGPPeer"))
    elif syncer_type == "tunnel-ip-allocation":
        kinds = (K.NODE, c("IPPool"))
    elif syncer_type == "node-status":
        kinds = (c("CalicoNodeStatus"),)
    else:
        raise KeyError(syncer_type)
    return SyncerDefinition(syncer_type, kinds, _passthrough)
