"""gRPC request heads, trailers and grpc-message percent-encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.grpcwire.status import (
    GrpcError,
    StatusCode,
    decode_grpc_message,
    encode_grpc_message,
)
from trio_typha.protocols.grpc.metadata import (
    HttpError,
    parse_request,
    parse_timeout,
    trailers,
    trailers_only,
)


def head(**overrides: str) -> list[tuple[bytes, bytes]]:
    fields = {":method": "POST", ":scheme": "http", ":path": "/typha.v1.Sync/Sync",
              ":authority": "typha:5473", "content-type": "application/grpc",
              "te": "trailers", "user-agent": "grpc-go/1.60"}
    fields.update(overrides)
    return [(k.encode(), v.encode()) for k, v in fields.items() if v is not None]


@given(st.text())
def test_grpc_message_round_trips_and_is_header_safe(text):
    encoded = encode_grpc_message(text)
    assert all(0x20 <= ord(c) <= 0x7E for c in encoded)
    assert decode_grpc_message(encoded) == text


def test_grpc_message_encoding_matches_the_spec():
    assert encode_grpc_message("plain text") == "plain text"
    assert encode_grpc_message("100%") == "100%25"
    assert encode_grpc_message("a\nb") == "a%0Ab"
    assert encode_grpc_message("café") == "caf%C3%A9"
    assert decode_grpc_message("bad %zz escape") == "bad %zz escape"


@pytest.mark.parametrize(("value", "seconds"), [
    (b"1H", 3600.0), (b"2M", 120.0), (b"3S", 3.0), (b"250m", 0.25), (b"7u", 7e-6),
    (b"99999999n", 0.099999999),
])
def test_timeout_units(value, seconds):
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"1", b"S", b"123456789S", b"1.5S", b"-1S", b"1X"])
def test_malformed_timeouts(value):
    with pytest.raises(ValueError):
        parse_timeout(value)


def test_request_head_fields():
    parsed = parse_request(head(**{"grpc-timeout": "5S"}))
    assert parsed.path == "/typha.v1.Sync/Sync"
    assert parsed.authority == "typha:5473"
    assert parsed.user_agent == "grpc-go/1.60"
    assert parsed.timeout == 5.0
    assert parse_request(head()).timeout is None


@pytest.mark.parametrize("content_type", [
    "application/grpc", "application/grpc+proto", "application/grpc; charset=utf-8",
    "Application/GRPC",
])
def test_grpc_content_types_accepted(content_type):
    parse_request(head(**{"content-type": content_type}))


@pytest.mark.parametrize(("overrides", "status"), [
    ({"content-type": "application/json"}, 415),
    ({"content-type": "application/grpc+json"}, 415),
    ({"content-type": "application/grpcfoo"}, 415),
    ({"content-type": None}, 415),
    ({":method": "GET"}, 405),
])
def test_non_grpc_requests_are_http_errors(overrides, status):
    with pytest.raises(HttpError) as info:
        parse_request(head(**overrides))
    assert info.value.status == status


def test_unsupported_encoding_and_bad_timeout_are_grpc_errors():
    with pytest.raises(GrpcError) as info:
        parse_request(head(**{"grpc-encoding": "gzip"}))
    assert info.value.code is StatusCode.UNIMPLEMENTED
    with pytest.raises(GrpcError) as info:
        parse_request(head(**{"grpc-timeout": "soon"}))
    assert info.value.code is StatusCode.INVALID_ARGUMENT
    parse_request(head(**{"grpc-encoding": "identity"}))


def test_trailers():
    assert trailers(StatusCode.OK) == [(b"grpc-status", b"0")]
    assert trailers(StatusCode.UNAVAILABLE, "going 100% away") == [
        (b"grpc-status", b"14"), (b"grpc-message", b"going 100%25 away")]
    only = dict(trailers_only(StatusCode.UNIMPLEMENTED, "nope"))
    assert only[b":status"] == b"200"
    assert only[b"content-type"] == b"application/grpc"
    assert only[b"grpc-status"] == b"12"
