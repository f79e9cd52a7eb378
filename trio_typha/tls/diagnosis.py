"""Why a TLS handshake failed, in words an operator can act on.

OpenSSL reports a failed handshake as a reason code (and, for a rejected certificate, an
X.509 verify code); neither says *which* certificate or *what* it contained.  To say that,
the server context records the peer's Certificate handshake message as it is read (through
``SSLContext._msg_callback``: OpenSSL's message callback, which sees handshake messages
after decryption, so TLS 1.3 too), and :func:`classify` combines the error with the parsed
leaf certificate (``cryptography``) into a named reason and a detail such as the issuer
presented or the validity dates.

The same classification serves both ends: the server logs and counts failures
(:class:`FailureLog`, ``typha_tls_handshake_failures{reason}``), the Python clients raise
:class:`TLSFailure` with the same reasons.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import logging
import ssl
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# The named reasons (also the metric's label values).
PLAINTEXT_TO_TLS_PORT = "plaintext_to_tls_port"
TLS_TO_PLAINTEXT_PORT = "tls_to_plaintext_port"
UNKNOWN_CA = "unknown_ca"
NO_CLIENT_CERT = "no_client_cert"
EXPIRED = "expired"
NOT_YET_VALID = "not_yet_valid"
IDENTITY_MISMATCH = "identity_mismatch"
WRONG_KEY_USAGE = "wrong_key_usage"
PROTOCOL_VERSION = "protocol_version"
CIPHER_MISMATCH = "cipher_mismatch"
BAD_CERTIFICATE = "bad_certificate"
OTHER = "other"
REASONS = (PLAINTEXT_TO_TLS_PORT, TLS_TO_PLAINTEXT_PORT, UNKNOWN_CA, NO_CLIENT_CERT, EXPIRED,
           NOT_YET_VALID, IDENTITY_MISMATCH, WRONG_KEY_USAGE, PROTOCOL_VERSION,
           CIPHER_MISMATCH, BAD_CERTIFICATE, OTHER)

#: A client's handshake that ended (EOF or reset) before any server Certificate arrived.
UNANSWERED_HELLO = (TLS_TO_PLAINTEXT_PORT, "the server closed the connection without "
                    "answering our TLS ClientHello: its port does not serve TLS (a "
                    "plaintext port?)")

# X.509 verify codes (OpenSSL's X509_V_ERR_*).
_UNKNOWN_CA_CODES = {2, 18, 19, 20, 21}  # no issuer / self-signed / unable to verify leaf
_EXPIRED_CODES = {10, 12}  # cert / CRL has expired
_NOT_YET_CODES = {9, 11}
_PURPOSE_CODES = {26, 27, 28}  # unsupported purpose / untrusted / rejected
# SSL reason strings (OpenSSL's SSL_R_*), as the ssl module reports them.
_NO_CERT_REASONS = {"PEER_DID_NOT_RETURN_A_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED"}
_VERSION_REASONS = {"UNSUPPORTED_PROTOCOL", "WRONG_SSL_VERSION", "TLSV1_ALERT_PROTOCOL_VERSION",
                    "NO_PROTOCOLS_AVAILABLE", "VERSION_TOO_LOW", "VERSION_TOO_HIGH",
                    "UNEXPECTED_MESSAGE"}
_CIPHER_REASONS = {"NO_SHARED_CIPHER", "NO_CIPHERS_AVAILABLE", "SSLV3_ALERT_HANDSHAKE_FAILURE"}
_ALERT_REASONS = {  # the peer rejected *our* certificate and said why
    "TLSV1_ALERT_UNKNOWN_CA": UNKNOWN_CA,
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": EXPIRED,
    "SSLV3_ALERT_BAD_CERTIFICATE": BAD_CERTIFICATE,
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": WRONG_KEY_USAGE,
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": BAD_CERTIFICATE,
}

_TLS13 = 0x0304
_CERTIFICATE_MSG = 11
_HANDSHAKE = 22


# --- capturing the peer's certificate --------------------------------------------------------

#: The Certificate messages read during the handshake running in this task (None: not
#: capturing).  A context variable, because OpenSSL calls back synchronously inside
#: ``do_handshake`` in the task that runs it.
_captured: contextvars.ContextVar[list[tuple[int, bytes]] | None] = contextvars.ContextVar(
    "tls_captured_certificates", default=None)


def _on_message(conn: Any, direction: str, version: int, content_type: int, msg_type: int,
                data: bytes) -> None:
    if msg_type == _CERTIFICATE_MSG and content_type == _HANDSHAKE and direction == "read":
        seen = _captured.get()
        if seen is not None:
            seen.append((version, data))


def enable_capture(ctx: ssl.SSLContext) -> None:
    """Make handshakes on ``ctx`` record the peer's Certificate message (see module doc)."""
    ctx._msg_callback = _on_message  # type: ignore[attr-defined]


