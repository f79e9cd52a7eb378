"""gRPC request heads in, response headers and trailers out (pure).

A request that is not gRPC at all (wrong method or content-type) is answered at the HTTP
level (:class:`HttpError`); one that is gRPC but asks for something this server does not
do gets a gRPC status (:class:`~trio_typha.grpcwire.status.GrpcError`).
"""

from __future__ import annotations

__sans_io__ = True

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ...grpcwire.status import GrpcError, StatusCode, encode_grpc_message

Headers = list[tuple[bytes, bytes]]

CONTENT_TYPE = b"application/grpc"
_TIMEOUT = re.compile(rb"^(\d{1,8})([HMSmun])$")
_TIMEOUT_UNIT = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


class HttpError(Exception):
    """Answer the request with a plain HTTP ``status``: it is not a gRPC request we serve."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What a gRPC server needs from a request's HEADERS frame."""

    path: str
    authority: str = ""
    user_agent: str = ""
    #: Seconds from now, from grpc-timeout; None for no deadline.
    timeout: float | None = None


def parse_timeout(value: bytes) -> float:
    """Seconds in a grpc-timeout value such as ``b"100m"``; ValueError if malformed."""
    m = _TIMEOUT.match(value)
    if m is None:
        raise ValueError(f"malformed grpc-timeout {value!r}")
    return int(m.group(1)) * _TIMEOUT_UNIT[m.group(2)]


def _content_type_ok(value: bytes) -> bool:
    # "application/grpc", "application/grpc+proto" or either with parameters; other
    # sub-types (+json, ...) are codecs this server does not speak.
    base = value.split(b";", 1)[0].strip().lower()
    return base in (CONTENT_TYPE, CONTENT_TYPE + b"+proto")


def parse_request(headers: Iterable[tuple[bytes, bytes]]) -> RequestHead:
    """Validate a request head; raise :class:`HttpError` or :class:`GrpcError` if unusable.

    h2 has already checked the pseudo-header rules of HTTP/2 itself.
    """
    fields: dict[bytes, bytes] = {}
    for name, value in headers:
        fields.setdefault(name, value)
    method = fields.get(b":method", b"")
    if method != b"POST":
        raise HttpError(405, f"method {method.decode('latin-1')} not allowed, gRPC uses POST")
    content_type = fields.get(b"content-type")
    if content_type is None or not _content_type_ok(content_type):
        shown = "missing" if content_type is None else repr(content_type.decode("latin-1"))
        raise HttpError(415, f"content-type {shown} is not application/grpc")
    encoding = fields.get(b"grpc-encoding", b"identity")
    if encoding != b"identity":
        raise GrpcError(StatusCode.UNIMPLEMENTED,
                        f"grpc-encoding {encoding.decode('latin-1')} is not supported")
    timeout = None
    if b"grpc-timeout" in fields:
        try:
            timeout = parse_timeout(fields[b"grpc-timeout"])
        except ValueError as exc:
            raise GrpcError(StatusCode.INVALID_ARGUMENT, str(exc)) from None
    return RequestHead(
        path=fields.get(b":path", b"").decode("latin-1"),
        authority=fields.get(b":authority", b"").decode("latin-1"),
        user_agent=fields.get(b"user-agent", b"").decode("latin-1"),
        timeout=timeout,
    )


def response_headers() -> Headers:
    """Initial HEADERS of a gRPC response."""
    return [(b":status", b"200"), (b"content-type", CONTENT_TYPE),
            (b"grpc-accept-encoding", b"identity")]


def trailers(code: StatusCode, message: str = "") -> Headers:
    """Trailing HEADERS that end a gRPC response with ``code``."""
    out = [(b"grpc-status", str(int(code)).encode())]
    if message:
        out.append((b"grpc-message", encode_grpc_message(message).encode("ascii")))
    return out


def trailers_only(code: StatusCode, message: str = "") -> Headers:
    """A whole error response in one HEADERS frame (gRPC's Trailers-Only form)."""
    return response_headers() + trailers(code, message)


def http_error(status: int, message: str) -> Headers:
    """A non-200 response for requests that are not gRPC (a gRPC status is added for clients)."""
    return [(b":status", str(status).encode()), (b"content-type", b"text/plain; charset=utf-8"),
            *trailers(StatusCode.INTERNAL, message)]
