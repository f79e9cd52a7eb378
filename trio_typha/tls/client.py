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
    UNANSWERED_HELLO,
    TLSFailure,
    capturing,
    classify,
    enable_capture,
    server_refusal,
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


class ClientTLSStream(trio.abc.Stream):
    """A client's TLS stream that reports the server refusing our certificate.

    The server's verdict on our certificate can come after our handshake is over (always
    under TLS 1.3): as an alert on the first read or write, or, for a certificate whose
    CN / URI SAN it does not accept (which it checks after the handshake), as the
    connection closing before the server has sent a byte.  Either is raised as
    :class:`TLSFailure`; everything else passes through unchanged.
    """

    def __init__(self, tls: trio.SSLStream[trio.abc.Stream]) -> None:
        self.tls = tls
        self._answered = False  # the server has sent application data

    def getpeercert(self) -> dict[str, object] | None:
        cert: dict[str, object] | None = self.tls.getpeercert()
        return cert

    def selected_alpn_protocol(self) -> str | None:
        protocol: str | None = self.tls.selected_alpn_protocol()
        return protocol

    def _refused(self, exc: trio.BrokenResourceError | None) -> TLSFailure | None:
        cause = exc.__cause__ if exc is not None else None
        if isinstance(cause, ssl.SSLError):
            refused = server_refusal(cause)
            if refused is not None:
                return TLSFailure(*refused)
        if self._answered:
            return None
        if exc is None or isinstance(cause, ssl.SSLEOFError | ConnectionResetError):
            return TLSFailure(IDENTITY_MISMATCH, (
                "server refused our certificate: it closed the connection after the TLS "
                "handshake without a word, as it does when the certificate's CN / URI SAN "
                "is not the one it requires (its TYPHA_CLIENTCN / TYPHA_CLIENTURISAN)"))
        return None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self.tls.send_all(data)
        except trio.BrokenResourceError as exc:
            if (failure := self._refused(exc)) is not None:
                raise failure from exc
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.tls.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            data = await self.tls.receive_some(max_bytes)
        except trio.BrokenResourceError as exc:
            if (failure := self._refused(exc)) is not None:
                raise failure from exc
            raise
        if data:
            self._answered = True
        elif (failure := self._refused(None)) is not None:
            raise failure
        return data

    async def aclose(self) -> None:
        """Close with close_notify, so the server sees a clean end, not a truncation."""
        await self.tls.aclose()


async def tls_handshake(stream: trio.abc.Stream, context: ssl.SSLContext, *,
                        server_hostname: str | None = None, server_cn: str = "",
                        server_uri_san: str = "") -> ClientTLSStream:
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
            if isinstance(exc.__cause__, ConnectionResetError) and not certificates:
                raise TLSFailure(*UNANSWERED_HELLO) from exc.__cause__
            raise
    if server_cn or server_uri_san:
        reason = check_peer_identity(tls.getpeercert(), server_cn, server_uri_san)
        if reason:
            await trio.aclose_forcefully(tls)
            raise TLSFailure(IDENTITY_MISMATCH, f"server {reason}")
    return ClientTLSStream(tls)
