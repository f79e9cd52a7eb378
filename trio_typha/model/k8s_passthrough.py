"""Kubernetes Services and EndpointSlices as Calico's KDD backend passes them through.

Calico's felix syncer carries ``core/v1`` Services and ``discovery/v1`` EndpointSlices
unconverted (ResourceKey kinds ``KubernetesService`` / ``KubernetesEndpointSlice``,
revision = the object's ``resourceVersion``): the value is a deep copy of the typed Go
object read through client-go (``ServiceToKVP`` / ``EndpointSliceToKVP`` in
libcalico-go v3.32.1 ``k8s/conversion/conversion.go``).  Marshalling that typed object is
not the same as echoing the API server's JSON, so this module replays the round trip:

* ``kind``/``apiVersion`` are gone (typed client-go decoders clear them);
* fields the k8s.io/api v0.35.6 structs do not have are dropped;
* fields without ``omitempty`` are always present (``null`` for an absent list, which is
  also what an empty list becomes on Calico's protobuf connection), struct-typed fields
  always present (json-iterator never omits a struct), ``omitempty`` fields dropped when
  empty;
* times are re-printed as RFC 3339 UTC seconds, maps sorted by key;
* ``managedFields[].fieldsV1`` is raw JSON in Go and is kept exactly as given.

``metadata.resourceVersion`` is kept; Typha moves it out of the value when serializing.
"""

from __future__ import annotations

__sans_io__ = True

import copy
from collections.abc import Mapping
from typing import Any

from .k8s_meta import go_time, sorted_map

# Field kinds of the schema below.
_STR = "str"            # string, omitempty
_STR_REQ = "str!"       # string without omitempty: "" when absent
_INT = "int"            # integer, omitempty
_INT_REQ = "int!"       # integer without omitempty: 0 when absent
_BOOL = "bool"          # bool, omitempty
_PTR = "ptr"            # pointer to a scalar: present iff set (zero values kept)
_MAP = "map"            # map[string]string, omitempty
_STRS = "strs"          # []string, omitempty
_STRS_REQ = "strs!"     # []string without omitempty: null when absent or empty
_TIME = "time"          # metav1.Time (a struct with a marshaler): always present
_PTR_TIME = "ptrtime"   # *metav1.Time
_RAW = "raw"            # *FieldsV1: raw JSON, kept as given
_INT_OR_STR = "intstr"  # intstr.IntOrString (a struct): always present, 0 when absent

Schema = tuple[tuple[str, Any], ...]
# Composite field kinds: ("struct", schema) always present; ("ptr", schema) present iff
# set; ("list", schema) omitempty list; ("list!", schema) list without omitempty.

_OWNER_REFERENCE: Schema = (
    ("apiVersion", _STR_REQ), ("kind", _STR_REQ), ("name", _STR_REQ), ("uid", _STR_REQ),
    ("controller", _PTR), ("blockOwnerDeletion", _PTR),
)
_MANAGED_FIELDS_ENTRY: Schema = (
    ("manager", _STR), ("operation", _STR), ("apiVersion", _STR), ("time", _PTR_TIME),
    ("fieldsType", _STR), ("fieldsV1", _RAW), ("subresource", _STR),
)
_OBJECT_META: Schema = (
    ("name", _STR), ("generateName", _STR), ("namespace", _STR), ("selfLink", _STR),
    ("uid", _STR), ("resourceVersion", _STR), ("generation", _INT),
    ("creationTimestamp", _TIME), ("deletionTimestamp", _PTR_TIME),
    ("deletionGracePeriodSeconds", _PTR), ("labels", _MAP), ("annotations", _MAP),
    ("ownerReferences", ("list", _OWNER_REFERENCE)), ("finalizers", _STRS),
    ("managedFields", ("list", _MANAGED_FIELDS_ENTRY)),
)
_CONDITION: Schema = (
    ("type", _STR_REQ), ("status", _STR_REQ), ("observedGeneration", _INT),
    ("lastTransitionTime", _TIME), ("reason", _STR_REQ), ("message", _STR_REQ),
)
_SERVICE_PORT: Schema = (
    ("name", _STR), ("protocol", _STR), ("appProtocol", _PTR), ("port", _INT_REQ),
    ("targetPort", _INT_OR_STR), ("nodePort", _INT),
)
_SERVICE_SPEC: Schema = (
    ("ports", ("list", _SERVICE_PORT)), ("selector", _MAP), ("clusterIP", _STR),
    ("clusterIPs", _STRS), ("type", _STR), ("externalIPs", _STRS),
    ("sessionAffinity", _STR), ("loadBalancerIP", _STR),
    ("loadBalancerSourceRanges", _STRS), ("externalName", _STR),
    ("externalTrafficPolicy", _STR), ("healthCheckNodePort", _INT),
    ("publishNotReadyAddresses", _BOOL),
    ("sessionAffinityConfig", ("ptr", (("clientIP", ("ptr", (("timeoutSeconds", _PTR),))),))),
    ("ipFamilies", _STRS), ("ipFamilyPolicy", _PTR), ("allocateLoadBalancerNodePorts", _PTR),
    ("loadBalancerClass", _PTR), ("internalTrafficPolicy", _PTR),
    ("trafficDistribution", _PTR),
)
_PORT_STATUS: Schema = (("port", _INT_REQ), ("protocol", _STR_REQ), ("error", _PTR))
_LOAD_BALANCER_INGRESS: Schema = (
    ("ip", _STR), ("hostname", _STR), ("ipMode", _PTR), ("ports", ("list", _PORT_STATUS)),
)
_SERVICE_STATUS: Schema = (
    ("loadBalancer", ("struct", (("ingress", ("list", _LOAD_BALANCER_INGRESS)),))),
    ("conditions", ("list", _CONDITION)),
)
SERVICE_SCHEMA: Schema = (
    ("metadata", ("struct", _OBJECT_META)),
    ("spec", ("struct", _SERVICE_SPEC)),
    ("status", ("struct", _SERVICE_STATUS)),
)