@contextlib.contextmanager
def capturing() -> Iterator[list[tuple[int, bytes]]]:
    """Collect the Certificate messages of handshakes run inside the block."""
    seen: list[tuple[int, bytes]] = []
    token = _captured.set(seen)
    try:
        yield seen
    finally:
        _captured.reset(token)


def leaf_certificate(messages: list[tuple[int, bytes]]) -> bytes | None:
    """The DER of the first certificate in the last captured Certificate message."""
    if not messages:
        return None
    version, data = messages[-1]
    body = data[4:]  # handshake header: type, 3-byte length
    try:
        if version == _TLS13:
            body = body[1 + body[0]:]  # certificate_request_context
        if len(body) < 6 or int.from_bytes(body[:3], "big") == 0:
            return None
        length = int.from_bytes(body[3:6], "big")
        der = body[6:6 + length]
    except IndexError:
        return None
    return der if len(der) == length else None


# --- describing a certificate ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CertInfo:
    subject: str
    issuer: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    extended_key_usage: tuple[str, ...]  # empty: no EKU extension (any usage)
    cns: tuple[str, ...]
    uri_sans: tuple[str, ...]

    def validity(self) -> str:
        return (f"valid from {self.not_before:%Y-%m-%d %H:%M:%S} UTC "
                f"until {self.not_after:%Y-%m-%d %H:%M:%S} UTC")


