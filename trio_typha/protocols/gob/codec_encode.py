"""Go's gob encoder, byte for byte (encoder.go / encode.go of Go's encoding/gob).

:class:`Encoder` reproduces Go's output, including how Go splits a message when an interface
value needs new type definitions, so bytes match Go's whenever the type ids do.
:meth:`Encoder.define` instead emits definitions as standalone messages, which Go's decoder
also accepts; after :meth:`Encoder.freeze` an encoder writes no more definitions and keeps no
per-call state, so its output depends only on the value (and it may be shared by threads).
"""

from __future__ import annotations

__sans_io__ = True

import struct
from collections.abc import Callable, Iterable
from typing import Any

from .codec_types import (
    INTERFACE,
    SMALL_UINT,
    Basic,
    EncodeFn,
    GobEncoded,
    GobError,
    GoType,
    Registry,
    Slice,
    Struct,
    TypeIds,
    encode_int,
    encode_string,
    encode_uint,
)


def _float_bits(f: float) -> int:
    return int.from_bytes(struct.pack("<d", f), "big")  # IEEE bits, bytes reversed


def _write_message(w: bytearray, b: bytearray) -> None:
    """Go's writeMessage: append ``b`` to ``w`` as one length-prefixed message, empty ``b``."""
    w += encode_uint(len(b))
    w += b
    del b[:]


