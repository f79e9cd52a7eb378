"""Typed, length-prefixed records on a local byte stream: framing and reading (pure).

The primary's cache feed to its workers (:mod:`trio_typha.upstream.wire`) and the control
channel between them (:mod:`trio_typha.workers.control`) frame their records alike: type
(1 byte), payload length (4 bytes, little endian), payload.  This module owns that framing;
each channel owns its record types, their payloads and its error class, which is what a
record over the channel's size limit raises here.
"""

from __future__ import annotations

__sans_io__ = True

import struct
from collections.abc import Callable, Iterator

HEADER = struct.Struct("<BI")

#: What a follower sends first when it dials a feed over TCP (a relay tier following
#: another trio-typha on its sync port, :mod:`trio_typha.upstream.wire`): the port tells
#: a feed from a Typha client by it (:mod:`trio_typha.server.sniff`).  A gob stream
#: cannot start so: its second byte would be ``FF``.
FEED_PREAMBLE = b"TTYFEED\n"

#: How a channel names a framing error: its own error class, called with the message.
ErrorClass = Callable[[str], Exception]


def over_limit(length: int, limit: int, error: ErrorClass) -> Exception:
    return error(f"record of {length} bytes is over the {limit} limit")


def frame(kind: int, payload: bytes, limit: int, error: ErrorClass) -> bytes:
    """One record: its header, then ``payload`` (at most ``limit`` bytes)."""
    if len(payload) > limit:
        raise over_limit(len(payload), limit, error)
    return HEADER.pack(kind, len(payload)) + payload


class RecordReader:
    """Incremental: :meth:`feed` received bytes, iterate ``(type, payload)`` of the complete
    records so far.  A header announcing more than ``limit`` bytes raises ``error`` before
    any of its payload is buffered further."""

    def __init__(self, limit: int, error: ErrorClass) -> None:
        self.limit = limit
        self.error = error
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        buf = self._buf
        while len(buf) - self._pos >= HEADER.size:
            kind, length = HEADER.unpack_from(buf, self._pos)
            if length > self.limit:
                raise over_limit(length, self.limit, self.error)
            start = self._pos + HEADER.size
            if len(buf) - start < length:
                return
            payload = bytes(buf[start:start + length])
            self._pos = start + length
            yield kind, payload
