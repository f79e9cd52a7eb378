"""Port 5473: accept, optionally terminate TLS, tell gRPC from Typha's gob protocol, hand off.

Both protocols share the port.  Under TLS, ALPN ``h2`` means gRPC.  Otherwise the first bytes
decide (:mod:`.sniff`): the HTTP/2 preface, a gob stream, or one of two mistakes closed at
once with a named reason: a TLS ClientHello on a plaintext connection, and an HTTP/1.x
request (answered ``400``).
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Awaitable, Callable

import trio

from ..observe.throttle import held_back
from ..sessions.connections import Connection
from ..sessions.context import ServerContext
from ..tls.diagnosis import (
    IDENTITY_MISMATCH,
    PLAINTEXT_TO_TLS_PORT,
    TLS_ALERT_TO_PLAINTEXT,
    TLS_TO_PLAINTEXT_PORT,
    FailureLog,
    capturing,
)
from ..tls.diagnosis import classify as classify_tls_failure
from ..tls.server import ServerTLS, check_peer_identity, peer_identity
from ..tls.stream import TLSStream
from .sniff import SNIFF_BYTES, Wire, classify, http1_response, rejection_reason

log = logging.getLogger(__name__)

HTTP1_READ_SECS = 1.0  # how long an HTTP/1.x request head may take before we answer
HTTP1_MAX_HEAD = 16 * 1024

Session = Callable[..., Awaitable[None]]  # (stream, ctx, *, prefix, conn) -> None


class Protocols:
    """Which session handles which protocol (either may be disabled by config); ``warm``
    serves siblings' warm starts (only a primary watching a datastore has one)."""

    def __init__(self, *, gob: Session | None, h2: Session | None,
                 feed: Session | None = None, warm: Session | None = None) -> None:
        if gob is None and h2 is None:
            raise ValueError("at least one protocol must be enabled")
        self.gob = gob
        self.h2 = h2
        #: The cache feed for relay tiers (None: not served, the peer is closed, named).
        self.feed = feed
        self.warm = warm


async def sniff(stream: trio.abc.Stream, protocols: Protocols
                ) -> tuple[Wire | None, Session | None, bytes]:
    """Read just enough to tell the protocol; returns it (None: closed before a byte), the
    session that serves it (None for TLS-on-plaintext and HTTP/1.x), and the bytes read."""
    if isinstance(stream, TLSStream) and stream.selected_alpn_protocol() == "h2":
        return Wire.H2, protocols.h2, b""
    buf = b""
    wire = None
    while wire is None:
        data = await stream.receive_some(SNIFF_BYTES - len(buf))
        if not data:
            return None, None, buf
        buf += data
        wire = classify(buf)
    session = {Wire.GOB: protocols.gob, Wire.H2: protocols.h2,
               Wire.FEED: protocols.feed, Wire.WARM: protocols.warm}.get(wire)
    if session is None and wire in (Wire.GOB, Wire.H2):
        # The protocol is disabled: let the other one say it does not understand.
        session = protocols.gob or protocols.h2
    return wire, session, buf


async def _answer_http1(stream: trio.abc.Stream, prefix: bytes) -> None:
    """Read the request head (bounded), answer 400 and close: a closed socket with unread
    bytes would be reset, and the peer might never see the answer."""
    head = prefix
    with trio.move_on_after(HTTP1_READ_SECS):
        while b"\r\n\r\n" not in head and len(head) < HTTP1_MAX_HEAD:
            data = await stream.receive_some(HTTP1_MAX_HEAD - len(head))
            if not data:
                break
            head += data
    await stream.send_all(http1_response())
    if isinstance(stream, trio.SocketStream):
        await stream.send_eof()


async def _answer_and_drain(sock: trio.SocketStream, answer: bytes = b"") -> None:
    """Send ``answer`` and our end of the stream, then read what the peer sent, bounded,
    so that closing does not reset the connection and the peer sees the answer and a
    clean end (the client says what they mean)."""
    if answer:
        await sock.send_all(answer)
    await sock.send_eof()
    read = 0
    with trio.move_on_after(HTTP1_READ_SECS):
        while read < HTTP1_MAX_HEAD and (data := await sock.receive_some(HTTP1_MAX_HEAD)):
            read += len(data)


_PLAINTEXT = {Wire.H2: "an HTTP/2 (plaintext gRPC) client",
              Wire.FEED: "a relay's feed without TLS",
              Wire.HTTP1: "an HTTP/1.x client",
              Wire.GOB: "a Typha-protocol client without TLS"}


