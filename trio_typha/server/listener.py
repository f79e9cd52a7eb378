"""Port 5473: accept, optionally terminate TLS, tell gRPC from Typha's gob protocol, hand off.

Both protocols share the port.  Under TLS, ALPN ``h2`` means gRPC.  Otherwise the first bytes
decide: an HTTP/2 connection starts with the client preface ``PRI * HTTP/2.0``, and a gob
stream can never start with ``PRI`` (after a length byte, gob's first message is a type
definition, whose negative id is an odd byte, and ``R`` is even).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

import trio

from .connections import Connection
from .context import ServerContext
from .tls import check_peer_identity, peer_identity

log = logging.getLogger(__name__)

H2_PREFACE_START = b"PRI"

Session = Callable[..., Awaitable[None]]  # (stream, ctx, *, prefix, conn) -> None


class Protocols:
    """Which session handles which protocol (either may be disabled by config)."""

    def __init__(self, *, gob: Session | None, h2: Session | None) -> None:
        if gob is None and h2 is None:
            raise ValueError("at least one protocol must be enabled")
        self.gob = gob
        self.h2 = h2


async def sniff(stream: trio.abc.Stream, protocols: Protocols) -> tuple[Session | None, bytes]:
    """Read just enough to choose the session; returns it and the bytes already read."""
    if protocols.h2 is None:
        return protocols.gob, b""
    if protocols.gob is None:
        return protocols.h2, b""
    if isinstance(stream, trio.SSLStream) and stream.selected_alpn_protocol() == "h2":
        return protocols.h2, b""
    buf = b""
    while len(buf) < len(H2_PREFACE_START):
        data = await stream.receive_some(len(H2_PREFACE_START) - len(buf))
        if not data:
            return None, buf
        buf += data
        if not H2_PREFACE_START.startswith(buf[: len(H2_PREFACE_START)]):
            return protocols.gob, buf
    return (protocols.h2 if buf == H2_PREFACE_START else protocols.gob), buf


class ConnectionHandler:
    """Per accepted socket: TLS, identity check and sniffing within the handshake timeout,
    then the protocol's session (a :data:`~.connections.Handler` for the registry)."""

    def __init__(self, ctx: ServerContext, protocols: Protocols, *,
                 ssl_context: ssl.SSLContext | None = None, client_cn: str = "",
                 client_uri_san: str = "") -> None:
        self.ctx = ctx
        self.protocols = protocols
        self.ssl_context = ssl_context
        self.client_cn = client_cn
        self.client_uri_san = client_uri_san

    async def __call__(self, sock: trio.SocketStream, conn: Connection) -> None:
        peer = conn.peer
        log.debug("Accepted from %s", peer)
        stream: trio.abc.Stream = sock
        try:
            session: Session | None = None
            prefix = b""
            with trio.move_on_after(self.ctx.settings.handshake_timeout) as scope:
                if self.ssl_context is not None:
                    tls = trio.SSLStream(sock, self.ssl_context, server_side=True)
                    await tls.do_handshake()
                    cert = tls.getpeercert()
                    conn.tls_identity = peer_identity(cert)
                    reason = check_peer_identity(cert, self.client_cn, self.client_uri_san)
                    if reason:
                        log.warning("Rejecting TLS client %s: %s", peer, reason)
                        return
                    stream = tls
                session, prefix = await sniff(stream, self.protocols)
            if scope.cancelled_caught:
                log.info("Handshake timeout from %s; closing", peer)
                return
            if session is None:
                log.debug("Connection from %s closed before sending anything", peer)
                return
            await session(stream, self.ctx, prefix=prefix, conn=conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError) as exc:
            log.info("Connection from %s failed: %s", peer, exc or type(exc).__name__)
        finally:
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await trio.aclose_forcefully(stream)
