"""Where Calico keeps its v3 resources in etcd, and how a stored value becomes an object.

libcalico-go's etcdv3 backend stores each ``projectcalico.org/v3`` resource as the JSON of
the whole object at ``/calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>``
(names and namespaces cannot contain ``/``, so they are not escaped).  Pure functions only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..model.kinds import CALICO_V3_GROUP, ResourceKind, calico_kind
from .etcd_gateway import prefix_end

RESOURCES_ROOT = f"/calico/resources/v3/{CALICO_V3_GROUP}/"


def kind_prefix(kind: ResourceKind) -> str:
    """The key prefix under which every object of ``kind`` lives.

    Raises ValueError for kinds etcd mode does not store as v3 resources (Kubernetes
    built-ins, the CRD group).
    """
    if kind.group != CALICO_V3_GROUP or kind.version != "v3":
        raise ValueError(f"{kind} is not stored in etcd: only {CALICO_V3_GROUP}/v3 kinds are")
    return f"{RESOURCES_ROOT}{kind.plural}/"


def resource_key(kind: ResourceKind, namespace: str, name: str) -> str:
    """The etcd key of one object; ``namespace`` is required exactly for namespaced kinds."""
    if not name or "/" in name:
        raise ValueError(f"invalid {kind.kind} name {name!r}")
    if kind.namespaced:
        if not namespace or "/" in namespace:
            raise ValueError(f"{kind.kind} {name!r} needs a namespace (got {namespace!r})")
        return f"{kind_prefix(kind)}{namespace}/{name}"
    if namespace:
        raise ValueError(f"{kind.kind} is not namespaced (got namespace {namespace!r})")
    return f"{kind_prefix(kind)}{name}"


def object_key(obj: Mapping[str, Any]) -> str:
    """The etcd key of a ``projectcalico.org/v3`` object dict (from its kind and metadata)."""
    if obj.get("apiVersion") != f"{CALICO_V3_GROUP}/v3":
        raise ValueError(f"not a {CALICO_V3_GROUP}/v3 object: apiVersion {obj.get('apiVersion')!r}")
    kind = calico_kind(str(obj.get("kind")))
    md = obj.get("metadata") or {}
    return resource_key(kind, md.get("namespace", "") if kind.namespaced else "",
                        md.get("name", ""))


def watch_span(kinds: Iterable[ResourceKind]) -> tuple[bytes, bytes]:
    """The smallest key range ``[start, end)`` holding every object of ``kinds``.

    The plurals sort next to each other under one root, so one watch over this span sees
    all the kinds (and possibly others in between, which the caller skips).
    """
    prefixes = sorted(kind_prefix(k).encode() for k in kinds)
    if not prefixes:
        raise ValueError("no kinds to watch")
    return prefixes[0], prefix_end(prefixes[-1])


class KeyParser:
    """Maps keys back to ``(kind, namespace, name)`` for a fixed set of kinds."""

    def __init__(self, kinds: Iterable[ResourceKind]) -> None:
        self._by_plural = {k.plural: k for k in kinds}
        for k in self._by_plural.values():
            kind_prefix(k)  # validate early

    def parse(self, key: bytes) -> tuple[ResourceKind, str, str] | None:
        """None for keys outside these kinds, or malformed ones."""
        root = RESOURCES_ROOT.encode()
        if not key.startswith(root):
            return None
        try:
            rest = key[len(root):].decode()
        except UnicodeDecodeError:
            return None
        plural, _, path = rest.partition("/")
        kind = self._by_plural.get(plural)
        if kind is None:
            return None
        parts = path.split("/")
        if kind.namespaced:
            if len(parts) != 2 or not all(parts):
                return None
            return kind, parts[0], parts[1]
        if len(parts) != 1 or not parts[0]:
            return None
        return kind, "", parts[0]


def decode_resource(kind: ResourceKind, value: bytes) -> dict[str, Any]:
    """The object stored in an etcd value; ``apiVersion`` and ``kind`` filled in if absent.

    Raises ValueError if the value is not a JSON object.
    """
    try:
        obj = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"value is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"value is JSON {type(obj).__name__}, not an object")
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj
