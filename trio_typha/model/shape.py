"""Reading datastore objects whose JSON may not have the shape its Go type declares.

Calico decodes every object into its Go struct first (client-go for KDD, ``json.Unmarshal``
in the etcdv3 backend), and an object with a field of the wrong JSON type fails to decode:
that object alone is refused.  Here objects stay decoded JSON, so the conversions read them
through these accessors, which raise :class:`MalformedResource` (a ``ValueError``, the
model's family for "Calico would refuse this object") where a field has the wrong type.
Any other exception out of a conversion is a bug in it, never the datastore's data.

:func:`check_shape` checks a whole object against its Go struct layout (``goschema``) at
once; the accessors check one field where a conversion reads it.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Mapping, Sequence
from typing import Any

from .gojson import BOOL, FLOAT, INT, STRING, GoType, Map, Ptr, Slice, Struct

_STRING, _BOOL, _INT, _FLOAT = type(STRING), type(BOOL), type(INT), type(FLOAT)


class MalformedResource(ValueError):
    """A datastore object with a field of the wrong JSON type (or no object at all)."""


def _what(v: Any) -> str:
    if isinstance(v, bool):
        return "a bool"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, Sequence):
        return "a list"
    return type(v).__name__


def as_map(value: Any, where: str) -> Mapping[str, Any]:
    """A JSON object field (a Go struct or map): absent/``null`` is empty."""
    if value is None:
        return {}
    if type(value) is dict or isinstance(value, Mapping):
        return value
    raise MalformedResource(f"{where}: expected an object, got {_what(value)}")


def as_list(value: Any, where: str) -> Sequence[Any]:
    """A JSON array field (a Go slice): absent/``null`` is empty."""
    if value is None:
        return ()
    if type(value) is list or (isinstance(value, Sequence)
                               and not isinstance(value, (str, bytes))):
        return value
    raise MalformedResource(f"{where}: expected a list, got {_what(value)}")


def as_str(value: Any, where: str) -> str:
    """A JSON string field: absent/``null`` is ``""``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise MalformedResource(f"{where}: expected a string, got {_what(value)}")


def as_int(value: Any, where: str) -> int:
    """A JSON integer field: absent/``null`` is 0."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise MalformedResource(f"{where}: expected an integer, got {_what(value)}")


def maps(value: Any, where: str) -> list[Mapping[str, Any]]:
    """A list of JSON objects (a Go ``[]struct``)."""
    return [as_map(item, f"{where}[{i}]") for i, item in enumerate(as_list(value, where))]


def strs(value: Any, where: str) -> list[str]:
    """A list of JSON strings (a Go ``[]string``)."""
    return [as_str(item, f"{where}[{i}]") for i, item in enumerate(as_list(value, where))]


def field_map(obj: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return as_map(obj.get(name), name)


def field_str(obj: Mapping[str, Any], name: str) -> str:
    return as_str(obj.get(name), name)


def root(obj: Any) -> Mapping[str, Any]:
    """The object itself, which must be a JSON object."""
    if type(obj) is dict or isinstance(obj, Mapping):
        return obj
    raise MalformedResource(f"the object is {_what(obj)}, not a JSON object")


def check_shape(t: GoType, value: Any, where: str = "") -> None:
    """Raise :class:`MalformedResource` where ``value`` has a JSON type Go's decoder would
    refuse for ``t``.  Types with their own JSON methods (IPs, ports, durations, ...) are
    left to the parsers that read them, which refuse bad values themselves."""
    if value is None:
        return
    while isinstance(t, Ptr):
        t = t.elem
    if isinstance(t, Struct):
        fields = as_map(value, where or "the object")
        for f in t.fields:
            v = fields.get(f.name)
            if v is not None:
                check_shape(f.type, v, f"{where}.{f.name}" if where else f.name)
    elif isinstance(t, Slice):
        for i, item in enumerate(as_list(value, where)):
            check_shape(t.elem, item, f"{where}[{i}]")
    elif isinstance(t, Map):
        for k, item in as_map(value, where).items():
            if not isinstance(k, str):
                raise MalformedResource(f"{where}: key {k!r} is not a string")
            check_shape(t.elem, item, f"{where}[{k!r}]")
    elif isinstance(t, _STRING):
        as_str(value, where)
    elif isinstance(t, _BOOL):
        if not isinstance(value, bool):
            raise MalformedResource(f"{where}: expected a bool, got {_what(value)}")
    elif isinstance(t, _INT):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if (isinstance(value, bool) or not isinstance(value, int)
                or not t.lo <= value <= t.hi):
            raise MalformedResource(f"{where}: expected {t.name}, got {value!r}")
    elif isinstance(t, _FLOAT) and (isinstance(value, bool)
                                    or not isinstance(value, (int, float))):
        raise MalformedResource(f"{where}: expected a number, got {_what(value)}")


__all__ = ["MalformedResource", "as_int", "as_list", "as_map", "as_str", "check_shape",
           "field_map", "field_str", "maps", "root", "strs"]
