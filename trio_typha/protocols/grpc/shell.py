"""gRPC over HTTP/2 on a trio stream: the connection's tasks around :class:`H2Core`.

Per connection there is one reader task (socket bytes into the core, events out to the
streams), one writer task (the only one that writes to the socket: it drains the core as
far as the peer's flow-control windows allow), one drain watcher, and one task per gRPC
stream.  Each stream's handler runs inside the stream's own cancel scope, so a client
reset, a deadline or a server-side drop ends that stream alone; whatever ends a stream is
translated into its gRPC status in exactly one place, :meth:`GrpcConnection._serve_stream`.

Shutdown follows hypercorn's trio HTTP/2 server: when ``ctx.draining`` is set we send
GOAWAY, end every stream with UNAVAILABLE after what is already queued, and give the lot
``settings.drain_timeout`` to get out before the connection is closed regardless.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from typing import TypeVar

import trio
import trio.lowlevel
from h2.errors import ErrorCodes

from ...grpcwire.status import GrpcError, StatusCode
from ...observe.throttle import held_back
from ...sessions.connections import Connection
from ...sessions.context import ServerContext
from ...sessions.hangup import peer_hung_up
from ...sessions.nowait import nowait_sender
from . import h2conn as core
from .encode_once import SYNC_PATH
from .metadata import Headers, HttpError, http_error, parse_request
from .sync_service import serve_sync

_E = TypeVar("_E", bound=BaseException)

log = logging.getLogger(__name__)

RECEIVE_SIZE = 64 * 1024
#: Queued bytes per stream above which its handler waits (shared message bytes, so cheap).
STREAM_BUFFER_LIMIT = 128 * 1024
#: Control frames (PING/SETTINGS acks, resets) pending before we stop reading the peer.
PENDING_OUTPUT_LIMIT = 256 * 1024
#: After the connection is decided to end, how long the final frames may take to go out.
FINAL_FLUSH_TIMEOUT = 2.0
#: Frames handled before the reader lets other tasks run: one 64 KiB read can hold
#: thousands of small frames.
FRAMES_PER_TURN = 64


class _Signal:
    """Wakes everyone waiting now; waiters re-check their condition after waking."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class _Stream:
    """One gRPC stream as its handler sees it (implements sync_service.MessageStream)."""

    def __init__(self, conn: GrpcConnection, stream_id: int) -> None:
        self._conn = conn
        self.stream_id = stream_id
        self.cancel_scope = trio.CancelScope()
        # Bounded by flow control: the peer's bytes are given back only when consumed.
        self._inbox_send, self._inbox = trio.open_memory_channel[bytes](math.inf)
        #: Why the connection cancelled this stream: (code, message, discard queued
        #: messages); None when it was reset by the peer or cancelled by others.
        self.end_reason: tuple[StatusCode, str, bool] | None = None
        self.reset_by_peer = False

    async def receive(self) -> bytes | None:
        try:
            payload = await self._inbox.receive()
        except trio.EndOfChannel:
            return None
        self._conn._consumed(self.stream_id)
        return payload

    async def send(self, message: bytes) -> None:
        await self._conn._send(self.stream_id, message)

    def send_nowait(self, message: bytes) -> bool:
        """Queue ``message`` and write it at once if the socket is free; False if it is not
        (the stream is backed up, or the connection's writer holds the socket)."""
        return self._conn._send_nowait(self.stream_id, message)

    # Called by the connection's reader.
    def deliver(self, payload: bytes) -> None:
        self._inbox_send.send_nowait(payload)

    def input_ended(self) -> None:
        self._inbox_send.close()

    def end(self, code: StatusCode, message: str, *, discard_queued: bool = False) -> None:
        if self.end_reason is None:
            self.end_reason = (code, message, discard_queued)
        self.cancel_scope.cancel()


