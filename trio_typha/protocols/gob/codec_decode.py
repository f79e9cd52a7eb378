"""Incremental, strict, bounded gob decoder (decoder.go / decode.go of Go's encoding/gob).

Feed it bytes, pull values.  It builds its id table from the definitions it receives (never
from hard-coded ids), matches remote struct fields to local ones by name as Go does, and
bounds everything: message size, total size and number of type definitions, nesting depth,
interface-name length.  Malformed input raises :class:`GobError`; nothing is allocated
beyond what the buffered input justifies.
"""

from __future__ import annotations

__sans_io__ = True

import struct
from collections.abc import Callable, Sequence
from typing import Any

from .codec_types import (
    FIRST_USER_ID,
    INTERFACE,
    MAX_NAME_LEN,
    MAX_TYPE_ID,
    MAX_TYPES,
    MAX_VALUE_DEFINITIONS,
    Basic,
    GobEncoded,
    GobError,
    GoType,
    Registry,
    Slice,
    Struct,
    WireType,
)


class _NeedMore(Exception):
    """Internal: the buffered bytes end before the value does (at message offset ``at``)."""

    def __init__(self, at: int) -> None:
        self.at = at


_DecFn = Callable[["_Cursor"], Any]

#: Returned by :meth:`Decoder.next_value` when the buffered bytes hold no complete value.
NEED_DATA: Any = type("NeedData", (), {"__repr__": lambda self: "NEED_DATA"})()


def _bits_float(u: int) -> float:
    (value,) = struct.unpack("<d", u.to_bytes(8, "big"))
    return float(value)


_BASIC_NAMES = {1: "bool", 2: "int", 3: "uint", 4: "float", 5: "[]byte", 6: "string",
                7: "complex", 8: "interface"}
# wireType field number -> kind; the marshaler kinds carry only a CommonType.
_WIRE_KINDS = ("array", "slice", "struct", "map", "gob", "binary", "text")
# Integer fields after CommonType (field 0) in each kind's definition struct.
_KIND_FIELDS: dict[str, dict[int, str]] = {
    "array": {1: "elem", 2: "length"}, "slice": {1: "elem"}, "map": {1: "key", 2: "elem"},
    "struct": {}, "gob": {}, "binary": {}, "text": {}}


def _message_bounds(buf: bytearray, at: int, limit: int,
                    max_message: int) -> tuple[int, int] | None:
    """(payload start, end) of the message whose length prefix is at ``at``; None if the
    prefix itself is not all buffered.  ``end`` may lie beyond ``limit``."""
    if at >= limit:
        return None
    b = buf[at]
    if b < 128:
        n, p = b, at + 1
    else:
        k = 256 - b
        if k > 8:
            raise GobError("invalid message length prefix")
        if at + 1 + k > limit:
            return None
        n, p = int.from_bytes(buf[at + 1:at + 1 + k], "big"), at + 1 + k
    if n == 0:
        raise GobError("empty message")
    if n > max_message:
        raise GobError(f"message of {n} bytes exceeds the limit of {max_message}")
    return p, p + n


