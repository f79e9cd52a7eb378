"""Snappy's framing format, as github.com/golang/snappy writes and reads it (sans-IO).

A framed stream is a series of chunks: one type byte, a 3-byte little-endian length, the
body.  It starts with the stream identifier chunk; data chunks (``00`` compressed, ``01``
stored) carry at most 64 KiB of data each and the masked CRC-32C of that data
(docs/typha-protocol.md §2.3; github.com/golang/snappy's framing_format.txt).

Compression and checksums are done by ``cramjam`` (Rust's snap crate), whose framed
encoder writes this very format; we only cut its output into the chunk runs the protocol
needs.  For reading, each data chunk is handed to cramjam's framed decoder behind a stream
identifier, which checks the CRC, after this module has enforced Go's limits.
"""

from __future__ import annotations

__sans_io__ = True

import cramjam

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
MAX_BLOCK = 65536
#: Go's reader refuses longer chunks: worst-case compressed size of 64 KiB, plus the CRC.
MAX_CHUNK_LENGTH = 76490 + 4

_UNCOMPRESSED = 0x01
_IDENTIFIER = 0xFF


class FramingError(ValueError):
    """A framed stream Go's snappy reader would refuse (corrupt or unsupported)."""


def stream(data: bytes) -> bytes:
    """A complete framed stream of ``data``: identifier, then data chunks of <= 64 KiB."""
    if not data:
        return STREAM_IDENTIFIER
    return bytes(cramjam.snappy.compress(data))


def chunks(data: bytes) -> bytes:
    """``data`` as data chunks for a stream already under way (no identifier).

    The chunks end exactly at the end of ``data``, so a reader can decode everything up to
    here as soon as these bytes arrive: Typha's flush after each message.
    """
    if not data:
        return b""
    return stream(data)[len(STREAM_IDENTIFIER):]


class FrameReader:
    """Incremental reader: ``feed`` bytes, take decoded data chunk by chunk.

    Reading one chunk at a time lets the caller stop exactly where a stream ends (a decoder
    restart) and pass the bytes after it to whatever reads next.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._seen_identifier = False

    def feed(self, data: bytes | bytearray) -> None:
        self._buf += data

    def unconsumed(self) -> bytes:
        return bytes(self._buf[self._pos:])

    def next_chunk(self) -> bytes | None:
        """Data of the next data chunk (``b""`` for a skipped chunk), or None if incomplete."""
        buf, p = self._buf, self._pos
        if len(buf) - p < 4:
            return None
        kind = buf[p]
        length = buf[p + 1] | buf[p + 2] << 8 | buf[p + 3] << 16
        if not self._seen_identifier and kind != _IDENTIFIER:
            raise FramingError("snappy stream does not start with the stream identifier")
        if length > MAX_CHUNK_LENGTH:
            raise FramingError(f"snappy chunk of {length} bytes is unsupported")
        if 0x02 <= kind <= 0x7F:
            raise FramingError(f"unskippable snappy chunk type {kind:#04x}")
        end = p + 4 + length
        if len(buf) < end:
            return None
        chunk = bytes(buf[p:end])
        self._pos = end
        if self._pos > 65536 and self._pos * 2 > len(buf):
            del buf[:self._pos]
            self._pos = 0
        if kind == _IDENTIFIER:
            if chunk != STREAM_IDENTIFIER:
                raise FramingError("corrupt snappy stream identifier")
            self._seen_identifier = True
            return b""
        if kind >= 0x80:  # skippable, including padding
            return b""
        if length < 4:
            raise FramingError("snappy data chunk shorter than its checksum")
        if kind == _UNCOMPRESSED:
            if length - 4 > MAX_BLOCK:
                raise FramingError("snappy chunk holds more than 64 KiB")
        else:
            try:
                size = cramjam.snappy.decompress_raw_len(chunk[8:])
            except cramjam.DecompressionError as exc:
                raise FramingError(f"corrupt snappy block: {exc}") from None
            if size > MAX_BLOCK:
                raise FramingError("snappy chunk decodes to more than 64 KiB")
        try:
            return bytes(cramjam.snappy.decompress(STREAM_IDENTIFIER + chunk))
        except cramjam.DecompressionError as exc:
            raise FramingError(f"corrupt snappy chunk: {exc}") from None
