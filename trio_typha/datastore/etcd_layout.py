"""Where Calico keeps its data in etcd, and how a stored value becomes an object.

libcalico-go's etcdv3 backend stores each ``projectcalico.org/v3`` resource as the JSON of
the whole object at ``/calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>``
(names and namespaces cannot contain ``/``, so they are not escaped).

IPAM is the exception: blocks and block affinities are stored as the v1 model, at the very
key paths Typha sends (``/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26``,
``/calico/ipam/v2/host/<node>/ipv4/block/10.0.0.0-26``).  The syncer definitions still name
them by their v3 kinds, ``IPAMBlock`` and ``BlockAffinity``; here such an entry is
identified by the key Typha would send for it (its ``name``, with no namespace) and becomes
the object :func:`trio_typha.model.ipam.etcd_v1_object` describes.  Pure functions only.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from ..model import ipam
from ..model.jsonload import loads
from ..model.kinds import CALICO_V3_GROUP, ResourceKind, calico_kind
from .etcd_rpc import prefix_end

RESOURCES_ROOT = f"/calico/resources/v3/{CALICO_V3_GROUP}/"

# Kinds stored as the v1 model: where the syncers list them.
_V1_PREFIXES = {"IPAMBlock": ipam.ETCD_BLOCK_PREFIX, "BlockAffinity": ipam.ETCD_AFFINITY_PREFIX}


def _check_stored(kind: ResourceKind) -> None:
    if kind.group != CALICO_V3_GROUP or kind.version != "v3":
        raise ValueError(f"{kind} is not stored in etcd: only {CALICO_V3_GROUP}/v3 kinds are")


def is_v1_layout(kind: ResourceKind) -> bool:
    """Whether etcd keeps ``kind`` as the v1 model at v1 key paths (IPAM) rather than as
    v3 objects."""
    return kind.group == CALICO_V3_GROUP and kind.version == "v3" and kind.kind in _V1_PREFIXES


def kind_prefix(kind: ResourceKind) -> str:
    """The key prefix under which every object of ``kind`` lives.

    Raises ValueError for kinds etcd mode does not store (Kubernetes built-ins, the CRD
    group).
    """
    _check_stored(kind)
    v1 = _V1_PREFIXES.get(kind.kind)
    return v1 if v1 is not None else f"{RESOURCES_ROOT}{kind.plural}/"


def resource_key(kind: ResourceKind, namespace: str, name: str) -> str:
    """The etcd key of one v3 object; ``namespace`` is required exactly for namespaced
    kinds.  Raises ValueError for kinds stored at v1 paths."""
    if is_v1_layout(kind):
        raise ValueError(f"{kind.kind} is stored at v1 keys, not as v3 objects")
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

    The plurals sort next to each other under one root, and the IPAM prefixes
    (``/calico/ipam/...``) just before it, so one watch over this span sees all the kinds
    (and possibly other keys in between, such as IPAM handles, which the caller skips).
    """
    prefixes = sorted(kind_prefix(k).encode() for k in kinds)
    if not prefixes:
        raise ValueError("no kinds to watch")
    return prefixes[0], prefix_end(prefixes[-1])


class KeyParser:
    """Maps keys back to ``(kind, namespace, name)`` for a fixed set of kinds.

    A v1-layout entry's name is the v1 key Typha sends for it, so two paths Calico reads as
    the same key (``10.0.0.7-26`` and ``10.0.0.0-26``) are one object, as in Calico.
    """

    def __init__(self, kinds: Iterable[ResourceKind]) -> None:
        kinds = list(kinds)
        for k in kinds:
            kind_prefix(k)  # validate early
        self._by_plural = {k.plural: k for k in kinds if not is_v1_layout(k)}
        self._v1: list[tuple[bytes, ResourceKind, Callable[[str], str | None]]] = [
            (kind_prefix(k).encode(), k, partial(ipam.etcd_key_from_path, k.kind))
            for k in kinds if is_v1_layout(k)]

    def parse(self, key: bytes) -> tuple[ResourceKind, str, str] | None:
        """None for keys outside these kinds, or malformed ones."""
        root = RESOURCES_ROOT.encode()
        if not key.startswith(root):
            return self._parse_v1(key)
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

    def _parse_v1(self, key: bytes) -> tuple[ResourceKind, str, str] | None:
        for prefix, kind, key_from_path in self._v1:
            if key.startswith(prefix):
                try:
                    name = key_from_path(key.decode())
                except UnicodeDecodeError:
                    return None
                return None if name is None else (kind, "", name)
        return None


def decode_value(kind: ResourceKind, name: str, value: bytes) -> dict[str, Any]:
    """The object the entry ``name`` (as :class:`KeyParser` gives it) of ``kind`` stands
    for: :func:`decode_resource`, or for v1-layout kinds
    :func:`~trio_typha.model.ipam.etcd_v1_object`.  Raises ValueError for undecodable
    values."""
    if is_v1_layout(kind):
        return ipam.etcd_v1_object(kind.kind, name, value)
    return decode_resource(kind, value)


def decode_resource(kind: ResourceKind, value: bytes) -> dict[str, Any]:
    """The v3 object stored in an etcd value; ``apiVersion`` and ``kind`` filled in if absent.

    Raises ValueError if the value is not a JSON object, or ``kind`` is not stored as v3
    objects.
    """
    if is_v1_layout(kind):
        raise ValueError(f"{kind.kind} is stored as the v1 model: use decode_value")
    try:
        obj = loads(value)
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, JSONTooDeep
        raise ValueError(f"value is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"value is JSON {type(obj).__name__}, not an object")
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    return obj
