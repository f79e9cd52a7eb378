"""What a peer on port 5473 speaks, from its first bytes (pure).

The port serves Typha's gob protocol and gRPC (HTTP/2 with prior knowledge), and to
sibling replicas their warm start (:data:`WARM_MAGIC`, :mod:`trio_typha.warm`).  Two other
things arrive there by mistake and deserve a clear answer at once rather than a decoder
error or the handshake timeout: a TLS ClientHello (a client configured for TLS talking to a
plaintext server) and an HTTP/1.x request (a person with curl, a probe, a proxy).

Each is told by a fixed prefix: ``PRI`` starts the HTTP/2 preface, ``16 03`` a TLS
handshake record, ``GET ``/``POST ``/... an HTTP/1.x request line, the feed's preamble a
relay tier following this process.  A gob stream matches
none of them past its second byte: it starts with a message length, then the negative id of
a user type, which for every id gob assigns (>= 65) is a multi-byte int starting ``FF``.
"""

from __future__ import annotations

__sans_io__ = True

import enum

from ..records import FEED_PREAMBLE


class Wire(enum.Enum):
    GOB = "typha-gob"
    H2 = "http/2"
    TLS = "tls"
    HTTP1 = "http/1.x"
    FEED = "feed"  # a relay tier following this trio-typha's caches (upstream/wire.py)
    WARM = "warm-start"


#: What a sibling starting warm sends first (its second byte is no gob stream's ``FF``).
WARM_MAGIC = b"TTWARM01"


_PREFIXES: tuple[tuple[bytes, Wire], ...] = (
    (b"PRI", Wire.H2),
    (b"\x16\x03", Wire.TLS),
    (FEED_PREAMBLE, Wire.FEED),
    (WARM_MAGIC, Wire.WARM),
    *((m + b" ", Wire.HTTP1) for m in (b"GET", b"HEAD", b"POST", b"PUT", b"DELETE",
                                       b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE")),
)

#: Enough to decide: the longest prefix.
SNIFF_BYTES = max(len(p) for p, _ in _PREFIXES)


def classify(data: bytes) -> Wire | None:
    """The protocol ``data`` (the first bytes received) starts, or None: need more bytes."""
    undecided = False
    for prefix, wire in _PREFIXES:
        n = min(len(data), len(prefix))
        if data[:n] == prefix[:n]:
            if len(data) >= len(prefix):
                return wire
            undecided = True
    return None if undecided else Wire.GOB


def rejection_reason(wire: Wire, *, tls_configured: bool) -> str:
    """The log line's reason for closing a peer that speaks ``wire``."""
    if wire is Wire.WARM:
        return "a sibling's warm-start request; this process serves no warm start"
    if wire is Wire.TLS:
        return ("TLS ClientHello on a plaintext connection" + (
            "" if tls_configured else " (this server has no TLS configured)"))
    if wire is Wire.FEED:
        return "a relay's feed request; this process serves no feed"
    return "HTTP/1.x request; this port serves Typha's protocol and gRPC over HTTP/2 only"


HTTP1_BODY = (b"This is Typha's sync port: Typha's own protocol, or gRPC over HTTP/2 "
              b"(prior knowledge). HTTP/1.x is not served here; health and metrics have "
              b"their own ports.\n")


def http1_response() -> bytes:
    """What an HTTP/1.x request gets before the connection is closed."""
    return (b"HTTP/1.1 400 Bad Request\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: " + str(len(HTTP1_BODY)).encode() + b"\r\n"
            b"Connection: close\r\n\r\n" + HTTP1_BODY)
