"""Go types as gob sees them: this program's local types, type ids, wire definitions.

A :class:`GoType` describes a Go type from this program's side (gob's "local type"):
``Basic`` (the predefined ids: bool 1, int 2, uint 3, float 4, []byte 5, string 6,
interface 8), ``Struct``, ``Slice`` and ``GobEncoded`` (time.Time).  :class:`TypeIds` numbers
them as Go's process-global id table does; :class:`WireType` is a definition received from a
peer.  The gob primitives (uints, ints, strings) live here too, as both directions use them.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Callable, Sequence
from typing import Any, Protocol

FIRST_USER_ID = 64
MAX_TYPE_ID = (1 << 31) - 1
#: Type definitions accepted per stream (Typha's streams define fewer than a dozen).
MAX_TYPES = 1024
#: Definitions that may arrive in the middle of one value (Typha's MsgKVs needs three).
MAX_VALUE_DEFINITIONS = 64
#: Go's decoder refuses interface type names longer than this.
MAX_NAME_LEN = 1024


class GobError(ValueError):
    """Malformed, oversized or incompatible gob data (the connection cannot continue)."""


EncodeFn = Callable[[bytearray, Any], None]
DecodeFn = Callable[[Any], Any]


class DecoderView(Protocol):
    """What a struct's hand-written decoder may use of the decoder it is built for
    (:class:`~.codec_decode.Decoder`)."""

    def decode_interface(self, r: Any) -> Any:
        """An interface value at the cursor ``r``."""
        ...

# --------------------------------------------------------------------------------------
# Primitive encodings

#: encode_uint(i) for i < 128 (also used by hand-written fast paths).
SMALL_UINT = [bytes((i,)) for i in range(128)]


def encode_uint(x: int) -> bytes:
    """gob uint: one byte below 128, else the negated byte count then big-endian bytes."""
    if 0 <= x < 128:
        return SMALL_UINT[x]
    if x < 0 or x >= 1 << 64:
        raise GobError(f"uint out of range: {x}")
    n = (x.bit_length() + 7) // 8
    return bytes((256 - n,)) + x.to_bytes(n, "big")


def encode_int(i: int) -> bytes:
    """gob int: zig-zag into a uint (bit 0 is the sign, complemented when negative)."""
    if not -(1 << 63) <= i < 1 << 63:
        raise GobError(f"int out of range: {i}")
    return encode_uint(i << 1 if i >= 0 else (~i << 1) | 1)


def encode_string(s: str) -> bytes:
    # Go strings are bytes; surrogateescape round-trips whatever a peer sent.
    b = s.encode("utf-8", "surrogateescape")
    return encode_uint(len(b)) + b


# --------------------------------------------------------------------------------------
# Local types


class GoType:
    """A Go type as declared by this program.  Identity matters: types are hashed by id."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Basic(GoType):
    """A predefined gob type: bool 1, int 2, uint 3, float 4, []byte 5, string 6, interface 8."""

    __slots__ = ("wire_id", "bits")

    def __init__(self, name: str, wire_id: int, bits: int = 64) -> None:
        super().__init__(name)
        self.wire_id = wire_id
        self.bits = bits


BOOL = Basic("bool", 1)
INT = Basic("int", 2)
UINT = Basic("uint", 3)
UINT8 = Basic("uint8", 3, bits=8)
FLOAT64 = Basic("float64", 4)
BYTES = Basic("[]uint8", 5)
STRING = Basic("string", 6)
INTERFACE = Basic("interface", 8)


class Field:
    """One exported struct field: Go name (decides matching), Python attribute, type."""

    __slots__ = ("go_name", "attr", "type")

    def __init__(self, go_name: str, attr: str, type: GoType) -> None:
        self.go_name = go_name
        self.attr = attr
        self.type = type


class Struct(GoType):
    """A struct; decoded values are ``make(**{attr: value})`` for the fields present.

    A high-volume struct may bring hand-written codecs: ``fast_encode`` (same bytes as the
    generic path) and ``fast_decode`` (built per decoder; used only when the peer's
    definition has exactly our fields, all of basic types, in our order).
    """

    __slots__ = ("fields", "make", "fast_encode", "fast_decode", "basic_shape")

    def __init__(self, name: str, fields: Sequence[Field], make: Callable[..., Any], *,
                 fast_encode: EncodeFn | None = None,
                 fast_decode: Callable[[DecoderView], DecodeFn] | None = None) -> None:
        super().__init__(name)
        self.fields = tuple(fields)
        self.make = make
        self.fast_encode = fast_encode
        self.fast_decode = fast_decode
        basics = [(f.go_name, f.type.wire_id) for f in self.fields if isinstance(f.type, Basic)]
        self.basic_shape = tuple(basics) if len(basics) == len(self.fields) else None


class Slice(GoType):
    """A slice (``[]T``, T not a byte); decodes to a tuple."""

    __slots__ = ("elem",)

    def __init__(self, name: str, elem: GoType) -> None:
        super().__init__(name)
        if elem is UINT8:
            raise ValueError("[]uint8 is BYTES in gob")
        self.elem = elem


