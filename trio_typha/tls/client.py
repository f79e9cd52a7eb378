"""The clients' side of Typha's TLS: handshake, then the server's CN / URI SAN, named errors.

As Calico's clients do, the chain is verified against the CA file but the host name is not:
the identity that counts is the server certificate's CN or URI SAN (either one matching
when both are expected).  Every failure raises :class:`TLSFailure` with the same reasons the
server logs (:mod:`trio_typha.tls.diagnosis`).
"""

from __future__ import annotations

import ssl

import trio

from .diagnosis import (
    IDENTITY_MISMATCH,
    TLSFailure,
    capturing,
    classify,
    enable_capture,
)
from .server import check_peer_identity


def client_ssl_context(ca_file: str | None, cert_file: str | None = None,
                       key_file: str | None = None) -> ssl.SSLContext:
    """A client context that also records the server's certificate for diagnosis (a
    Python call per TLS record: meant for the command-line client's one connection)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    enable_capture(ctx)
    ctx.check_hostname = False  # Typha checks CN / URI SAN, not the host name
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


async def tls_handshake(stream: trio.abc.Stream, context: ssl.SSLContext, *,
                        server_hostname: str | None = None, server_cn: str = "",
                        server_uri_san: str = "") -> trio.SSLStream[trio.abc.Stream]:
    """Wrap ``stream`` in TLS and check the server's identity; :class:`TLSFailure` if not.

    The failure names the server's certificate details only if ``context`` records it
    (:func:`client_ssl_context`); the reason is named either way."""
    tls = trio.SSLStream(stream, context, server_hostname=server_hostname)
    with capturing() as certificates:
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError as exc:
            if isinstance(exc.__cause__, ssl.SSLError):
                raise TLSFailure(*classify(exc.__cause__, certificates, local="client")
                                 ) from exc.__cause__
            raise
    if server_cn or server_uri_san:
        reason = check_peer_identity(tls.getpeercert(), server_cn, server_uri_san)
        if reason:
            await trio.aclose_forcefully(tls)
            raise TLSFailure(IDENTITY_MISMATCH, f"server {reason}")
    return tls