class _Cursor:
    """Reads one value: position within the current message, able to pull the next one."""

    __slots__ = ("buf", "pos", "end", "limit", "max_message", "depth", "definitions")

    def __init__(self, buf: bytearray, pos: int, limit: int, max_message: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = pos  # no message open yet
        self.limit = limit  # end of buffered data
        self.max_message = max_message
        self.depth = 0
        self.definitions = 0  # received inside this value's interfaces

    def open_message(self) -> None:
        """Advance into the next length-prefixed message (which must be fully buffered)."""
        start = self.end
        header = _message_bounds(self.buf, start, self.limit, self.max_message)
        if header is None or header[1] > self.limit:
            raise _NeedMore(start)
        self.pos, self.end = header

    def uint(self) -> int:
        p = self.pos
        if p >= self.end:
            raise GobError("unexpected end of message")
        b = self.buf[p]
        if b < 128:
            self.pos = p + 1
            return b
        k = 256 - b
        if k > 8:
            raise GobError(f"invalid uint length byte {b:#x}")
        q = p + 1 + k
        if q > self.end:
            raise GobError("unexpected end of message in uint")
        self.pos = q
        return int.from_bytes(self.buf[p + 1:q], "big")

    def signed(self) -> int:
        u = self.uint()
        return ~(u >> 1) if u & 1 else u >> 1

    def take(self, n: int) -> bytes:
        p = self.pos
        if n > self.end - p:
            raise GobError(f"length {n} exceeds the {self.end - p} bytes left in the message")
        self.pos = p + n
        return bytes(self.buf[p:p + n])

    def string(self) -> str:
        n = self.uint()
        p = self.pos
        if n > self.end - p:
            raise GobError(f"length {n} exceeds the {self.end - p} bytes left in the message")
        self.pos = p + n
        return self.buf[p:p + n].decode("utf-8", "surrogateescape")


class Decoder:
    """Incremental gob decoder: ``feed`` bytes, then call ``next_value`` until NEED_DATA.

    ``root`` is the local type every top-level value must match (None: decode anything into
    plain Python data, structs as dicts).  Values are returned as the local types build them.
    """

    def __init__(self, registry: Registry, root: GoType | None = None, *,
                 max_message_size: int = 1 << 20, max_type_bytes: int = 1 << 20,
                 max_depth: int = 64) -> None:
        self.registry = registry
        self.root = root
        self.max_message_size = max_message_size
        self.max_type_bytes = max_type_bytes
        self.max_depth = max_depth
        self._buf = bytearray()
        self._pos = 0
        self._wait_until = 0  # don't retry before this much is buffered
        self._types: dict[int, WireType] = {}
        self._type_bytes = 0
        self._compiled: dict[tuple[int, GoType | None], _DecFn] = {}
        self._added: list[int] = []  # definitions received by the value being decoded
        self._error: GobError | None = None
        self._compile_depth = 0

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray) -> None:
        self._buf += data

    def unconsumed(self) -> bytes:
        """Bytes received but not part of any returned value (handed on at a restart)."""
        return bytes(self._buf[self._pos:])

    def next_value(self) -> Any:
        """The next complete value, or NEED_DATA.

        Raises GobError on malformed input; the stream is then unusable and every later call
        raises the same error.
        """
        if self._error is not None:
            raise self._error
        try:
            return self._next_value()
        except GobError as exc:
            self._error = exc
            raise

    def _next_value(self) -> Any:
        while True:
            if len(self._buf) < self._wait_until:
                return NEED_DATA
            r = _Cursor(self._buf, self._pos, len(self._buf), self.max_message_size)
            self._added = []
            type_bytes = self._type_bytes
            try:
                r.open_message()
                tid = r.signed()
                if tid < 0:
                    self._define(-tid, r)
                    if r.pos != r.end:
                        raise GobError("extra data after a type definition")
                    value = NEED_DATA
                else:
                    value = self._top_value(tid, r)
                    if r.pos != r.end:
                        raise GobError("extra data after a value")
            except _NeedMore as more:
                self._rollback(type_bytes)
                self._wait_until = self._retry_at(more.at)
                return NEED_DATA
            self._pos = r.end
            self._wait_until = 0
            if self._pos > 65536 and self._pos * 2 > len(self._buf):
                del self._buf[:self._pos]
                self._pos = 0
            if value is not NEED_DATA:
                return value

    def _retry_at(self, at: int) -> int:
        """How much must be buffered before decoding the pending value can succeed.

        A value split over several messages continues with definition messages (negative
        ids) until one starting with a type id; only then is a retry worth its re-parse.
        """
        buf, limit = self._buf, len(self._buf)
        while True:
            try:
                bounds = _message_bounds(buf, at, limit, self.max_message_size)
            except GobError:
                return 0  # let the retry raise it
            if bounds is None:
                return limit + 1
            start, end = bounds
            if end > limit:
                return end
            b = buf[start]
            if b >= 128 and start + 1 + 256 - b <= end:
                b = buf[start + 256 - b]  # a multi-byte int's sign is its last bit
            if not b & 1:
                return 0  # a value message: retry now
            at = end

    def _rollback(self, type_bytes: int) -> None:
        # A value split over messages was cut short: forget what its first part defined;
        # it is parsed again, definitions included, once the rest has arrived.
        if self._added:
            for tid in self._added:
                del self._types[tid]
            self._compiled.clear()
        self._added = []
        self._type_bytes = type_bytes

    def _top_value(self, tid: int, r: _Cursor) -> Any:
        if tid > MAX_TYPE_ID:
            raise GobError(f"type id {tid} out of range")
        fn = self._decoder_for(tid, self.root)
        if not self._is_struct(tid, self.root) and r.uint() != 0:
            raise GobError("corrupted data: non-zero delta for singleton")
        return fn(r)

    def _is_struct(self, tid: int, local: GoType | None) -> bool:
        if local is not None:
            return isinstance(local, Struct)
        wt = self._types.get(tid)
        return wt is not None and wt.kind == "struct"

    # ---- type definitions

    def _define(self, tid: int, r: _Cursor) -> None:
        if tid < FIRST_USER_ID or tid > MAX_TYPE_ID or tid in self._types:
            raise GobError(f"duplicate or invalid type id {tid} received")
        if len(self._types) >= MAX_TYPES:
            raise GobError(f"more than {MAX_TYPES} type definitions")
        start = r.pos
        wt = self._parse_wire_type(r)
        self._type_bytes += r.pos - start
        if self._type_bytes > self.max_type_bytes:
            raise GobError("too many type definitions")
        self._types[tid] = wt
        self._added.append(tid)

    def _parse_wire_type(self, r: _Cursor) -> WireType:
        kind = None
        result: WireType | None = None
        num = -1
        while True:
            delta = r.uint()
            if delta == 0:
                break
            num += delta
            if num >= len(_WIRE_KINDS) or result is not None:
                raise GobError("malformed type definition")
            kind = _WIRE_KINDS[num]
            result = self._parse_kind(kind, r)
        if result is None:
            raise GobError("type definition names no type")
        return result

    def _parse_kind(self, kind: str, r: _Cursor) -> WireType:
        names = _KIND_FIELDS[kind]
        name, num = "", -1
        values: dict[str, Any] = {}
        while True:
            delta = r.uint()
            if delta == 0:
                break
            num += delta
            if num == 0:
                name = self._parse_common(r)
            elif kind == "struct" and num == 1:
                count = r.uint()
                if count > r.end - r.pos:
                    raise GobError("struct definition with too many fields")
                values["fields"] = tuple(self._parse_field(r) for _ in range(count))
            elif num in names:
                values[names[num]] = r.signed()
            else:
                raise GobError(f"malformed {kind} type definition")
        return WireType(kind, name, **values)

    @staticmethod
    def _parse_common(r: _Cursor) -> str:
        name, num = "", -1
        while True:
            delta = r.uint()
            if delta == 0:
                return name
            num += delta
            if num == 0:
                name = r.string()
            elif num == 1:
                r.signed()  # the id is the one in the message; Go ignores this copy
            else:
                raise GobError("malformed CommonType")

    @staticmethod
    def _parse_field(r: _Cursor) -> tuple[str, int]:
        name, fid, num = "", 0, -1
        while True:
            delta = r.uint()
            if delta == 0:
                return name, fid
            num += delta
            if num == 0:
                name = r.string()
            elif num == 1:
                fid = r.signed()
            else:
                raise GobError("malformed struct field definition")

    def _wire(self, tid: int) -> WireType | None:
        if tid in _BASIC_NAMES:
            return None
        try:
            return self._types[tid]
        except KeyError:
            raise GobError(f"unknown type id {tid}") from None

    def _describe(self, tid: int) -> str:
        wt = self._types.get(tid)
        return _BASIC_NAMES.get(tid) or (f"{wt.kind} {wt.name!r}" if wt else f"type {tid}")

    # ---- compiled decoders, one per (remote type, local type)

    def _decoder_for(self, tid: int, local: GoType | None) -> _DecFn:
        key = (tid, local)
        fn = self._compiled.get(key)
        if fn is None:
            self._compile_depth += 1
            try:
                if self._compile_depth > self.max_depth:
                    raise GobError("types nested too deeply")
                cell: list[_DecFn] = []
                self._compiled[key] = lambda r: cell[0](r)  # recursive wire types
                fn = self._compile(tid, local)
                cell.append(fn)
                self._compiled[key] = fn
            except GobError:
                self._compiled.pop(key, None)
                raise
            finally:
                self._compile_depth -= 1
        return fn

    def _mismatch(self, tid: int, local: GoType) -> GobError:
        return GobError(f"type mismatch: remote {self._describe(tid)} into local {local.name}")

    def _compile(self, tid: int, local: GoType | None) -> _DecFn:
        wt = self._wire(tid)
        if local is None:
            return self._compile_dynamic(tid, wt)
        if isinstance(local, Basic):
            if local is INTERFACE or local.wire_id == 8:
                if tid != 8:
                    raise self._mismatch(tid, local)
                return self._dec_interface
            if tid != local.wire_id:
                raise self._mismatch(tid, local)
            return self._basic_fn(tid, local.bits)
        if wt is None:
            raise self._mismatch(tid, local)
        if isinstance(local, Slice):
            if wt.kind != "slice":
                raise self._mismatch(tid, local)
            return self._slice_fn(self._decoder_for(wt.elem, local.elem), tuple)
        if isinstance(local, GobEncoded):
            if wt.kind != "gob":
                raise self._mismatch(tid, local)
            unmarshal = local.unmarshal

            def dec_gob(r: _Cursor) -> Any:
                try:
                    return unmarshal(r.take(r.uint()))
                except ValueError as exc:
                    raise GobError(str(exc)) from exc
            return dec_gob
        if isinstance(local, Struct):
            if wt.kind != "struct":
                raise self._mismatch(tid, local)
            if local.fast_decode is not None and wt.fields == local.basic_shape:
                return local.fast_decode(self)
            by_name = {f.go_name: f for f in local.fields}
            plan: list[tuple[str | None, _DecFn]] = []
            matched = 0
            for fname, fid in wt.fields:
                lf = by_name.get(fname)
                if lf is None:
                    plan.append((None, self._decoder_for(fid, None)))
                    continue
                try:
                    plan.append((lf.attr, self._decoder_for(fid, lf.type)))
                except GobError as exc:
                    raise GobError(f"wrong type for field {wt.name}.{fname}: {exc}") from None
                matched += 1
            if not matched and local.fields and wt.fields:
                raise GobError(f"type mismatch: no fields matched compiling decoder for "
                               f"{local.name}")
            return self._struct_fn(plan, local.make)
        raise TypeError(f"not a gob type: {local!r}")

    def _compile_dynamic(self, tid: int, wt: WireType | None) -> _DecFn:
        if wt is None:
            if tid == 8:
                return self._dec_interface
            if tid == 7:
                def dec_complex(r: _Cursor) -> complex:
                    return complex(_bits_float(r.uint()), _bits_float(r.uint()))
                return dec_complex
            return self._basic_fn(tid, 64)
        kind = wt.kind
        if kind == "struct":
            plan = [(name, self._decoder_for(fid, None)) for name, fid in wt.fields]
            return self._struct_fn(plan, dict)
        if kind == "slice":
            return self._slice_fn(self._decoder_for(wt.elem, None), list)
        if kind == "array":
            elem, length = self._decoder_for(wt.elem, None), wt.length

            def dec_array(r: _Cursor) -> Any:
                if r.uint() != length:
                    raise GobError("length mismatch in array")
                return self._slice_fn(elem, list, count=length)(r)
            return dec_array
        if kind == "map":
            key_fn, val_fn = self._decoder_for(wt.key, None), self._decoder_for(wt.elem, None)

            def dec_map(r: _Cursor) -> dict[Any, Any]:
                n = r.uint()
                if n > r.limit - r.pos:
                    raise GobError("map too big")
                out: dict[Any, Any] = {}
                self._enter(r)
                for _ in range(n):
                    k = key_fn(r)
                    try:
                        out[k] = val_fn(r)
                    except TypeError:
                        raise GobError("unhashable map key") from None
                r.depth -= 1
                return out
            return dec_map
        # gob / binary / text marshalers: an opaque blob

        def dec_blob(r: _Cursor) -> bytes:
            return r.take(r.uint())
        return dec_blob

    def _enter(self, r: _Cursor) -> None:
        r.depth += 1
        if r.depth > self.max_depth:
            raise GobError("data nested too deeply")

    @staticmethod
    def _basic_fn(tid: int, bits: int) -> _DecFn:
        if tid == 1:
            return lambda r: r.uint() != 0
        if tid == 2:
            if bits >= 64:
                return _Cursor.signed
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

            def dec_small_int(r: _Cursor) -> int:
                v = r.signed()
                if not lo <= v <= hi:
                    raise GobError(f"value {v} out of range for int{bits}")
                return v
            return dec_small_int
        if tid == 3:
            if bits >= 64:
                return _Cursor.uint
            hi = (1 << bits) - 1

            def dec_small_uint(r: _Cursor) -> int:
                v = r.uint()
                if v > hi:
                    raise GobError(f"value {v} out of range for uint{bits}")
                return v
            return dec_small_uint
        if tid == 4:
            return lambda r: _bits_float(r.uint())
        if tid == 5:
            return lambda r: r.take(r.uint())
        if tid == 6:
            return _Cursor.string
        raise GobError(f"unsupported type id {tid}")

    def _slice_fn(self, elem: _DecFn, container: Callable[[list[Any]], Any], *,
                  count: int | None = None) -> _DecFn:
        def dec_slice(r: _Cursor) -> Any:
            n = r.uint() if count is None else count
            # Every element takes at least one byte: refuse counts the input cannot hold.
            if n > r.limit - r.pos:
                raise GobError(f"slice of {n} elements is larger than the input")
            self._enter(r)
            items = [elem(r) for _ in range(n)]
            r.depth -= 1
            return container(items)
        return dec_slice

    def _struct_fn(self, plan: Sequence[tuple[str | None, _DecFn]],
                   make: Callable[..., Any]) -> _DecFn:
        nfields = len(plan)

        def dec_struct(r: _Cursor) -> Any:
            self._enter(r)
            kwargs: dict[str, Any] = {}
            num = -1
            while True:
                delta = r.uint()
                if delta == 0:
                    break
                num += delta
                if num >= nfields:
                    raise GobError(f"field number {num} out of range")
                attr, fn = plan[num]
                value = fn(r)
                if attr is not None:
                    kwargs[attr] = value
            r.depth -= 1
            try:
                return make(**kwargs)
            except (TypeError, ValueError) as exc:
                raise GobError(f"invalid value: {exc}") from exc
        return dec_struct

    def decode_interface(self, r: _Cursor) -> Any:
        """An interface value at the cursor (for hand-written fast decoders)."""
        return self._dec_interface(r)

    def _dec_interface(self, r: _Cursor) -> Any:
        n = r.uint()
        if n == 0:
            return None  # nil interface
        if n > MAX_NAME_LEN:
            raise GobError(f"interface type name too long ({n} bytes)")
        name = r.take(n).decode("utf-8", "surrogateescape")
        local = self.registry.by_name(name)
        if local is None:
            raise GobError(f"name not registered for interface: {name!r}")
        # Type sequence: definitions (possibly in further messages), then the concrete id.
        while True:
            if r.pos == r.end:
                r.open_message()
            tid = r.signed()
            if tid >= 0:
                break
            r.definitions += 1
            if r.definitions > MAX_VALUE_DEFINITIONS:
                raise GobError("too many type definitions inside one value")
            self._define(-tid, r)
            if r.pos < r.end:
                r.uint()  # count of a delimited value that follows (Go skips it too)
        if tid > MAX_TYPE_ID:
            raise GobError(f"type id {tid} out of range")
        r.uint()  # byte count of the value; Go decodes without it, and so do we
        fn = self._decoder_for(tid, local)
        self._enter(r)
        if not isinstance(local, Struct) and r.uint() != 0:
            raise GobError("corrupted data: non-zero delta for singleton")
        value = fn(r)
        r.depth -= 1
        return value