class Encoder:
    """Go's gob.Encoder over an in-memory stream.

    Each :meth:`encode` returns the bytes one Go ``Encode`` call would write (possibly several
    messages).  The encoder remembers which type definitions it has sent, like Go's.
    """

    def __init__(self, registry: Registry, ids: TypeIds | None = None) -> None:
        self.registry = registry
        self.ids = ids if ids is not None else TypeIds()
        self._sent: set[GoType] = set()
        self._writers: list[bytearray] = []
        self._fns: dict[GoType, EncodeFn] = {}
        self._frozen = False

    def define(self, types: Iterable[GoType]) -> bytes:
        """Definitions of ``types`` (and the types they use) as standalone messages."""
        if self._frozen:
            raise GobError("encoder is frozen")
        out = bytearray()
        b = bytearray()
        for t in types:
            self._send_type(out, b, t)
        return bytes(out)

    def freeze(self) -> None:
        """Refuse further definitions: output then depends on the value alone."""
        self._frozen = True

    def encode(self, value: Any, t: GoType) -> bytes:
        out = bytearray()
        b = bytearray()
        if not self._frozen:
            self._writers = [out]
        self._ensure_sent(out, b, t)
        b += encode_int(self.ids.id_of(t))
        fn = self._fn(t)
        if not isinstance(t, Struct):
            b.append(0)  # singleton: field delta 0
        fn(b, value)
        _write_message(out, b)
        return bytes(out)

    def _ensure_sent(self, w: bytearray, b: bytearray, t: GoType) -> None:
        """Go's sendTypeDescriptor.  A frozen encoder only checks (and mutates nothing)."""
        if t in self._sent:
            return
        if self._frozen:
            if isinstance(t, Basic):
                return
            raise GobError(f"type {t.name} was not defined before the encoder was frozen")
        if not self._send_type(w, b, t):
            self._sent.add(t)

    # Go's sendType / sendActualType: definitions go to writer ``w``; ``b`` is the message
    # under construction, flushed along with the first definition (how Go splits messages).
    def _send_type(self, w: bytearray, b: bytearray, t: GoType) -> bool:
        if isinstance(t, Basic) or t in self._sent:
            return False
        b += encode_int(-self.ids.id_of(t))
        b += self.ids.wire_bytes(t)
        _write_message(w, b)
        self._sent.add(t)
        if isinstance(t, Struct):
            for f in t.fields:
                self._send_type(w, b, f.type)
        elif isinstance(t, Slice):
            self._send_type(w, b, t.elem)
        return True

    def _fn(self, t: GoType) -> EncodeFn:
        fn = self._fns.get(t)
        if fn is None:
            fn = self._fns[t] = self._compile(t)
        return fn

    def _compile(self, t: GoType) -> EncodeFn:
        if isinstance(t, Basic):
            return self._compile_basic(t)
        if isinstance(t, Slice):
            elem_fn = self._fn(t.elem)

            def enc_slice(out: bytearray, v: Any) -> None:
                out += encode_uint(len(v))
                for x in v:
                    elem_fn(out, x)
            return enc_slice
        if isinstance(t, GobEncoded):
            marshal = t.marshal

            def enc_gob(out: bytearray, v: Any) -> None:
                data = marshal(v)
                out += encode_uint(len(data))
                out += data
            return enc_gob
        if isinstance(t, Struct):
            if t.fast_encode is not None:
                return t.fast_encode
            plan: list[tuple[str, Callable[[Any], bool], GoType]] = [
                (f.attr, _zero_test(f.type), f.type) for f in t.fields]
            fns: list[EncodeFn] = []

            def enc_struct(out: bytearray, v: Any) -> None:
                if not fns:  # resolved lazily so recursive types compile
                    fns.extend(self._fn(ft) for _, _, ft in plan)
                last = -1
                for i, (attr, is_zero, _) in enumerate(plan):
                    x = getattr(v, attr)
                    if is_zero(x):
                        continue
                    out += SMALL_UINT[i - last] if i - last < 128 else encode_uint(i - last)
                    fns[i](out, x)
                    last = i
                out.append(0)
            return enc_struct
        raise TypeError(f"not a gob type: {t!r}")

    def _compile_basic(self, t: Basic) -> EncodeFn:
        wid = t.wire_id
        if wid == 1:
            def enc_bool(out: bytearray, v: Any) -> None:
                out.append(1 if v else 0)
            return enc_bool
        if wid == 2:
            def enc_int(out: bytearray, v: Any) -> None:
                out += encode_int(v)
            return enc_int
        if wid == 3:
            def enc_uint(out: bytearray, v: Any) -> None:
                out += encode_uint(v)
            return enc_uint
        if wid == 4:
            def enc_float(out: bytearray, v: Any) -> None:
                out += encode_uint(_float_bits(v))
            return enc_float
        if wid == 5:
            def enc_bytes(out: bytearray, v: Any) -> None:
                out += encode_uint(len(v))
                out += v
            return enc_bytes
        if wid == 6:
            def enc_string(out: bytearray, v: Any) -> None:
                out += encode_string(v)
            return enc_string
        if wid == 8:
            return self._enc_interface
        raise TypeError(f"unsupported basic type {t!r}")

    def _enc_interface(self, out: bytearray, v: Any) -> None:
        # Go's encodeInterface; ``out`` is the enclosing message buffer.
        if v is None:
            out.append(0)
            return
        name, t, inner = self.registry.concrete(v)
        out += encode_uint(len(name))
        out += name
        self._ensure_sent(self._writers[-1] if self._writers else out, out, t)
        out += encode_int(self.ids.id_of(t))
        data = bytearray()
        if not isinstance(t, Struct):
            data.append(0)
        if self._frozen:
            self._fn(t)(data, inner)
        else:
            self._writers.append(out)
            try:
                self._fn(t)(data, inner)
            finally:
                self._writers.pop()
        _write_message(out, data)


def _zero_test(t: GoType) -> Callable[[Any], bool]:
    """gob omits zero-valued struct fields; nested structs are always sent."""
    if isinstance(t, Struct):
        return lambda v: False
    if isinstance(t, GobEncoded):
        is_zero = t.is_zero
        return lambda v: v is None or is_zero(v)
    if t is INTERFACE:
        return lambda v: v is None
    if isinstance(t, Basic) and t.wire_id in (2, 3, 4):
        return lambda v: v == 0
    return lambda v: not v  # bool, string, bytes, slice (None or empty)