class ConnectionHandler:
    """Per accepted socket: TLS, identity check and sniffing within the handshake timeout,
    then the protocol's session (a :data:`~.connections.Handler` for the registry).

    Every failed TLS handshake is classified (:mod:`trio_typha.tls.diagnosis`) and reported through
    ``failures``: a client speaking plaintext to the TLS port is told from its first bytes
    (peeked, so nothing is consumed) before the handshake, TLS to the plaintext port by
    :func:`sniff`.

    A sibling's warm start (served when ``protocols.warm`` is set) must show the identity
    ``peer_cn`` / ``peer_uri_san`` names (WarmStartPeerCN / WarmStartPeerURISAN): a
    certificate that passes only the clients' rule is refused for it, and one that passes
    only the peers' rule may start nothing else.  So with warm starts served the clients'
    rule is applied once the protocol is known, not right after the handshake.
    """

    def __init__(self, ctx: ServerContext, protocols: Protocols, *,
                 tls: ServerTLS | ssl.SSLContext | None = None, client_cn: str = "",
                 client_uri_san: str = "", failures: FailureLog | None = None,
                 peer_cn: str = "", peer_uri_san: str = "") -> None:
        self.ctx = ctx
        self.protocols = protocols
        self.tls = tls
        self.client_cn = client_cn
        self.client_uri_san = client_uri_san
        self.peer_cn = peer_cn
        self.peer_uri_san = peer_uri_san
        self.failures = failures or FailureLog()

    async def __call__(self, sock: trio.SocketStream, conn: Connection) -> None:
        peer = conn.peer
        log.debug("Accepted from %s", peer)
        stream: trio.abc.Stream = sock
        try:
            session: Session | None = None
            prefix = b""
            with trio.move_on_after(self.ctx.settings.handshake_timeout) as scope:
                if self.tls is not None:
                    wire = classify(await _peek(sock))
                    if wire is not None and wire is not Wire.TLS:
                        self.failures.record(peer, PLAINTEXT_TO_TLS_PORT,
                                             f"{_PLAINTEXT[wire]} on the TLS port")
                        # A TLS alert: the client can tell the port wants TLS.
                        await _answer_and_drain(sock, TLS_ALERT_TO_PLAINTEXT)
                        return
                    tls = await self._handshake(sock, conn)
                    if tls is None:
                        return
                    stream = tls
                wire, session, prefix = await sniff(stream, self.protocols)
                if isinstance(stream, TLSStream) and not self._identity_fits(stream, wire, conn):
                    return
            if scope.cancelled_caught:
                log.info("Handshake timeout from %s; closing", peer)
                return
            if wire is None:
                log.debug("Connection from %s closed before sending anything", peer)
                return
            if session is None and wire is Wire.TLS:
                self.failures.record(peer, TLS_TO_PLAINTEXT_PORT, rejection_reason(
                    wire, tls_configured=self.tls is not None))
                if isinstance(stream, trio.SocketStream):
                    # No answer: the client's handshake sees the port end without one.
                    await _answer_and_drain(stream)
                return
            if session is None:
                self._log_rejection(peer, wire)
                if wire is Wire.HTTP1:
                    await _answer_http1(stream, prefix)
                return
            await session(stream, self.ctx, prefix=prefix, conn=conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError) as exc:
            log.info("Connection from %s failed: %s", peer, exc or type(exc).__name__)
        finally:
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await trio.aclose_forcefully(stream)

    def _log_rejection(self, peer: str, wire: Wire) -> None:
        host = peer.rsplit(":", 1)[0]
        held = self.ctx.peer_log.allow((host, wire.value), trio.current_time())
        if held is not None:
            log.info("Closing connection from %s: %s%s", peer,
                     rejection_reason(wire, tls_configured=self.tls is not None),
                     held_back(held))

    async def _handshake(self, sock: trio.SocketStream, conn: Connection
                         ) -> TLSStream | None:
        """TLS handshake and identity check; None (reported) if either fails."""
        assert self.tls is not None
        context = self.tls.current() if isinstance(self.tls, ServerTLS) else self.tls
        # Our own TLS stream, so the broadcast round can write to it (tls/stream.py).
        tls = TLSStream(sock, context)
        with capturing() as certificates:
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                cause = exc.__cause__
                if isinstance(cause, ssl.SSLError):
                    self.failures.record(conn.peer,
                                         *classify_tls_failure(cause, certificates))
                else:
                    log.info("Connection from %s closed during the TLS handshake: %s",
                             conn.peer, cause or exc)
                return None
        if isinstance(self.tls, ServerTLS):
            # Same certificate, no per-record capture callback from here on.
            tls.context = self.tls.serving
        cert = tls.getpeercert()
        conn.tls_identity = peer_identity(cert)
        reason = check_peer_identity(cert, self.client_cn, self.client_uri_san)
        if reason and self.protocols.warm is None:
            self.failures.record(conn.peer, IDENTITY_MISMATCH, reason)
            return None
        return tls

    def _identity_fits(self, tls: TLSStream, wire: Wire | None, conn: Connection) -> bool:
        """Whether the certificate may speak ``wire`` (the sniffed protocol): the peers'
        identity rule for a warm start, the clients' for the rest (reported if not)."""
        cert = tls.getpeercert()
        if wire is Wire.WARM:
            reason = check_peer_identity(cert, self.peer_cn, self.peer_uri_san)
            if reason:
                reason = f"warm-start peer refused: {reason}"
        else:
            reason = check_peer_identity(cert, self.client_cn, self.client_uri_san)
        if reason:
            self.failures.record(conn.peer, IDENTITY_MISMATCH, reason)
            return False
        return True


async def _peek(sock: trio.SocketStream) -> bytes:
    """The first bytes the peer sent, left in the socket."""
    try:
        data: bytes = await sock.socket.recv(SNIFF_BYTES, socket.MSG_PEEK)
    except OSError:
        return b""
    return data
