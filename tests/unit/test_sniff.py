"""Telling the port's protocols apart from their first bytes (pure)."""

from __future__ import annotations

import ssl

from hypothesis import given
from hypothesis import strategies as st

from testbed.hostile import HTTP1_REQUEST, PREFACE, tls_client_hello
from trio_typha.protocols.gob.client_session import ClientSession
from trio_typha.server.sniff import Wire, classify, http1_response


def gob_hello(**kwargs) -> bytes:
    return ClientSession(**kwargs).data_to_send()


@given(st.sampled_from(["felix", "bgp", "tunnel-ip-allocation", "node-status", ""]),
       st.text(max_size=300), st.text(max_size=300))
def test_every_gob_client_stream_is_gob(syncer, hostname, info):
    data = gob_hello(syncer_type=syncer, hostname=hostname, info=info)
    decided = [classify(data[:n]) for n in range(1, len(data) + 1)]
    # Undecided for at most the first byte or two, then gob for good.
    assert Wire.GOB in decided[:2]
    assert set(decided[decided.index(Wire.GOB):]) == {Wire.GOB}
    assert not {Wire.H2, Wire.TLS, Wire.HTTP1} & set(decided)


def test_h2_preface():
    assert classify(PREFACE[:1]) is None and classify(PREFACE[:2]) is None
    assert classify(PREFACE[:3]) is Wire.H2
    assert classify(PREFACE) is Wire.H2


def test_tls_client_hello_of_every_version():
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        hello = tls_client_hello(version)
        assert classify(hello[:1]) is None
        assert classify(hello[:2]) is Wire.TLS


def test_http1_requests():
    for method in (b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PATCH",
                   b"CONNECT", b"TRACE"):
        request = method + b" / HTTP/1.1\r\nHost: x\r\n\r\n"
        assert all(classify(request[:n]) is None for n in range(1, len(method) + 1))
        assert classify(request) is Wire.HTTP1
    assert classify(HTTP1_REQUEST) is Wire.HTTP1


def test_http1_answer_is_a_complete_response():
    head, _, body = http1_response().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert f"Content-Length: {len(body)}".encode() in head
    assert b"Connection: close" in head


def test_a_relays_feed_preamble_is_told_from_gob_once_complete():
    from trio_typha.records import FEED_PREAMBLE
    from trio_typha.upstream import wire
    data = FEED_PREAMBLE + wire.encode_hello("felix")
    assert [classify(data[:n]) for n in range(1, len(FEED_PREAMBLE))] == [None] * (
        len(FEED_PREAMBLE) - 1)
    assert classify(data) is Wire.FEED
    assert classify(FEED_PREAMBLE[:3] + b"x") is Wire.GOB  # a near miss is not a feed
