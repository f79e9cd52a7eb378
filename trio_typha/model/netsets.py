"""NetworkSets and GlobalNetworkSets → v1 ``NetworkSetKey`` values
(``networksetprocessor.go``, ``globalnetworksetprocessor.go``)."""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping
from typing import Any

from . import keys
from .gojson import dumps
from .goschema import ROOTS
from .rules import LABEL_NAMESPACE, convert_nets

_NETSET = ROOTS["v1.NetworkSet"]


def network_set_kvs(key_name: str, netset: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """Namespaced NetworkSet: key ``<ns>/<name>``, the namespace added as a label and the
    namespace's profile as the only profile."""
    md = netset.get("metadata") or {}
    ns = md.get("namespace") or ""
    if not key_name or not ns:
        return []
    labels = dict(md.get("labels") or {})
    labels[LABEL_NAMESPACE] = ns
    value = {"nets": convert_nets((netset.get("spec") or {}).get("nets")),
             "labels": labels, "profile_ids": ["kns." + ns]}
    return [(keys.network_set_key(f"{ns}/{key_name}"), dumps(_NETSET, value))]


def global_network_set_kvs(gns: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """GlobalNetworkSet: key = its name; labels as given (``null`` when none)."""
    md = gns.get("metadata") or {}
    value = {"nets": convert_nets((gns.get("spec") or {}).get("nets")),
             "labels": md.get("labels")}
    return [(keys.network_set_key(md.get("name") or ""), dumps(_NETSET, value))]
