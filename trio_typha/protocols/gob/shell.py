"""Trio shell for one Typha gob connection: a reader, one writer, a watchdog.

The reader feeds the client's bytes to the :class:`~.session.ServerSession` and hands the
resulting actions to the writer.  After the handshake the writer follows the syncer's
:class:`~trio_typha.cache.CacheFeed` from the snapshot's breadcrumb, writing the bytes
encoded once per breadcrumb (shared by every client); a client that is behind gets several
breadcrumbs in one write.  Once it is caught up, a plain-TCP or TLS connection takes a seat
at the syncer's broadcast (:mod:`trio_typha.cache.fanout`): the broadcast round then writes new
breadcrumbs to its socket without waking this connection, until a send falls short, the
next ping is due, TLS ciphertext is owed or the connection ends, and the socket is back
with the writer.  At any
moment exactly one of the two owns the socket (``_GobSeat.owner``).  The watchdog enforces
the session's deadlines (handshake, ACK, pong).

Any end the peer causes (EOF, reset, garbage, timeouts) closes this connection with one log
line and :func:`serve_gob_connection` returns normally.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Sequence

import trio

from ... import BUILD_VERSION
from ...cache.build import build_once
from ...cache.core import Breadcrumb
from ...cache.fanout import Owner, Seat
from ...cache.feed import CacheFeed
from ...observe.metrics import SyncerMetrics
from ...sessions.connections import Connection
from ...sessions.context import ServerContext
from ...sessions.nowait import NowaitSender, nowait_sender
from ...sessions.session_metrics import SessionReport
from ...sessions.snapshot_gate import Turn
from ..hello import log_hello
from . import encode_once
from .gotime import GoTime
from .session import (
    Action,
    AwaitTurn,
    Close,
    GraceUsed,
    Send,
    SendSnapshot,
    ServerSession,
    StartStreaming,
    collect_batch,
)

log = logging.getLogger(__name__)

PROTOCOL = "typha-gob"
_RECEIVE_SIZE = 65536
# A long write (the snapshot) goes out in pieces, each with the full write timeout: like
# Typha pushing its write deadline out while the client makes progress.
_WRITE_PIECE = 256 * 1024


class _Drop(Exception):
    """Internal: end this connection for ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def serve_gob_connection(stream: trio.abc.Stream, ctx: ServerContext, *,
                               prefix: bytes = b"", peer: str = "",
                               conn: Connection | None = None) -> None:
    """Serve one client speaking Typha's gob protocol until it goes away or is dropped.

    ``prefix`` holds bytes the listener already read from ``stream`` (while telling gob from
    HTTP/2); they are the start of the client's gob stream.  ``conn`` is the registry's
    record of the accepted socket; without one (a stream the registry did not accept) the
    connection is registered here, as ``peer``.  Its session is in ``ctx.registry`` while
    it runs.  Returns when the connection is over (the stream is closed by then), whatever
    the reason.
    """
    with contextlib.ExitStack() as stack:
        if conn is None:
            conn = stack.enter_context(ctx.registry.track(peer))
        gob = _GobConnection(stream, ctx, conn)
        try:
            await gob.run(prefix)
        except Exception:
            # Not the peer's doing, but one connection must never take the server down.
            log.exception("Internal error serving Typha client %s (conn %#x)", conn.peer,
                          conn.id)