def describe(der: bytes) -> CertInfo | None:
    """The facts about a DER certificate that explain a rejection (None if unparsable)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        usages = tuple(_EKU_NAMES.get(u.dotted_string, u.dotted_string) for u in eku)
    except (x509.ExtensionNotFound, ValueError):
        usages = ()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = tuple(san.get_values_for_type(x509.UniformResourceIdentifier))
    except (x509.ExtensionNotFound, ValueError):
        uris = ()
    cns = tuple(str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME))
    return CertInfo(cert.subject.rfc4514_string(), cert.issuer.rfc4514_string(),
                    cert.not_valid_before_utc.replace(tzinfo=None),
                    cert.not_valid_after_utc.replace(tzinfo=None), usages, cns, uris)


_EKU_NAMES = {"1.3.6.1.5.5.7.3.1": "serverAuth", "1.3.6.1.5.5.7.3.2": "clientAuth",
              "2.5.29.37.0": "anyExtendedKeyUsage"}


# --- classifying -------------------------------------------------------------------------------

def classify(exc: ssl.SSLError, messages: list[tuple[int, bytes]], *, local: str = "server"
             ) -> tuple[str, str]:
    """(reason, detail) for a failed handshake; ``local`` is our side ("server"/"client")."""
    peer = "client" if local == "server" else "server"
    der = leaf_certificate(messages)
    info = describe(der) if der else None
    about = f"{peer} certificate {info.subject!r}" if info else f"{peer} certificate"
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        message = exc.verify_message
        if code in _UNKNOWN_CA_CODES:
            issuer = f" issued by {info.issuer!r}" if info else ""
            return UNKNOWN_CA, (f"{about}{issuer} is not signed by a trusted CA "
                                f"({message})")
        if code in _EXPIRED_CODES:
            when = f": {info.validity()}" if info else ""
            return EXPIRED, f"{about} has expired{when}"
        if code in _NOT_YET_CODES:
            when = f": {info.validity()}" if info else ""
            return NOT_YET_VALID, f"{about} is not valid yet{when}"
        if code in _PURPOSE_CODES:
            usages = (", ".join(info.extended_key_usage) or "none") if info else "?"
            wanted = "clientAuth" if peer == "client" else "serverAuth"
            return WRONG_KEY_USAGE, (f"{about} may not be used for {wanted} "
                                     f"(extended key usage: {usages})")
        if code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
            return IDENTITY_MISMATCH, f"{about}: {message}"
        return BAD_CERTIFICATE, f"{about}: {message} (verify code {code})"
    reason = getattr(exc, "reason", None) or ""
    if local == "client" and (refused := server_refusal(exc)) is not None:
        return refused
    if reason in _NO_CERT_REASONS:
        return NO_CLIENT_CERT, f"the {peer} sent no certificate; one signed by the CA is required"
    if reason in _ALERT_REASONS:
        return _ALERT_REASONS[reason], f"the {peer} rejected our certificate ({reason})"
    if reason in _VERSION_REASONS:
        return PROTOCOL_VERSION, (f"no TLS version in common with the {peer} ({reason}); "
                                  "see TLS_MIN_VERSION")
    if reason in _CIPHER_REASONS:
        return CIPHER_MISMATCH, (f"no cipher suite in common with the {peer} ({reason}); "
                                 "see TLS_CIPHER_SUITES")
    if reason == "UNEXPECTED_EOF_WHILE_READING":
        if local == "client" and not messages:
            return UNANSWERED_HELLO
        return OTHER, (f"the {peer} closed the connection during the handshake (did it "
                       f"reject the {local} certificate?)")
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE"):
        return PLAINTEXT_TO_TLS_PORT, f"the {peer} does not speak TLS ({reason})"
    return OTHER, str(exc) or type(exc).__name__


_ALERT_PREFIXES = ("SSLV3_ALERT_", "TLSV1_ALERT_", "TLSV13_ALERT_")


def server_refusal(exc: ssl.SSLError) -> tuple[str, str] | None:
    """(reason, detail) when ``exc`` is the alert a server sent about our certificate.

    Under TLS 1.3 the client's handshake is over before the server has judged the client
    certificate, so the alert arrives on the first read or write after it, not inside
    ``do_handshake``; the same alerts end a TLS 1.2 handshake."""
    code = getattr(exc, "reason", None) or ""
    if code in _ALERT_REASONS:
        reason = _ALERT_REASONS[code]
    elif code == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
        reason = NO_CLIENT_CERT
    else:
        return None
    alert = code
    for prefix in _ALERT_PREFIXES:
        alert = alert.removeprefix(prefix)
    detail = f"server refused our certificate: TLS alert {alert.lower()}"
    if reason == NO_CLIENT_CERT:
        detail += " (it requires one: give --cert-file and --key-file)"
    return reason, detail


#: What the server sends instead of a word to a client speaking plaintext to its TLS port:
#: a fatal ``unexpected_message`` alert, in a TLS 1.2 record as a TLS 1.3 server would.
TLS_ALERT_TO_PLAINTEXT = bytes([21, 3, 3, 0, 2, 2, 10])


def answered_in_tls(first: bytes | bytearray) -> TLSFailure | None:
    """The failure to report when a plaintext client's first bytes from the server are a
    TLS alert record (:data:`TLS_ALERT_TO_PLAINTEXT` or any other): the port wants TLS."""
    if len(first) >= 5 and first[0] == 21 and first[1] == 3 and first[3:5] == b"\0\2":
        return TLSFailure(PLAINTEXT_TO_TLS_PORT, "the server answered our plaintext with a "
                          "TLS alert: its port serves TLS (give --ca-file, and --cert-file "
                          "and --key-file)")
    return None


# --- reporting -----------------------------------------------------------------------------------

class TLSFailure(ConnectionError):
    """A TLS handshake or identity check failed for a named reason (client side)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"TLS {reason}: {detail}")
        self.reason = reason
        self.detail = detail


class FailureLog:
    """One WARNING per peer host and reason; repeats are counted and logged at DEBUG.

    ``count(reason)`` increments the metric for every failure.  Bounded: the oldest peers
    are forgotten first.
    """

    def __init__(self, count: Callable[[str], None] | None = None, *, max_peers: int = 4096
                 ) -> None:
        self._count = count
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.max_peers = max_peers

    def record(self, peer: str, reason: str, detail: str) -> None:
        if self._count is not None:
            self._count(reason)
        key = (_host(peer), reason)
        repeats = self._seen.pop(key, -1) + 1
        self._seen[key] = repeats
        while len(self._seen) > self.max_peers:
            self._seen.popitem(last=False)
        if repeats == 0:
            log.warning("TLS handshake with %s failed: %s: %s", peer, reason, detail)
        else:
            log.debug("TLS handshake with %s failed again (%d repeats): %s: %s", peer,
                      repeats, reason, detail)


def _host(peer: str) -> str:
    host, sep, _ = peer.rpartition(":")
    return host if sep else peer
