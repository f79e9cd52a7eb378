"""The ``typha.v1.Sync/Sync`` handler: one client session on one HTTP/2 stream (trio shell).

Protocol decisions live in :class:`~.session.SyncSession`; this module only waits: for the
start message, for room in the stream, for the next breadcrumb (update sender), for the
next ping time (pinger) and for the pong deadline (pong watcher).  Whatever ends the
session is raised as :class:`GrpcError` and turned into trailers by the connection.

A caught-up session takes a seat at its syncer's broadcast (:mod:`trio_typha.cache.fanout`):
the round then queues each new breadcrumb's shared message bytes on the stream and writes
them out, and the update sender sleeps until the round hands the stream back (the socket was busy or the stream backed up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

import trio

from ... import BUILD_VERSION
from ...cache.build import build_once
from ...cache.core import Breadcrumb
from ...cache.fanout import Seat
from ...cache.feed import CacheFeed
from ...grpcwire.status import GrpcError, StatusCode
from ...observe.metrics import SyncerMetrics
from ...sessions.connections import Connection, Session, State
from ...sessions.context import ServerContext
from ...sessions.session_metrics import SessionReport
from ..hello import log_hello
from . import encode_once
from .session import SyncSession

log = logging.getLogger(__name__)


class MessageStream(Protocol):
    """One accepted gRPC stream, as the connection hands it to a handler."""

    #: Cancelling it ends the session with UNAVAILABLE (registered in ctx.registry).
    cancel_scope: trio.CancelScope

    async def receive(self) -> bytes | None:
        """The next request message, or None once the client has half-closed."""
        ...

    async def send(self, message: bytes) -> None:
        """Queue one framed response message, waiting while the stream is backed up."""
        ...

    def send_nowait(self, message: bytes) -> bool:
        """Queue one framed response message and write it at once if the socket is free;
        False, sending nothing, if it is not (the broadcast round's send)."""
        ...


class _GrpcSeat(Seat):
    """A Sync session's seat at the broadcast: all-or-nothing sends of whole messages."""

    def __init__(self, stream: MessageStream, session: SyncSession, info: Session) -> None:
        super().__init__()
        self._send = stream.send_nowait
        self._session = session
        self._info = info
        self.handed_back = trio.Event()

    def key(self) -> object:
        return self._session.last_status_sent

    def render(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        return self._session.render(crumbs)

    def commit(self, crumbs: Sequence[Breadcrumb], data: bytes) -> None:
        self._session.committed(crumbs)
        self._info.sent(len(data))
        self._info.reached(crumbs[-1].seq, crumbs[-1].timestamp)

    def send_nowait(self, data: bytes | memoryview) -> int:
        if not self._send(bytes(data)):
            raise BlockingIOError
        return len(data)

    def wake(self) -> None:
        self.handed_back.set()


async def serve_sync(stream: MessageStream, ctx: ServerContext, conn: Connection) -> None:
    """Run one Sync session of ``conn`` until the client goes away or a :class:`GrpcError`
    ends it; the session is in ``ctx.registry`` while it runs."""
    settings = ctx.settings.normalized()
    session = SyncSession(settings)
    with trio.move_on_after(settings.handshake_timeout):
        payload = await stream.receive()
        if payload is None:
            raise GrpcError(StatusCode.INVALID_ARGUMENT,
                            "request stream ended before the start message")
        session.on_request(payload, trio.current_time())
    # Read the start back from the session: the deadline may have cancelled the receive.
    start = session.start
    if start is None:
        raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                        f"no start message within {settings.handshake_timeout:g}s")
    feed = ctx.feed(start.syncer_type)
    if feed is None:
        raise GrpcError(StatusCode.INVALID_ARGUMENT,
                        f"syncer_type {start.syncer_type!r} is not served here")

    metrics = ctx.syncer_metrics(feed.syncer_type)
    with ctx.registry.session(conn, "grpc", syncer_type=start.syncer_type,
                              hostname=start.hostname, client_version=start.version,
                              cancel_scope=stream.cancel_scope, feed=feed,
                              state=State.SNAPSHOT) as info:
        await _exchange_digests(stream, session, feed, info)
        info.resume = session.method
        # The Sync stream's messages are not compressed (grpc-encoding identity).
        log_hello(log, "grpc", conn.peer, info.id, hostname=start.hostname,
                  syncer_type=start.syncer_type, version=start.version, info=start.info,
                  compression="", throttle=ctx.hello_log, now=trio.current_time(),
                  resume=_start_note(session))
        with SessionReport(info, metrics) as report:
            async with trio.open_nursery() as nursery:
                # Read from the start: a second start (or anything else out of turn) ends
                # the stream when it arrives, not once the snapshot is out.
                nursery.start_soon(_read_acks, stream, session, report)
                report.snapshot_started(trio.current_time())
                if session.resume_from is None:
                    with ctx.snapshots.turn() as turn:
                        # The header (the client's first message) at once; the snapshot
                        # when this session's turn comes, taken then.
                        await _send_message(stream, info, _header(ctx, session, feed, info,
                                                                  feed.latest))
                        await turn.wait()
                        crumb = await _send_snapshot(stream, session, feed, info)
                else:
                    crumb = await _send_resume(stream, ctx, session, feed, info)
                metrics.resume_total[session.method].inc()
                metrics.resume_bytes[session.method].inc(info.bytes_sent)
                report.streaming(trio.current_time())
                nursery.start_soon(_watch_pongs, session)
                nursery.start_soon(_send_pings, stream, session, info)
                await _send_updates(stream, session, feed, crumb, info, metrics)


def _start_note(session: SyncSession) -> str:
    if session.resume_note:
        return f"{session.method} ({session.resume_note})"
    return session.method


async def _exchange_digests(stream: MessageStream, session: SyncSession, feed: CacheFeed,
                            info: Session) -> None:
    """Decide how the stream starts, comparing hash trees with the client if it sent one
    (each answer due within the handshake timeout)."""
    query = session.resume(feed.cache)
    while query is not None:
        await stream.send(query)
        info.sent(len(query))
        payload: bytes | None = b""
        with trio.move_on_after(session.settings.handshake_timeout):
            payload = await stream.receive()
        if payload == b"":
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                            f"no digest answer within {session.settings.handshake_timeout:g}s")
        if payload is None:
            raise GrpcError(StatusCode.INVALID_ARGUMENT,
                            "request stream ended during the digest exchange")
        query = session.on_digest(payload)