class _GobSeat(Seat):
    """A connection's seat at its syncer's broadcast, writing through ``sender``."""

    def __init__(self, conn: _GobConnection, sender: NowaitSender) -> None:
        super().__init__()
        self._conn = conn
        self._sender = sender
        self.handed_back = trio.Event()

    def key(self) -> object:
        return self._conn.session.fanout_key()

    def render(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        return self._conn.session.render(crumbs)

    def commit(self, crumbs: Sequence[Breadcrumb], data: bytes) -> None:
        self._conn.session.committed(crumbs)
        self._conn.info.sent(len(data))
        self._conn.info.reached(crumbs[-1].seq, crumbs[-1].timestamp)

    def send_nowait(self, data: bytes | memoryview) -> int:
        return self._sender.send_nowait(data)

    def owes(self) -> bool:
        return self._sender.owes

    def wake(self) -> None:
        self.handed_back.set()


class _GobConnection:
    def __init__(self, stream: trio.abc.Stream, ctx: ServerContext, conn: Connection) -> None:
        self.stream = stream
        self.ctx = ctx
        self.conn = conn
        self.peer = conn.peer
        self.settings = ctx.settings.normalized()
        self.conn_id = conn.id
        self.session = ServerSession(
            settings=self.settings, syncer_types=list(ctx.feeds),
            server_version=ctx.version or BUILD_VERSION, conn_id=self.conn_id,
            now=trio.current_time(), rng=random.Random())
        self.close_reason: str | None = None
        self._report: SessionReport | None = None  # once the syncer type is known
        self._actions_tx, self._actions_rx = trio.open_memory_channel[Action](8)
        self._cancel = trio.CancelScope()
        self._timer = trio.CancelScope()
        #: The session's turn at sending its snapshot, from when it asks until it is sent.
        self._turn: Turn | None = None

    async def run(self, prefix: bytes) -> None:
        registered = self.ctx.registry.session(self.conn, PROTOCOL, session_id=self.conn_id,
                                               cancel_scope=self._cancel)
        self.conn.graceful_close = self._close
        try:
            with registered as self.info, self._cancel:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self._watchdog)
                    nursery.start_soon(self._writer)
                    nursery.start_soon(self._reader, prefix)
        finally:
            if self._report is not None:
                self._report.close()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)
        if self.close_reason is None:
            log.info("Closed Typha client %s (conn %#x) on the server's request",
                     self.peer, self.conn_id)

    def _close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
            hostname = self.session.hello.hostname if self.session.hello else "?"
            log.info("Closing Typha client %s (conn %#x, host %s, syncer %s): %s", self.peer,
                     self.conn_id, hostname, self.session.syncer_type or "?", reason)
        self._cancel.cancel()

    def _rearm(self) -> None:
        """Point the watchdog at the session's current deadline."""
        self._timer.deadline = self.session.deadline

    # ---- tasks

    async def _watchdog(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                        ) -> None:
        task_status.started()
        while True:
            with trio.CancelScope(deadline=self.session.deadline) as self._timer:
                await trio.sleep_forever()
            for action in self.session.check_timers(trio.current_time()):
                if isinstance(action, Close):
                    self._close(action.reason)
                    return

    async def _reader(self, prefix: bytes) -> None:
        try:
            if prefix:
                await self._handle(self.session.receive_data(prefix, trio.current_time()))
            while True:
                data = await self.stream.receive_some(_RECEIVE_SIZE)
                if not data:
                    raise _Drop("client closed the connection")
                await self._handle(self.session.receive_data(data, trio.current_time()))
        except _Drop as drop:
            self._close(drop.reason)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close(f"read failed: {exc or type(exc).__name__}")

    async def _handle(self, actions: list[Action]) -> None:
        self._rearm()
        rtt = self.session.liveness.take_rtt()
        if self._report is not None:
            self._report.measured_rtt(rtt)
        hello = self.session.hello
        if hello is not None and not self.info.syncer_type:
            log_hello(log, "typha", self.peer, self.conn_id, hostname=hello.hostname,
                      syncer_type=hello.syncer_type, version=hello.version, info=hello.info,
                      compression="snappy" if self.session.compressed else "",
                      throttle=self.ctx.hello_log, now=trio.current_time())
            self.info.hostname = hello.hostname
            self.info.syncer_type = self.session.syncer_type
            self.info.client_version = hello.version
            self.info.feed = self.ctx.feed(self.session.syncer_type)
        for action in actions:
            if isinstance(action, Close):
                raise _Drop(action.reason)
            await self._actions_tx.send(action)

    async def _writer(self) -> None:
        try:
            crumb = await self._handshake()
            await self._stream_deltas(crumb)
        except _Drop as drop:
            self._close(drop.reason)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._close(f"write failed: {exc or type(exc).__name__}")
        finally:
            self._end_turn()

    def _end_turn(self) -> None:
        if self._turn is not None:
            self._turn.release()
            self._turn = None

    # ---- writer phases

    async def _handshake(self) -> Breadcrumb:
        """Carry out the session's handshake actions; returns the snapshot's breadcrumb."""
        crumb: Breadcrumb | None = None
        pending: list[Action] = []
        while True:
            action = pending.pop(0) if pending else await self._actions_rx.receive()
            if isinstance(action, Send):
                await self._write(action.data)
            elif isinstance(action, AwaitTurn):
                pending.extend(await self._await_turn())
            elif isinstance(action, SendSnapshot):
                self._report = SessionReport(self.info, self._metrics())
                self._report.snapshot_started(trio.current_time())
                crumb = self._feed().snapshot_point()
                self.info.compression = "snappy" if action.compressed else ""
                await self._write(await self._snapshot_bytes(crumb, action.compressed))
                self._end_turn()
                self.info.reached(crumb.seq, crumb.timestamp)
                pending.extend(self.session.snapshot_sent(trio.current_time()))
                self._rearm()
            elif isinstance(action, StartStreaming):
                assert crumb is not None and self._report is not None
                self._report.streaming(trio.current_time())
                return crumb

    async def _await_turn(self) -> list[Action]:
        """Wait for this session's turn at sending a snapshot, pinging while it waits (the
        client's read timeout counts from its last message); the session's next actions."""
        self._turn = turn = self.ctx.snapshots.turn()
        while not await turn.wait_until(self.session.next_ping_at):
            now = trio.current_time()
            if self.session.ping_due(now):
                await self._write(self.session.ping(now, _wall_clock()))
        actions = self.session.turn_started(trio.current_time())
        self._rearm()  # the ACK's deadline now, not the pong's
        return actions

    async def _stream_deltas(self, crumb: Breadcrumb) -> None:
        session, feed, settings = self.session, self._feed(), self.settings
        first = session.status(crumb.status)
        if first:
            await self._write(first)
        seat = self._seat()
        try:
            while True:
                if crumb.next is None:
                    crumb = await self._idle(feed, seat, crumb)
                now = trio.current_time()
                out: list[bytes] = []
                nxt = crumb.next
                if nxt is not None:
                    newest = feed.latest.timestamp
                    batch = collect_batch(nxt, newest,
                                          min_batching_age=settings.min_batching_age,
                                          max_updates=settings.max_message_size)
                    self._check_lag(feed.client_age(batch[0], now), now)
                    out.append(session.updates(batch))
                    crumb = batch[-1]
                    metrics = self._metrics()
                    metrics.client_latency.observe(max(newest - crumb.timestamp, 0.0))
                    metrics.kvs_per_msg.observe(sum(len(c.updates) for c in batch))
                if session.ping_due(now):
                    out.append(session.ping(now, _wall_clock()))
                data = b"".join(out)
                if data:
                    await self._write(data, len(out))
                self.info.reached(crumb.seq, crumb.timestamp)
        finally:
            if seat is not None:
                feed.broadcast.leave(seat)

    async def _idle(self, feed: CacheFeed, seat: _GobSeat | None,
                    crumb: Breadcrumb) -> Breadcrumb:
        """Wait until there is more to write or a ping is due; return the position then.

        A caught-up seat hands the socket to the broadcast meanwhile, and takes it back
        (with what the broadcast wrote, and what it could not) before returning.
        """
        if seat is not None and feed.broadcasting and feed.broadcast.join(seat, crumb):
            seat.handed_back = trio.Event()
            with trio.move_on_at(self.session.next_ping_at):
                await seat.handed_back.wait()
            feed.broadcast.reclaim(seat)
            assert seat.owner is Owner.WRITER and seat.crumb is not None
            if seat.error is not None:
                raise _Drop(f"write failed: {seat.error}")
            if seat.pending or seat.owes():
                # What the round could not send (TLS: ciphertext the stream carries, which
                # its next send_all sends first): finished here, under the write timeout.
                pending, seat.pending = seat.pending, b""
                await self._write(pending, counted=True)
            return seat.crumb
        with trio.move_on_at(self.session.next_ping_at):
            await feed.wait_next(crumb)
        return crumb

    def _check_lag(self, age: float, now: float) -> None:
        for action in self.session.check_lag(age, now):
            if isinstance(action, Close):
                raise _Drop(action.reason)
            if isinstance(action, GraceUsed):
                self._metrics().grace_used.inc()
                log.warning("Typha client %s (conn %#x) is %.1fs behind; tolerated "
                            "during its grace period", self.peer, self.conn_id, action.age)

    def _seat(self) -> _GobSeat | None:
        """A broadcast seat if the stream can take non-blocking sends (plain TCP, TLS)."""
        sender = nowait_sender(self.stream)
        return None if sender is None else _GobSeat(self, sender)

    # ---- helpers

    def _metrics(self) -> SyncerMetrics:
        return self.ctx.syncer_metrics(self.session.syncer_type)

    def _feed(self) -> CacheFeed:
        feed = self.ctx.feed(self.session.syncer_type)
        if feed is None:  # the session only accepts syncer types the server has
            raise _Drop(f"no cache for syncer type {self.session.syncer_type!r}")
        return feed

    async def _snapshot_bytes(self, crumb: Breadcrumb, compressed: bool) -> bytes:
        snapshot = crumb.snapshot()
        if compressed:
            metrics = self._metrics()
            data = await build_once(crumb, ("gob", "snappy"), len(snapshot),
                                       lambda: encode_once.build_compressed_snapshot(snapshot),
                                       on_built=metrics.snapshots_generated.inc,
                                       on_reused=metrics.snapshots_reused.inc)
            metrics.snapshot_compressed_bytes.set(len(data))
            return data
        per_message = self.settings.max_message_size
        return await build_once(
            crumb, ("gob", "plain", per_message), len(snapshot),
            lambda: encode_once.build_streamed_snapshot(snapshot, per_message))

    async def _write(self, data: bytes | memoryview, messages: int = 1, *,
                     counted: bool = False) -> None:
        """Write with the write timeout; ``counted``: already in the session's counts."""
        timeout = self.settings.write_timeout
        view = memoryview(data)
        # At least one send_all: with no data it sends what the stream owes (TLS carry).
        for start in range(0, max(len(data), 1), _WRITE_PIECE):
            with trio.move_on_after(timeout) as scope:
                await self.stream.send_all(view[start:start + _WRITE_PIECE])
            if scope.cancelled_caught:
                raise _Drop(f"write timed out after {timeout}s")
            if not counted:
                self.info.bytes_sent += min(_WRITE_PIECE, len(data) - start)
        if not counted:
            self.info.messages_sent += messages


def _wall_clock() -> GoTime:
    """Now on the wall clock, in the local zone as Typha's time.Now() is."""
    return GoTime.from_unix_ns(time.time_ns(), time.localtime().tm_gmtoff)
