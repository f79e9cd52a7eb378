"""JSON exactly as Calico v3.32.1's Typha writes values: json-iterator v1.1.12 in its
``ConfigCompatibleWithStandardLibrary`` configuration, driven by Go struct layouts.

Python dicts carry no field order, types or ``omitempty`` rules, so every value is encoded
against a :class:`GoType` describing the Go type it stands for.  A struct encodes its fields
in declaration order; a field absent from the input dict is the Go zero value, which is
exactly what Go's decoder would have left there.  The rules reproduced (see the data-model
reference, section 3.1):

* compact output; map keys sorted bytewise;
* strings: ``\\"`` ``\\\\`` ``\\n`` ``\\r`` ``\\t``, other control bytes as ``\\u00xx`` (so
  backspace is ``\\u0008``, unlike Go's ``encoding/json``), HTML escaping of ``<`` ``>``
  ``&``, ``\\u2028``/``\\u2029`` escaped, invalid UTF-8 replaced by ``\\ufffd``;
* ``omitempty`` drops ``""``, ``false``, ``0``, nil pointers and empty slices/maps but never
  a struct; ``omitzero`` is not understood by json-iterator and so has no effect;
* float64 in shortest round-trip form, exponent only below 1e-6 or from 1e21 (``1e-07``);
* a type with its own ``MarshalJSON`` is encoded by a dedicated :class:`GoType` and its
  output is inserted verbatim.

A value of the wrong shape raises :class:`GoJSONError`, as Go's decoder would have refused
the object.
"""

from __future__ import annotations

__sans_io__ = True

import abc
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..gofmt import format_float


class GoJSONError(ValueError):
    """The value does not fit the Go type it is encoded as."""


# --------------------------------------------------------------------------------------------
# Scalars

# A raw string: re reads the \u escapes, so the source holds no surrogate code points
# (which mypyc cannot compile).
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\<>&\u2028\u2029\ud800-\udfff]')
_SIMPLE = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
           "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _escape_char(m: re.Match[str], std: bool) -> str:
    c = m.group()
    s = _SIMPLE.get(c)
    if s is not None:
        return s
    o = ord(c)
    if o < 0x20:
        if std and c == "\b":
            return "\\b"
        if std and c == "\f":
            return "\\f"
        return f"\\u{o:04x}"
    # What is left is a lone surrogate, which Go's decoder had already turned into U+FFFD.
    return "\\ufffd"


def go_string(s: str | bytes, *, std: bool = False) -> str:
    """A JSON string literal as json-iterator writes it (``std``: as ``encoding/json`` does,
    which only differs for backspace and form feed)."""
    if isinstance(s, bytes):
        # Go strings are bytes and json-iterator replaces each byte that does not start a
        # valid UTF-8 sequence by U+FFFD; surrogateescape isolates exactly those bytes (as
        # lone surrogates, which the escaper below turns into \ufffd).
        s = s.decode("utf-8", errors="surrogateescape")
    if not _NEEDS_ESCAPE.search(s):
        return f'"{s}"'
    if std:
        return '"' + _NEEDS_ESCAPE.sub(lambda m: _escape_char(m, True), s) + '"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _escape_char(m, False), s) + '"'


def go_float(x: float) -> str:
    """float64 as json-iterator writes it: strconv ``'f'`` (or ``'e'`` when
    ``|x| < 1e-6 or |x| >= 1e21``) with the shortest round-trip digits."""
    if math.isinf(x) or math.isnan(x):
        raise GoJSONError(f"unsupported float value {x!r}")
    ax = abs(x)
    return format_float(x, "e" if ax != 0 and (ax < 1e-6 or ax >= 1e21) else "f")


# --------------------------------------------------------------------------------------------
# Types


