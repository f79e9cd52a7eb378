"""Sans-IO Go ``encoding/gob``: the subset of types Typha's protocol uses, byte-exact.

A gob stream is a series of messages, each a gob uint byte count plus payload.  A payload is
either a type definition (negative type id, then a ``wireType`` value) or a value (positive
type id, then the value).  Struct fields travel as (field-number delta, value) pairs with
zero values omitted; interface values carry their concrete type's registered name.  The
rules are summarized in docs/typha-protocol.md §2.1; Go's own description is the package
documentation of encoding/gob (src/encoding/gob/doc.go).

The pieces: :mod:`.codec_types` (local types, type ids, wire definitions, primitives),
:mod:`.codec_encode` (:class:`Encoder`) and :mod:`.codec_decode` (:class:`Decoder`); this module gathers
their public names.
"""

__sans_io__ = True

from .codec_decode import NEED_DATA, Decoder
from .codec_encode import Encoder
from .codec_types import (
    BOOL,
    BYTES,
    FLOAT64,
    INT,
    INTERFACE,
    SMALL_UINT,
    STRING,
    UINT,
    UINT8,
    Basic,
    DecoderView,
    Field,
    GobEncoded,
    GobError,
    GoType,
    Named,
    Registry,
    Slice,
    Struct,
    TypeIds,
    WireType,
    encode_int,
    encode_uint,
)

__all__ = [
    "BOOL", "BYTES", "FLOAT64", "INT", "INTERFACE", "NEED_DATA", "SMALL_UINT", "STRING", "UINT",
    "UINT8", "Basic", "Decoder", "DecoderView", "Encoder", "Field", "GobEncoded", "GobError", "GoType", "Named",
    "Registry", "Slice", "Struct", "TypeIds", "WireType", "encode_int", "encode_uint",
]