_OBJECT_REFERENCE: Schema = (
    ("kind", _STR), ("namespace", _STR), ("name", _STR), ("uid", _STR), ("apiVersion", _STR),
    ("resourceVersion", _STR), ("fieldPath", _STR),
)
_NAMED: Schema = (("name", _STR_REQ),)
_ENDPOINT: Schema = (
    ("addresses", _STRS_REQ),
    ("conditions", ("struct", (("ready", _PTR), ("serving", _PTR), ("terminating", _PTR)))),
    ("hostname", _PTR), ("targetRef", ("ptr", _OBJECT_REFERENCE)),
    ("deprecatedTopology", _MAP), ("nodeName", _PTR), ("zone", _PTR),
    ("hints", ("ptr", (("forZones", ("list", _NAMED)), ("forNodes", ("list", _NAMED))))),
)
_ENDPOINT_PORT: Schema = (
    ("name", _PTR), ("protocol", _PTR), ("port", _PTR), ("appProtocol", _PTR),
)
ENDPOINT_SLICE_SCHEMA: Schema = (
    ("metadata", ("struct", _OBJECT_META)),
    ("addressType", _STR_REQ),
    ("endpoints", ("list!", _ENDPOINT)),
    ("ports", ("list!", _ENDPOINT_PORT)),
)


def service_passthrough(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The value Calico's felix syncer carries for a Kubernetes Service (see module doc)."""
    return _struct(obj, SERVICE_SCHEMA)


def endpoint_slice_passthrough(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The value Calico's felix syncer carries for an EndpointSlice (see module doc)."""
    return _struct(obj, ENDPOINT_SLICE_SCHEMA)


def _struct(value: Any, schema: Schema) -> dict[str, Any]:
    src = value if isinstance(value, Mapping) else {}
    out: dict[str, Any] = {}
    for name, kind in schema:
        present, field_value = _field(src.get(name), kind)
        if present:
            out[name] = field_value
    return out


def _field(value: Any, kind: Any) -> tuple[bool, Any]:
    """(present in the marshalled output, value) for one field."""
    if isinstance(kind, tuple):
        shape, schema = kind
        if shape == "struct":
            return True, _struct(value, schema)
        if shape == "ptr":
            return (value is not None), (_struct(value, schema) if value is not None else None)
        items = [_struct(v, schema) for v in value or []]
        if shape == "list!":
            return True, items or None
        return bool(items), items
    if kind in (_STR, _INT, _BOOL):
        return bool(value), value
    if kind == _STR_REQ:
        return True, "" if value is None else value
    if kind == _INT_REQ:
        return True, 0 if value is None else value
    if kind == _PTR:
        return value is not None, value
    if kind == _RAW:
        return value is not None, copy.deepcopy(value)
    if kind == _MAP:
        return bool(value), sorted_map(value) if value else None
    if kind == _STRS:
        return bool(value), list(value) if value else None
    if kind == _STRS_REQ:
        return True, list(value) if value else None
    if kind == _TIME:
        return True, go_time(value)
    if kind == _PTR_TIME:
        return value is not None, go_time(value) if value is not None else None
    if kind == _INT_OR_STR:
        return True, 0 if value is None else value
    raise AssertionError(f"unknown schema kind {kind!r}")
