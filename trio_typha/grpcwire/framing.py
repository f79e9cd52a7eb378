"""gRPC length-prefixed message framing (sans-IO).

On the wire each message is ``flag (1 byte) | length (4 bytes, big endian) | payload``.
DATA frames cut this stream anywhere, so the decoder keeps whatever is incomplete and
hands out whole payloads only.  Compression is never negotiated by this server, so a set
compressed flag is a protocol error.
"""

from __future__ import annotations

__sans_io__ = True

import struct

from .status import GrpcError, StatusCode

PREFIX = struct.Struct(">BI")
PREFIX_LEN = PREFIX.size  # 5


class FramingError(GrpcError):
    """The peer's byte stream is not a valid sequence of gRPC messages."""


def frame_message(payload: bytes) -> bytes:
    """``payload`` with its 5-byte gRPC prefix (uncompressed)."""
    return PREFIX.pack(0, len(payload)) + payload


class MessageDecoder:
    """Turns arbitrary chunks of a gRPC stream into whole message payloads.

    Memory is bounded by ``max_message_size``: a prefix announcing a bigger message is
    rejected as soon as its five bytes are in, before any of the payload is kept.
    """

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size
        self._buf = bytearray()
        self._length: int | None = None  # payload length once the prefix has been read
        self._error: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole message."""
        return len(self._buf)

    @property
    def at_boundary(self) -> bool:
        """True when no partial message is pending (a clean place for the stream to end)."""
        return not self._buf and self._length is None

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the payloads it completed, in order.

        Raises :class:`FramingError` on a compressed or oversized message; the decoder
        stays failed afterwards.
        """
        if self._error is not None:
            raise self._error
        self._buf += data
        out: list[bytes] = []
        buf = self._buf
        pos = 0
        try:
            while True:
                length = self._length  # a local: never None in the arithmetic below
                if length is None:
                    if len(buf) - pos < PREFIX_LEN:
                        break
                    flag, length = PREFIX.unpack_from(buf, pos)
                    pos += PREFIX_LEN
                    self._check(flag, length)
                    self._length = length
                if len(buf) - pos < length:
                    break
                out.append(bytes(buf[pos:pos + length]))
                pos += length
                self._length = None
        finally:
            del buf[:pos]
        return out

    def _check(self, flag: int, length: int) -> None:
        if flag == 1:
            self._fail(StatusCode.INTERNAL,
                       "compressed message received but no grpc-encoding was negotiated")
        elif flag != 0:
            self._fail(StatusCode.INTERNAL, f"invalid gRPC message flag {flag}")
        if length > self.max_message_size:
            self._fail(StatusCode.RESOURCE_EXHAUSTED,
                       f"received message larger than max ({length} vs. {self.max_message_size})")

    def _fail(self, code: StatusCode, message: str) -> None:
        self._error = FramingError(code, message)
        self._buf.clear()
        raise self._error
