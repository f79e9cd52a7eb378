"""The client's names for a server's verdict: the alert about our certificate, and a TLS
alert answering plaintext (tls/diagnosis.py)."""

from __future__ import annotations

import ssl

import pytest

from trio_typha.tls.diagnosis import (
    TLS_ALERT_TO_PLAINTEXT,
    answered_in_tls,
    classify,
    server_refusal,
)


def _alert(reason: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, f"[SSL: {reason}] alert")
    exc.reason = reason
    return exc


@pytest.mark.parametrize(("code", "reason", "alert"), [
    ("TLSV1_ALERT_UNKNOWN_CA", "unknown_ca", "unknown_ca"),
    ("SSLV3_ALERT_CERTIFICATE_EXPIRED", "expired", "certificate_expired"),
    ("SSLV3_ALERT_UNSUPPORTED_CERTIFICATE", "wrong_key_usage", "unsupported_certificate"),
    ("SSLV3_ALERT_BAD_CERTIFICATE", "bad_certificate", "bad_certificate"),
    ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "no_client_cert", "certificate_required"),
])
def test_an_alert_about_our_certificate_is_named_by_the_alert(code: str, reason: str,
                                                              alert: str) -> None:
    got = server_refusal(_alert(code))
    assert got is not None
    assert got[0] == reason
    assert got[1].startswith(f"server refused our certificate: TLS alert {alert}")
    # The client's classification of a failed handshake says the same.
    assert classify(_alert(code), [], local="client") == got


def test_other_errors_are_not_a_refusal() -> None:
    assert server_refusal(_alert("WRONG_VERSION_NUMBER")) is None
    assert server_refusal(ssl.SSLEOFError(8, "EOF")) is None
    # On the server, a client that sent no certificate is still that.
    assert classify(_alert("PEER_DID_NOT_RETURN_A_CERTIFICATE"), [])[0] == "no_client_cert"


def test_a_handshake_ended_before_any_server_certificate_is_a_plaintext_port() -> None:
    eof = _alert("UNEXPECTED_EOF_WHILE_READING")
    assert classify(eof, [], local="client")[0] == "tls_to_plaintext_port"
    assert classify(eof, [], local="server")[0] == "other"


def test_a_tls_alert_answering_plaintext_is_recognised() -> None:
    failure = answered_in_tls(TLS_ALERT_TO_PLAINTEXT)
    assert failure is not None and failure.reason == "plaintext_to_tls_port"
    assert answered_in_tls(bytes([21, 3, 1, 0, 2, 2, 40])) is not None  # any version, alert
    # A gob or HTTP/2 server's first bytes are not.
    assert answered_in_tls(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00") is None
    assert answered_in_tls(b"\x15\x03") is None