class GrpcConnection:
    """Serves the gRPC streams of one HTTP/2 connection until it ends; see :meth:`run`."""

    def __init__(self, stream: trio.abc.Stream, ctx: ServerContext, *, peer: str = "",
                 conn: Connection | None = None) -> None:
        self._stream = stream
        self.ctx = ctx
        #: The registry's record of this socket (registered in :meth:`run` if not given).
        self.conn = conn
        self.peer = conn.peer if conn is not None else peer
        self._peer_host = self.peer.rsplit(":", 1)[0]
        self.settings = ctx.settings.normalized()
        self.core = core.H2Core(max_concurrent_streams=self.settings.max_concurrent_streams,
                                max_inbound_message=self.settings.max_inbound_message,
                                stream_buffer_limit=STREAM_BUFFER_LIMIT,
                                shared_budget=ctx.budgets.account(self._peer_host))
        self.streams: dict[int, _Stream] = {}
        self.close_reason: str | None = None
        self._nursery: trio.Nursery | None = None
        self._done = trio.Event()
        self._goaway_sent = trio.Event()
        self._writer_done = trio.Event()
        self._poke = _Signal()  # the writer may have something to send
        # The socket's owner is the write loop, except that a broadcast round may write
        # while it is free (see _socket_free); bytes the round could not send are carried
        # (here for plain TCP, in the stream as ciphertext for TLS: ``owes``).
        self._sender = nowait_sender(stream)
        self._writing = False
        self._carry: memoryview | None = None
        self._progress = _Signal()  # bytes left the queues, or a stream went away
        self._streams_changed = _Signal()  # a stream was opened or its handler ended
        self._had_stream = False
        # Our SETTINGS are on the wire: clients (grpcio) open no stream before they have
        # them, so the "no stream opened" clock starts here, not at accept.
        self._preface_written = trio.Event()
        self._shed = trio.Event()  # the server asked this connection to go
        self._shed_reason: str | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes this connection holds for its peer (bounded per stream; see H2Core)."""
        return self.core.buffered_bytes

    async def run(self, prefix: bytes = b"") -> None:
        """Serve until the peer leaves, breaks the protocol, or the server drains.

        Returns normally in every peer-caused case; the reason is logged and kept in
        :attr:`close_reason`.
        """
        with contextlib.ExitStack() as stack:
            if self.conn is None:
                self.conn = stack.enter_context(self.ctx.registry.track(self.peer))
            self.conn.protocol = "grpc"
            self.conn.graceful_close = self.shed
            await self._run(prefix)

    async def _run(self, prefix: bytes) -> None:
        try:
            await self._serve(prefix)
        except Exception:
            # A bug, not the peer: keep it to this connection.
            log.exception("gRPC connection from %s failed", self.peer)
            self.close_reason = self.close_reason or "internal error"
        finally:
            with trio.CancelScope(shield=True), contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError):
                await self._stream.aclose()
        log.info("gRPC connection from %s closed: %s", self.peer, self.close_reason)

    async def _serve(self, prefix: bytes) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._write_loop)
            nursery.start_soon(self._read_loop, prefix)
            nursery.start_soon(self._watch_drain)
            nursery.start_soon(self._close_after_goaway)
            nursery.start_soon(self._watch_idle)
            await self._done.wait()
            # Say goodbye (final GOAWAY, unless the peer already did) and let it out.
            self.core.close(ErrorCodes.NO_ERROR, self.close_reason or "")
            self._poke.fire()
            with trio.move_on_after(min(FINAL_FLUSH_TIMEOUT, self.settings.write_timeout)):
                await self._writer_done.wait()
            nursery.cancel_scope.cancel()

    def _finish(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self._done.set()

    # --- reading ------------------------------------------------------------------------

    async def _read_loop(self, prefix: bytes) -> None:
        try:
            if prefix:
                await self._handle_bytes(prefix)
            with trio.move_on_after(self.settings.handshake_timeout):
                while not self.core.handshake_done and not self._done.is_set():
                    if not await self._receive_once():
                        return
            if not self.core.handshake_done:
                self._finish(f"no HTTP/2 preface within {self.settings.handshake_timeout:g}s")
                return
            while not self._done.is_set():
                while self.core.pending_output > PENDING_OUTPUT_LIMIT:
                    # The peer sends faster than it reads our answers: stop reading.
                    await self._progress.wait()
                if not await self._receive_once():
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._finish(f"read failed: {exc!r}")

    async def _receive_once(self) -> bool:
        data = await self._stream.receive_some(RECEIVE_SIZE)
        if not data:
            self._finish("peer closed the connection")
            return False
        if len(data) >= RECEIVE_SIZE and peer_hung_up(self._stream):
            # More is queued behind a full read, and the peer has gone: nobody will read
            # our answers, so neither are its frames worth parsing.
            self._finish("peer closed the connection (its unread frames dropped)")
            return False
        await self._handle_bytes(data)
        return True

    async def _handle_bytes(self, data: bytes | bytearray) -> None:
        self.core.feed(data)
        while True:
            for event in self.core.process(trio.current_time(), FRAMES_PER_TURN):
                self._dispatch(event)
            if self.core.wants_write:  # answers, or window updates that unblock queued data
                self._poke.fire()
            self._progress.fire()
            if not self.core.inbound_pending or self._done.is_set():
                return
            await trio.lowlevel.checkpoint()

    def _peer_log(self, level: int, kind: str, message: str, *args: object) -> None:
        """Log a line this peer can provoke at will: one per kind per interval per host."""
        held = self.ctx.peer_log.allow((self._peer_host, kind), trio.current_time())
        if held is not None:
            log.log(level, message + "%s", *args, held_back(held))

    def _dispatch(self, event: core.Event) -> None:
        match event:
            case core.RequestReceived(stream_id, headers):
                self._open_stream(stream_id, headers)
            case core.MessageReceived(stream_id, payload):
                if (s := self.streams.get(stream_id)) is not None:
                    s.deliver(payload)
                else:
                    self.core.consumed(stream_id)
            case core.InputEnded(stream_id):
                if (s := self.streams.get(stream_id)) is not None:
                    s.input_ended()
            case core.StreamFailed(stream_id, code, message):
                if (s := self.streams.get(stream_id)) is not None:
                    s.end(code, message, discard_queued=True)
            case core.StreamReset(stream_id, error_code, by_peer):
                if not by_peer:
                    self._peer_log(logging.WARNING, "window-overflow",
                                   "gRPC stream %d from %s reset: the client overflowed the "
                                   "stream's flow-control window (FLOW_CONTROL_ERROR)",
                                   stream_id, self.peer)
                if (s := self.streams.get(stream_id)) is not None:
                    if by_peer:
                        self._peer_log(logging.INFO, "reset",
                                       "gRPC stream %d from %s cancelled by the client "
                                       "(RST_STREAM %d)", stream_id, self.peer, error_code)
                    s.reset_by_peer = True
                    s.cancel_scope.cancel()
            case core.ConnectionEnded(reason, by_peer, flood):
                if flood is not None:
                    self.ctx.metrics.h2_abuse_closed.labels(kind=flood.kind.value).inc()
                    self._peer_log(logging.WARNING, "flood",
                                   "gRPC connection from %s closed with GOAWAY "
                                   "ENHANCE_YOUR_CALM: %s", self.peer, flood)
                elif not by_peer:
                    log.warning("gRPC connection from %s: %s; sent GOAWAY", self.peer, reason)
                self._finish(reason)

    def _open_stream(self, stream_id: int, headers: Headers) -> None:
        """Answer a new request: start the Sync handler, or refuse it right here."""
        self._had_stream = True
        self._streams_changed.fire()
        try:
            head = parse_request(headers)
            if head.path != SYNC_PATH:
                raise GrpcError(StatusCode.UNIMPLEMENTED, f"unknown method {head.path}")
        except HttpError as exc:
            self._peer_log(logging.INFO, "rejected", "gRPC connection from %s: rejected "
                           "request: %s", self.peer, exc.message)
            self.core.reject(stream_id, http_error(exc.status, exc.message))
            return
        except GrpcError as exc:
            self._peer_log(logging.INFO, "refused", "gRPC connection from %s: stream %d "
                           "refused: %s", self.peer, stream_id, exc)
            self.core.end_stream(stream_id, exc.code, exc.message)
            return
        assert self._nursery is not None
        s = _Stream(self, stream_id)
        if head.timeout is not None:
            s.cancel_scope.deadline = trio.current_time() + head.timeout
        self.streams[stream_id] = s
        if self._shed.is_set() or self.ctx.draining.is_set():
            s.end(StatusCode.UNAVAILABLE, self._shed_reason or "server is shutting down")
        self._nursery.start_soon(self._run_stream, s)

    # --- one stream ---------------------------------------------------------------------

    async def _run_stream(self, s: _Stream) -> None:
        """Run the handler, then end the stream the way the handler's ending says."""
        try:
            ending = await self._serve_stream(s)
        finally:
            self.streams.pop(s.stream_id, None)
            self._progress.fire()
            self._streams_changed.fire()
        if ending is None:
            return
        code, message, discard = ending
        if code is not StatusCode.OK:
            self._peer_log(logging.INFO, "ended", "gRPC stream %d from %s ended: %s: %s",
                           s.stream_id, self.peer, code.name, message)
        try:
            self.core.end_stream(s.stream_id, code, message, discard_queued=discard)
        except core.StreamGone:
            return
        self._poke.fire()
        # The trailers wait behind at most the rest of one message; a peer that will not
        # take even that within the write timeout gets the stream reset instead.
        with trio.move_on_after(self.settings.write_timeout):
            while self.core.has_stream(s.stream_id):
                await self._progress.wait()
            return
        self.core.reset(s.stream_id, ErrorCodes.CANCEL)
        self._poke.fire()

    async def _serve_stream(self, s: _Stream) -> tuple[StatusCode, str, bool] | None:
        """The one place where a handler's ending becomes a status: (code, message,
        discard queued messages), or None when the stream is already gone."""
        ending: tuple[StatusCode, str, bool] | None = (StatusCode.OK, "", False)
        try:
            with s.cancel_scope:
                assert self.conn is not None
                await serve_sync(s, self.ctx, self.conn)
            if s.cancel_scope.cancelled_caught:
                if s.reset_by_peer:
                    ending = None
                elif s.end_reason is not None:
                    ending = s.end_reason
                elif trio.current_time() >= s.cancel_scope.deadline:
                    ending = (StatusCode.DEADLINE_EXCEEDED, "deadline exceeded", True)
                else:
                    # Dropped by the server (rebalancing): the client should reconnect,
                    # maybe elsewhere, so this connection takes no new streams either.
                    ending = (StatusCode.UNAVAILABLE, "session dropped by the server", False)
                    self._goaway()
        except* GrpcError as group:
            err = _first(group, GrpcError)
            ending = (err.code, err.message, True)
        except* core.StreamGone:
            ending = None
        except* Exception as group:
            log.error("gRPC stream %d from %s: handler failed", s.stream_id, self.peer,
                      exc_info=_first(group, Exception))
            ending = (StatusCode.INTERNAL, "internal server error", True)
        return ending

    async def _send(self, stream_id: int, message: bytes) -> None:
        if not self.core.writable(stream_id):
            with trio.move_on_after(self.settings.write_timeout):
                while not self.core.writable(stream_id):
                    await self._progress.wait()
            if not self.core.writable(stream_id):
                raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                                f"client took no data for {self.settings.write_timeout:g}s")
        self.core.send_message(stream_id, message)
        self._poke.fire()

    def _send_nowait(self, stream_id: int, message: bytes) -> bool:
        """The broadcast round's write: through the core (h2 frames and flow-control
        accounting for this stream), then one non-blocking send, only while the socket is
        free; what the kernel does not take is the write loop's to finish."""
        if self._sender is None or not self._socket_free or not self.core.writable(stream_id):
            return False
        try:
            self.core.send_message(stream_id, message)
        except core.StreamGone:
            # Reset by the peer (or ended) since the round chose it: its own task finds out
            # on its next send and ends; the round must not die of it.
            return False
        data = self.core.data_to_send()
        if data:
            try:
                sent = self._sender.send_nowait(data)
            except OSError:  # would block, or broken: the write loop finds out which
                sent = 0
            if sent < len(data):
                self._carry = memoryview(data)[sent:]
                self._poke.fire()
            elif self._sender.owes:  # TLS ciphertext the kernel did not take
                self._poke.fire()
        return True

    @property
    def _socket_free(self) -> bool:
        """Nobody is writing to the socket: the write loop is not mid-write and has no
        carried or owed bytes to finish.  Only then may the broadcast round write."""
        return not (self._writing or self._carry is not None
                    or (self._sender is not None and self._sender.owes))

    def _consumed(self, stream_id: int) -> None:
        self.core.consumed(stream_id)
        self._poke.fire()

    # --- writing ------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        """The only task that writes to the socket."""
        # One scope for the whole loop, its deadline armed only while a write is pending:
        # a scope per write costs more than the write on a busy server.
        try:
            with trio.CancelScope() as write_scope:
                while True:
                    data: bytes | memoryview = self.core.data_to_send()
                    if self._carry is not None:  # the round's write, finished here first
                        data, self._carry = bytes(self._carry) + data, None
                    # TLS: send_all sends the stream's owed ciphertext first (b"": only it).
                    if data or (self._sender is not None and self._sender.owes):
                        write_scope.deadline = trio.current_time() + self.settings.write_timeout
                        self._writing = True
                        await self._stream.send_all(data)
                        self._writing = False
                        write_scope.deadline = math.inf
                        self._preface_written.set()
                        self._progress.fire()
                        continue
                    if self.core.state is core.ConnectionState.CLOSED:
                        return  # the final GOAWAY (if any) is out
                    await self._poke.wait()
            self._finish(f"write timed out after {self.settings.write_timeout:g}s "
                         "(peer is not reading)")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._finish(f"write failed: {exc!r}")
        finally:
            self._writer_done.set()

    # --- shutdown -----------------------------------------------------------------------

    def _goaway(self) -> None:
        """Send GOAWAY: no new streams here; the connection closes once its streams end."""
        if not self._goaway_sent.is_set():
            self.core.start_drain()
            self._poke.fire()
            self._goaway_sent.set()

    def shed(self, reason: str) -> None:
        """The server wants this connection gone (rebalancing, drain): GOAWAY, then end
        every stream with UNAVAILABLE after what is queued, so clients reconnect cleanly."""
        if self._shed_reason is None:
            self._shed_reason = reason
            self._shed.set()

    async def _watch_drain(self) -> None:
        async with trio.open_nursery() as nursery:
            async def on_draining() -> None:
                await self.ctx.draining.wait()
                self.shed("server is shutting down")
            nursery.start_soon(on_draining)
            await self._shed.wait()
            nursery.cancel_scope.cancel()
        reason = self._shed_reason or "server is shutting down"
        self._goaway()
        for s in list(self.streams.values()):
            s.end(StatusCode.UNAVAILABLE, reason)
        with trio.move_on_after(self.settings.drain_timeout) as cs:
            await self._streams_gone()
        self._finish(f"server closed the connection: {reason}" if not cs.cancelled_caught
                     else f"server drain timeout ({self.settings.drain_timeout:g}s)")

    def _has_streams(self) -> bool:
        return bool(self.streams or self.core.open_streams)

    async def _watch_idle(self) -> None:
        """Close a connection that holds no stream: none opened within the handshake
        timeout, or none open for ``h2_idle_timeout`` (each idle one costs a socket and
        its buffers, and fds run out long before memory does).  The first deadline counts
        from when our preface was written: under a connection storm that can be long after
        accept, and the client cannot open a stream before it has our SETTINGS."""
        await self._preface_written.wait()
        idle_since = trio.current_time()
        while True:
            if self._has_streams():
                # Handler ends fire _streams_changed; streams the core answered itself
                # (refused requests) end with the bytes written, hence _progress.
                await (self._streams_changed if self.streams else self._progress).wait()
                if not self._has_streams():
                    idle_since = trio.current_time()
                continue
            if self._had_stream:
                limit = self.settings.h2_idle_timeout
                why = f"idle: no open stream for {limit:g}s"
            else:
                limit = self.settings.handshake_timeout
                why = f"no stream opened within {limit:g}s"
            with trio.move_on_at(idle_since + limit) as idle:
                await self._streams_changed.wait()
            if idle.cancelled_caught and not self._has_streams():
                if not self.core.handshake_done:
                    return  # no preface at all: the reader says so at the same deadline
                self._peer_log(logging.INFO, "idle", "gRPC connection from %s: %s; sending "
                               "GOAWAY", self.peer, why)
                self._finish(why)
                return

    async def _close_after_goaway(self) -> None:
        await self._goaway_sent.wait()
        await self._streams_gone()
        self._finish("all streams done after GOAWAY")

    async def _streams_gone(self) -> None:
        while self.streams or self.core.open_streams:
            await self._progress.wait()


def _first(group: BaseExceptionGroup[BaseException], kind: type[_E]) -> _E:
    return next(e for e in _leaves(group) if isinstance(e, kind))


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


async def serve_h2_connection(stream: trio.abc.Stream, ctx: ServerContext, *,
                              prefix: bytes = b"", peer: str = "",
                              conn: Connection | None = None) -> None:
    """Serve gRPC (the typha.v1.Sync service) on an accepted HTTP/2 connection.

    ``prefix`` holds bytes the listener already read while sniffing the protocol (the
    start of the HTTP/2 client preface).  Returns when the connection is over, whatever
    the peer did; it is closed on return.
    """
    await GrpcConnection(stream, ctx, peer=peer, conn=conn).run(prefix)