def _header(ctx: ServerContext, session: SyncSession, feed: CacheFeed, info: Session,
            crumb: Breadcrumb) -> bytes:
    return encode_once.header_message(
        conn_id=info.id, server_version=ctx.version or BUILD_VERSION,
        syncer_type=feed.syncer_type, status=crumb.status, epoch=feed.cache.epoch,
        resume=session.method)


async def _send_message(stream: MessageStream, info: Session, message: bytes) -> None:
    await stream.send(message)
    info.sent(len(message))


async def _send_start(stream: MessageStream, session: SyncSession, info: Session,
                      messages: list[bytes], crumb: Breadcrumb) -> None:
    """Send the start (header to finished) that leaves the client at ``crumb``; go live."""
    for message in messages:
        await _send_message(stream, info, message)
    info.reached(crumb.seq, crumb.timestamp)
    session.snapshot_sent(crumb.status, trio.current_time())


async def _send_resume(stream: MessageStream, ctx: ServerContext, session: SyncSession,
                       feed: CacheFeed, info: Session) -> Breadcrumb:
    """Start a stream whose client kept its copy: the keys a digest exchange found
    differing (none by position), the updates published after the breadcrumb the copy is
    at (the shared encodings every client gets), then ``finished``."""
    crumb = session.resume_from
    assert crumb is not None
    target = feed.latest
    out = [_header(ctx, session, feed, info, target)]
    repair = session.repair_updates(feed.cache) if session.repair is not None else []
    out += encode_once.repair_messages(target, repair, session.settings.max_message_size)
    session.last_status_sent = crumb.status
    while crumb is not target:
        assert crumb.next is not None
        crumb = crumb.next
        out += session.messages_for(crumb)
    out.append(encode_once.resumed_message(target, len(repair)))
    await _send_start(stream, session, info, out, target)
    log.debug("gRPC session %#x resumed by %s at seq %d (%d KVs repaired)", info.id,
              session.method, target.seq, len(repair))
    return target


