"""gRPC status codes, the one exception that carries them, and grpc-message encoding.

Everything that ends a gRPC stream with a non-OK status raises :class:`GrpcError`; the
stream boundary is the only place that turns it into trailers.
"""

from __future__ import annotations

__sans_io__ = True

import enum
import re


class StatusCode(enum.IntEnum):
    """The canonical gRPC status codes (grpc/doc/statuscodes.md)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class GrpcError(Exception):
    """End this stream with ``code`` and ``message`` (sent as grpc-status / grpc-message)."""

    def __init__(self, code: StatusCode, message: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}" if self.message else self.code.name


# gRPC's HTTP/2 spec: grpc-message is UTF-8, then every byte outside printable ASCII
# (0x20-0x7E) and "%" itself is sent as %XX.
_SAFE = frozenset(range(0x20, 0x7F)) - {ord("%")}
_PERCENT_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")


def encode_grpc_message(message: str) -> str:
    """Percent-encode ``message`` for the grpc-message header."""
    raw = message.encode("utf-8")
    if all(b in _SAFE for b in raw):
        return message
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)


def decode_grpc_message(value: str) -> str:
    """Undo :func:`encode_grpc_message`; malformed escapes are kept literally (as the spec asks)."""
    raw = _PERCENT_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), value.encode("ascii"))
    return raw.decode("utf-8", errors="replace")