class GoType(abc.ABC):
    """How one Go type encodes.  ``encode`` appends text to ``out``."""

    name: str = "?"

    @abc.abstractmethod
    def encode(self, v: Any, out: list[str]) -> None:
        """Append the JSON text of ``v`` to ``out``."""

    def is_empty(self, v: Any) -> bool:
        """json-iterator's ``IsEmpty`` (used by ``omitempty``)."""
        return v is None

    def zero(self) -> Any:
        """The Python stand-in for this type's Go zero value (a missing dict key)."""
        return None


class _String(GoType):
    name = "string"

    def __init__(self, std: bool = False) -> None:
        self.std = std

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            v = ""
        if not isinstance(v, (str, bytes)):
            raise GoJSONError(f"expected a string, got {v!r}")
        out.append(go_string(v, std=self.std))

    def is_empty(self, v: Any) -> bool:
        return not v

    def zero(self) -> Any:
        return ""


class _Bool(GoType):
    name = "bool"

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            v = False
        if not isinstance(v, bool):
            raise GoJSONError(f"expected a bool, got {v!r}")
        out.append("true" if v else "false")

    def is_empty(self, v: Any) -> bool:
        return not v

    def zero(self) -> Any:
        return False


class _Int(GoType):
    def __init__(self, name: str, lo: int, hi: int) -> None:
        self.name, self.lo, self.hi = name, lo, hi

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            v = 0
        if isinstance(v, float) and v.is_integer():
            # YAML/JSON front ends sometimes hand integers over as floats.
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not self.lo <= v <= self.hi:
            raise GoJSONError(f"expected {self.name}, got {v!r}")
        out.append(str(v))

    def is_empty(self, v: Any) -> bool:
        return not v

    def zero(self) -> Any:
        return 0


class _Float(GoType):
    name = "float64"

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            v = 0.0
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GoJSONError(f"expected a number, got {v!r}")
        out.append(go_float(float(v)))

    def is_empty(self, v: Any) -> bool:
        return not v

    def zero(self) -> Any:
        return 0.0


STRING = _String()
STD_STRING = _String(std=True)  # strings written by encoding/json inside a MarshalJSON
BOOL = _Bool()
INT = _Int("int64", -(1 << 63), (1 << 63) - 1)
INT32 = _Int("int32", -(1 << 31), (1 << 31) - 1)
UINT = _Int("uint64", 0, (1 << 64) - 1)
UINT32 = _Int("uint32", 0, (1 << 32) - 1)
UINT16 = _Int("uint16", 0, (1 << 16) - 1)
UINT8 = _Int("uint8", 0, 255)
FLOAT = _Float()


class Ptr(GoType):
    """``*T``: nil is ``null`` (or omitted with omitempty); otherwise T's encoding."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.name = "*" + elem.name

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            out.append("null")
        else:
            self.elem.encode(v, out)


class Slice(GoType):
    """``[]T``: nil is ``null``."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.name = "[]" + elem.name

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            out.append("null")
            return
        if type(v) is not list and (isinstance(v, (str, bytes, Mapping))
                                    or not isinstance(v, Sequence)):
            raise GoJSONError(f"expected a list for {self.name}, got {v!r}")
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            self.elem.encode(item, out)
        out.append("]")

    def is_empty(self, v: Any) -> bool:
        return not v


class Map(GoType):
    """``map[string]T``: nil is ``null``; keys sorted bytewise."""

    def __init__(self, elem: GoType, *, std: bool = False) -> None:
        self.elem = elem
        self.std = std
        self.name = "map[string]" + elem.name

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            out.append("null")
            return
        if type(v) is not dict and not isinstance(v, Mapping):
            raise GoJSONError(f"expected an object for {self.name}, got {v!r}")
        out.append("{")
        for i, k in enumerate(sorted(v, key=_key_order)):
            if i:
                out.append(",")
            if not isinstance(k, str):
                raise GoJSONError(f"map key {k!r} is not a string")
            out.append(go_string(k, std=self.std))
            out.append(":")
            self.elem.encode(v[k], out)
        out.append("}")

    def is_empty(self, v: Any) -> bool:
        return not v


