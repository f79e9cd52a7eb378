"""A gRPC ``typha.v1.Sync`` client on h2 and trio (no grpcio), used by the CLI and the fleet.

The protocol work is the pure :class:`~trio_typha.protocols.grpc.client_session.ClientSession`;
this shell owns the socket.  One task reads, feeds the session, sends what it queued (flow
control credit, ping acks) and yields the decoded events to the caller.  A caller that stops
iterating stops reading, so flow control pushes back on the server instead of buffering here.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import trio

from ..grpcwire.status import GrpcError, StatusCode
from ..protocols.grpc.client_session import (
    ClientSession,
    Finished,
    Header,
    Resume,
    StatusChanged,
    SyncEvent,
    Updates,
    kv_from_pb,
)
from ..tls.client import ClientTLSStream, tls_handshake
from ..tls.diagnosis import answered_in_tls
from .view import SyncView

__all__ = ["CountingStream", "Finished", "GrpcError", "Header", "Resume", "StatusChanged", "StatusCode",
           "SyncEvent", "Updates", "apply_event", "kv_from_pb", "open_stream", "resume_of",
           "sync"]


async def open_stream(host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                      server_hostname: str | None = None, server_cn: str = "",
                      server_uri_san: str = "") -> trio.abc.Stream:
    """TCP (and TLS, checking the server's CN / URI SAN; see :mod:`.tls`) to a server."""
    sock = await trio.open_tcp_stream(host, port)
    if ssl_context is None:
        return sock
    # gRPC over TLS negotiates HTTP/2 by ALPN (the server also tells it by the preface).
    ssl_context.set_alpn_protocols(["h2"])
    try:
        return await tls_handshake(sock, ssl_context, server_hostname=server_hostname or host,
                                   server_cn=server_cn, server_uri_san=server_uri_san)
    except BaseException:
        await trio.aclose_forcefully(sock)
        raise


class CountingStream(trio.abc.Stream):
    """A stream that counts the bytes it receives (what a reconnect cost the client)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.received = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.received += len(data)
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def sync(stream: trio.abc.Stream, syncer_type: str, *, hostname: str = "",
               info: str = "trio-typha client", version: str = "",
               authority: str = "localhost", resume: Resume | None = None
               ) -> AsyncIterator[SyncEvent]:
    """Run one Sync stream over ``stream``; yields events until the server ends it.

    Raises :class:`~trio_typha.grpcwire.status.GrpcError` if the stream ends with a
    non-OK status (or the connection ends without trailers), and
    :class:`~trio_typha.tls.diagnosis.TLSFailure` if the server refused our certificate or
    answered our plaintext in TLS.
    """
    session = ClientSession(syncer_type, hostname=hostname, info=info, version=version,
                            authority=authority, resume=resume)
    await stream.send_all(session.data_to_send())
    heard = isinstance(stream, ClientTLSStream)  # only a plaintext answer is checked
    while True:
        data = await stream.receive_some(1 << 16)
        if not data:
            raise session.connection_closed()
        if not heard:
            heard = True
            if (failure := answered_in_tls(data)) is not None:
                raise failure
        events = session.receive_data(data)
        pending = session.data_to_send()
        if pending:
            await stream.send_all(pending)
        for event in events:
            yield event
        if session.ended:
            if session.error is not None:
                raise session.error
            return


def resume_of(view: SyncView) -> Resume | None:
    """What ``view`` lets the next stream resume from (None: it has nothing to offer)."""
    if not view.snapshot_done:
        return None
    return Resume(view.epoch, view.seq, view.tree)


def apply_event(view: SyncView, event: SyncEvent) -> None:
    """Fold one event into ``view``."""
    if isinstance(event, Header):
        view.status = event.status
        if event.resume == "snapshot":
            view.restart()
        # The position counts only once the start is complete (finished): until then the
        # copy is not yet at a breadcrumb of this server.
        view.server_epoch = event.epoch
        if event.resume != "position":
            view.epoch = 0
    elif isinstance(event, Updates):
        view.apply(event.updates)
        if event.seq:
            view.seq = event.seq
    elif isinstance(event, Finished):
        view.status = event.status
        view.snapshot_done = True
        view.snapshot_size = event.snapshot_size
        view.epoch, view.seq = view.server_epoch, event.seq
    elif isinstance(event, StatusChanged):
        view.status = event.status