async def _send_snapshot(stream: MessageStream, session: SyncSession, feed: CacheFeed,
                         info: Session) -> Breadcrumb:
    """The snapshot (after the header, sent already) and ``finished``."""
    crumb = feed.snapshot_point()
    batch = session.settings.max_message_size
    messages = await build_once(crumb, ("grpc", "snapshot", batch), len(crumb.snapshot()),
                                lambda: encode_once.snapshot_messages(crumb, batch))
    out = [*messages, encode_once.finished_message(crumb)]
    await _send_start(stream, session, info, out, crumb)
    log.debug("gRPC session %#x: snapshot of %d KVs at seq %d sent", info.id,
              len(crumb.snapshot()), crumb.seq)
    return crumb


async def _send_updates(stream: MessageStream, session: SyncSession, feed: CacheFeed,
                        crumb: Breadcrumb, info: Session, metrics: SyncerMetrics) -> None:
    """Follow the breadcrumbs forever: one update message per breadcrumb, then its status."""
    seat = _GrpcSeat(stream, session, info)
    try:
        while True:
            if (crumb.next is None and feed.broadcasting
                    and feed.broadcast.join(seat, crumb)):
                seat.handed_back = trio.Event()
                await seat.handed_back.wait()
                assert seat.crumb is not None
                crumb = seat.crumb
                if seat.pending:  # what the round had for us when the stream was busy
                    pending, seat.pending = bytes(seat.pending), b""
                    await stream.send(pending)
                continue
            crumb = await _send_next(stream, session, feed, crumb, info, metrics)
    finally:
        feed.broadcast.leave(seat)


async def _send_next(stream: MessageStream, session: SyncSession, feed: CacheFeed,
                     crumb: Breadcrumb, info: Session, metrics: SyncerMetrics) -> Breadcrumb:
    """Wait for the breadcrumb after ``crumb`` and send it (the update sender's own path)."""
    nxt = await feed.wait_next(crumb)
    now = trio.current_time()
    metrics.client_latency.observe(max(feed.latest.timestamp - nxt.timestamp, 0.0))
    if nxt.updates:
        metrics.kvs_per_msg.observe(len(nxt.updates))
    if session.check_fall_behind(nxt, feed.latest, now, age=feed.client_age(nxt, now)):
        metrics.grace_used.inc()
        log.info("gRPC session %#x fell more than %gs behind; tolerated during the "
                 "new-client grace period", info.id, session.settings.max_fall_behind)
    for message in session.messages_for(nxt):
        await stream.send(message)
        info.sent(len(message))
    info.reached(nxt.seq, nxt.timestamp)
    return nxt


async def _send_pings(stream: MessageStream, session: SyncSession, info: Session) -> None:
    # Messages are queued whole, so pings and updates interleave only between messages.
    while True:
        await trio.sleep_until(session.next_ping_at)
        message = session.ping(trio.current_time(), time.time_ns())
        await stream.send(message)
        info.sent(len(message))


async def _read_acks(stream: MessageStream, session: SyncSession,
                     report: SessionReport) -> None:
    while (payload := await stream.receive()) is not None:
        session.on_request(payload, trio.current_time())
        report.measured_rtt(session.liveness.take_rtt())
    # Half-closed: no more acks can come, so the pong timeout will end the stream; until
    # then the client keeps getting updates.


async def _watch_pongs(session: SyncSession) -> None:
    while True:
        await trio.sleep_until(session.pong_deadline)
        session.check_pong(trio.current_time())