def _key_order(k: Any) -> bytes:
    # Bytewise order of the UTF-8 form (code-point order, bar lone surrogates).
    return str(k).encode("utf-8", errors="surrogatepass")


class Field:
    __slots__ = ("name", "type", "omitempty", "key")

    def __init__(self, name: str, type_: GoType, omitempty: bool = False) -> None:
        self.name, self.type, self.omitempty = name, type_, omitempty
        self.key = go_string(name) + ":"  # its text in a struct, written once


class Struct(GoType):
    """A Go struct; fields in declaration order.  Never empty for ``omitempty``."""

    def __init__(self, name: str, fields: Sequence[Field] = ()) -> None:
        self.name = name
        self.fields: tuple[Field, ...] = tuple(fields)

    def define(self, fields: Sequence[Field]) -> None:
        self.fields = tuple(fields)

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            v = {}
        if type(v) is not dict and not isinstance(v, Mapping):
            raise GoJSONError(f"expected an object for {self.name}, got {v!r}")
        out.append("{")
        sep = ""
        get = v.get
        for f in self.fields:
            val = get(f.name)
            if f.omitempty and f.type.is_empty(val):
                continue
            out.append(sep + f.key)
            sep = ","
            f.type.encode(val if val is not None else f.type.zero(), out)
        out.append("}")

    def is_empty(self, v: Any) -> bool:
        return False

    def zero(self) -> Any:
        return None  # encode() treats None as the all-zero struct


class Any_(GoType):
    """``interface{}`` holding what Go's decoder produced from JSON: maps (sorted on
    output), slices, strings, bools and float64 numbers."""

    name = "interface{}"

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            out.append("null")
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        elif isinstance(v, (int, float)):
            out.append(go_float(float(v)))
        elif isinstance(v, (str, bytes)):
            out.append(go_string(v))
        elif isinstance(v, Mapping):
            Map(self).encode(v, out)
        elif isinstance(v, Sequence):
            Slice(self).encode(v, out)
        else:
            raise GoJSONError(f"cannot encode {v!r}")


ANY = Any_()


class RawJSON(GoType):
    """A ``MarshalJSON`` that returns bytes it was given (``metav1.FieldsV1``): we re-emit
    the decoded value compactly in its original key order, as the API server wrote it."""

    name = "raw"

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None:
            out.append("null")
        elif isinstance(v, bool):
            out.append("true" if v else "false")
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append(repr(v) if not v.is_integer() else str(int(v)))
        elif isinstance(v, (str, bytes)):
            out.append(go_string(v, std=True))
        elif isinstance(v, Mapping):
            out.append("{")
            for i, (k, item) in enumerate(v.items()):
                if i:
                    out.append(",")
                out.append(go_string(k, std=True))
                out.append(":")
                self.encode(item, out)
            out.append("}")
        else:
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(",")
                self.encode(item, out)
            out.append("]")


class Custom(GoType):
    """A type with its own ``MarshalJSON``: ``fn(value) -> json text``.

    ``empty`` mirrors json-iterator's ``IsEmpty`` for the underlying Go kind: struct-backed
    marshalers are never empty, string-backed ones are empty when ``""``.
    """

    def __init__(self, name: str, fn: Callable[[Any], str], *,
                 empty: Callable[[Any], bool] | None = None, nil_is_null: bool = False) -> None:
        self.name = name
        self.fn = fn
        self._empty = empty
        self.nil_is_null = nil_is_null

    def encode(self, v: Any, out: list[str]) -> None:
        if v is None and self.nil_is_null:
            out.append("null")
            return
        out.append(self.fn(v))

    def is_empty(self, v: Any) -> bool:
        return self._empty(v) if self._empty is not None else False

    def zero(self) -> Any:
        return None


def dumps(t: GoType, v: Any) -> bytes:
    """Encode ``v`` as Go type ``t``; the bytes Typha would put on the wire."""
    out: list[str] = []
    t.encode(v, out)
    return "".join(out).encode("utf-8", errors="surrogatepass")