class GobEncoded(GoType):
    """A type with GobEncode/GobDecode (time.Time): sent as a length-prefixed blob."""

    __slots__ = ("marshal", "unmarshal", "is_zero")

    def __init__(self, name: str, marshal: Callable[[Any], bytes],
                 unmarshal: Callable[[bytes], Any], is_zero: Callable[[Any], bool]) -> None:
        super().__init__(name)
        self.marshal = marshal
        self.unmarshal = unmarshal
        self.is_zero = is_zero


class Named:
    """An interface value whose concrete type is given by registered name (e.g. "int64")."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value


class Registry:
    """Names for interface values (gob.Register): name <-> local type <-> Python class.

    Starts with Go's pre-registered basic types.  Python values map to Go types as
    str -> "string", bool -> "bool", int -> "int", bytes -> "[]uint8", float -> "float64";
    a registered class maps to its name; :class:`Named` picks any registered name.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, GoType] = {}
        self._by_class: dict[type, tuple[str, GoType]] = {}
        for name, wire_id, bits in (
                ("int", 2, 64), ("int8", 2, 8), ("int16", 2, 16), ("int32", 2, 32),
                ("int64", 2, 64), ("uint", 3, 64), ("uint8", 3, 8), ("uint16", 3, 16),
                ("uint32", 3, 32), ("uint64", 3, 64), ("uintptr", 3, 64),
                ("float32", 4, 64), ("float64", 4, 64)):
            self._by_name[name] = Basic(name, wire_id, bits)
        for t in (BOOL, STRING, BYTES):
            self._by_name[t.name] = t
        for name in ("bool", "int", "int8", "int16", "int32", "int64", "uint", "uint16",
                     "uint32", "uint64", "uintptr", "float32", "float64", "string"):
            self._by_name["[]" + name] = Slice("[]" + name, self._by_name[name])
        for cls, name in ((str, "string"), (bool, "bool"), (int, "int"), (bytes, "[]uint8"),
                          (float, "float64")):
            self._by_class[cls] = (name, self._by_name[name])

    def register(self, name: str, t: GoType, cls: type | None = None) -> None:
        self._by_name[name] = t
        if cls is not None:
            self._by_class[cls] = (name, t)

    def by_name(self, name: str) -> GoType | None:
        return self._by_name.get(name)

    def concrete(self, value: Any) -> tuple[bytes, GoType, Any]:
        """(encoded name, type, inner value) of a non-nil interface value."""
        if isinstance(value, Named):
            t = self._by_name.get(value.name)
            if t is None:
                raise GobError(f"type not registered for interface: {value.name!r}")
            return value.name.encode(), t, value.value
        try:
            name, t = self._by_class[type(value)]
        except KeyError:
            raise GobError(f"type not registered for interface: {type(value).__name__}") \
                from None
        return name.encode(), t, value


# --------------------------------------------------------------------------------------
# Type ids and wire types


class TypeIds:
    """Id table for local types, handing ids out in Go's order (first-use, from 64).

    In Go this table is process-global: every encoder in a process numbers the same type the
    same way.  A struct gets its id before its fields' types, a slice after its element.
    """

    def __init__(self, first: int = FIRST_USER_ID) -> None:
        self._next = first
        self._ids: dict[GoType, int] = {}

    def id_of(self, t: GoType) -> int:
        if isinstance(t, Basic):
            return t.wire_id
        tid = self._ids.get(t)
        if tid is not None:
            return tid
        if isinstance(t, Struct):
            tid = self._alloc(t)
            for f in t.fields:
                self.id_of(f.type)
        elif isinstance(t, Slice):
            self.id_of(t.elem)
            tid = self._alloc(t)
        elif isinstance(t, GobEncoded):
            tid = self._alloc(t)
        else:
            raise TypeError(f"not a gob type: {t!r}")
        return tid

    def _alloc(self, t: GoType) -> int:
        tid = self._ids[t] = self._next
        self._next += 1
        return tid

    def wire_bytes(self, t: GoType) -> bytes:
        """The ``wireType`` value describing ``t`` (the body of a definition message)."""
        common = b"\x01" + encode_string(t.name) + b"\x01" + encode_int(self.id_of(t)) + b"\x00"
        if isinstance(t, Struct):
            body = b"\x01" + common
            if t.fields:
                body += b"\x01" + encode_uint(len(t.fields)) + b"".join(
                    b"\x01" + encode_string(f.go_name) + b"\x01"
                    + encode_int(self.id_of(f.type)) + b"\x00" for f in t.fields)
            return b"\x03" + body + b"\x00\x00"
        if isinstance(t, Slice):
            return b"\x02\x01" + common + b"\x01" + encode_int(self.id_of(t.elem)) + b"\x00\x00"
        if isinstance(t, GobEncoded):
            return b"\x05\x01" + common + b"\x00\x00"
        raise TypeError(f"basic types have no definition: {t!r}")


class WireType:
    """A type definition received from the peer (one kind of Go's ``wireType``)."""

    __slots__ = ("kind", "name", "fields", "elem", "key", "length")

    def __init__(self, kind: str, name: str, *, fields: tuple[tuple[str, int], ...] = (),
                 elem: int = 0, key: int = 0, length: int = 0) -> None:
        self.kind = kind  # array slice struct map gob binary text
        self.name = name
        self.fields = fields
        self.elem = elem
        self.key = key
        self.length = length

    def __repr__(self) -> str:
        return f"<WireType {self.kind} {self.name!r}>"
