"""The trio shell around :class:`~.core.H2ClientCore`: one HTTP/2 client connection.

:meth:`H2ClientConnection.run` (started with ``nursery.start``) owns the socket: its reader
feeds the core, its writer is the only task that writes, and its timer drives the keepalive
PINGs. Requests are :class:`H2Stream` objects: :meth:`H2ClientConnection.open_stream`
sends the headers, :meth:`H2Stream.send` queues body bytes (waiting while the stream's
queue is full), :meth:`H2Stream.receive` returns body bytes as they arrive and gives their
flow-control credit back once taken, so a caller that stops reading stops the server.

Every failure leaves as :class:`H2StreamError` (one stream) or :class:`H2ConnectionError`
(the connection: closed, dead by keepalive, GOAWAY); ``refused`` says the server never
processed the request, so it may be retried elsewhere.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Awaitable, Callable, Sequence

import trio

from . import core
from .core import H2ClientCore, Headers, Keepalive

__all__ = ["H2ClientConnection", "H2ConnectionError", "H2Stream", "H2StreamError",
           "Keepalive", "NotHttp2", "SharedConnection", "connect_tcp"]

READ_SIZE = 1 << 16
#: How long a closing connection waits for its last frames (GOAWAY) to be written.
CLOSE_FLUSH = 1.0


class H2StreamError(Exception):
    """The stream ended without a complete response. ``refused``: the server never
    processed it (safe to retry on another connection)."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class H2ConnectionError(H2StreamError):
    """The connection is gone (or could not be made); every stream on it failed."""


class NotHttp2(H2ConnectionError):
    """TLS ALPN chose another protocol than ``h2`` (:attr:`chosen`; None: none at all)."""

    def __init__(self, message: str, chosen: str | None) -> None:
        super().__init__(message, refused=True)
        self.chosen = chosen


async def connect_tcp(host: str, port: int, *, ssl_context: ssl.SSLContext | None = None,
                      server_hostname: str | None = None,
                      alpn: Sequence[str] = ("h2",)) -> trio.abc.Stream:
    """TCP to ``host:port``; with ``ssl_context``, TLS offering ``alpn`` (``h2`` first) and
    the context's client certificate, if loaded. Without it the caller speaks h2c with
    prior knowledge. Failures raise :class:`H2ConnectionError` (their cause the
    ``OSError`` or TLS error); a server that agrees to anything but ``h2`` by ALPN raises
    :class:`NotHttp2`, the connection closed, so a caller that offered ``http/1.1`` too
    may use HTTP/1.1 instead."""
    try:
        sock: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise H2ConnectionError(f"connect to {host}:{port}: {exc}", refused=True) from exc
    if ssl_context is None:
        return sock
    ssl_context.set_alpn_protocols(list(alpn))
    tls = trio.SSLStream(sock, ssl_context, server_hostname=server_hostname or host,
                         https_compatible=True)
    try:
        await tls.do_handshake()
        chosen = tls.selected_alpn_protocol()
        if chosen != "h2":
            raise NotHttp2(f"{host}:{port} did not agree to HTTP/2 by ALPN (chose "
                           f"{chosen!r})", chosen)
    except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
        await trio.aclose_forcefully(tls)
        # trio wraps the TLS error (a bad certificate...) in BrokenResourceError: name it.
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
        raise H2ConnectionError(f"TLS to {host}:{port}: {cause or exc}",
                                refused=True) from exc
    except BaseException:
        await trio.aclose_forcefully(tls)
        raise
    return tls


class SharedConnection:
    """One HTTP/2 connection shared by every task that asks for it (:meth:`get`): reused
    while it is usable, opened by ``connect`` when there is none or it has ended, one
    opener at a time (the others wait and share its result).

    :meth:`run` (started with ``nursery.start``) hosts the connection's task, so the
    connection outlives whichever request opened it; cancelling it closes the connection.
    ``on_end`` is told when each connection has ended (a log line, say).
    """

    def __init__(self, connect: Callable[[], Awaitable[H2ClientConnection]], *,
                 on_end: Callable[[H2ClientConnection], None] | None = None) -> None:
        self._connect = connect
        self._on_end = on_end
        self.conn: H2ClientConnection | None = None
        self.connections_opened = 0
        self._nursery: trio.Nursery | None = None
        self._connecting: trio.Event | None = None

    @property
    def running(self) -> bool:
        return self._nursery is not None

    @property
    def usable(self) -> bool:
        return self.conn is not None and self.conn.usable

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host the connection task until cancelled (then the connection closes)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.conn = None

    async def get(self) -> H2ClientConnection:
        """The usable connection, opened now if there is none. Raises what ``connect``
        raises (the caller bounds the time)."""
        while True:
            conn = self.conn
            if conn is not None and conn.usable:
                return conn
            if self._connecting is None:
                break
            await self._connecting.wait()  # another task is connecting: share its result
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError("SharedConnection.run is not running")
        self._connecting = done = trio.Event()
        try:
            conn = await self._connect()
            await nursery.start(conn.run)
            await nursery.start(self._ended, conn)
            self.conn = conn
            self.connections_opened += 1
            return conn
        finally:
            self._connecting = None
            done.set()

    async def aclose(self) -> None:
        """Close the connection (GOAWAY, then the socket) and wait until it is closed; the
        next :meth:`get` opens a new one."""
        conn = self.conn
        if conn is not None:
            await conn.aclose()
            await conn.finished.wait()

    async def _ended(self, conn: H2ClientConnection, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await conn.ended.wait()
        if self.conn is conn:
            self.conn = None
        if self._on_end is not None:
            self._on_end(conn)


class H2ClientConnection:
    """One HTTP/2 client connection over ``stream`` (already connected; see
    :func:`connect_tcp`). Start :meth:`run` with ``nursery.start``; it returns when the
    connection ends (:attr:`ended` is set and :attr:`end_reason` says why)."""

    def __init__(self, stream: trio.abc.Stream, *, authority: str, scheme: str = "http",
                 keepalive: Keepalive | None = None) -> None:
        self._stream = stream
        self.core = H2ClientCore(authority=authority, scheme=scheme, keepalive=keepalive,
                                 now=trio.current_time())
        self._streams: dict[int, H2Stream] = {}
        self._wake_writer = trio.Event()
        self._progress = trio.Event()  # set (and replaced) whenever senders may proceed
        self.ended = trio.Event()
        self.finished = trio.Event()  # run() has returned: the socket is closed
        self._writer_done = trio.Event()
        self.end_reason = ""
        self.pings_acked = 0
        self.last_rtt: float | None = None
        self._pinged = trio.Event()  # set (and replaced) at each PING ack and at the end

    @property
    def usable(self) -> bool:
        return not self.ended.is_set() and self.core.state is core.ConnectionState.OPEN

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self._reader)
                await nursery.start(self._writer)
                await nursery.start(self._timer)
                task_status.started()
                await self.ended.wait()
                # Let the writer put out the GOAWAY (bounded: a dead peer may not read).
                with trio.move_on_after(CLOSE_FLUSH):
                    await self._writer_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            if not self.ended.is_set():
                self._dispatch(self.core.close(reason="connection task ended"))
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._stream)
            self.finished.set()

    async def alive(self, within: float) -> bool:
        """Whether the peer still answers: a PING (unless one is outstanding already)
        acknowledged within ``within`` seconds. One stream gone quiet on a live connection is that
        stream's trouble; a connection whose PING goes unanswered is everyone's."""
        if not self.usable:
            return False
        pinged = self._pinged
        self.core.ping(trio.current_time())
        self._kick()
        with trio.move_on_after(within):
            await pinged.wait()
        return pinged.is_set() and self.usable

    async def aclose(self) -> None:
        """End the connection (GOAWAY, then the socket); every open stream fails."""
        self._dispatch(self.core.close(reason="closed by us"))
        self._kick()

    # --- requests -----------------------------------------------------------------------

    async def open_stream(self, method: bytes, path: bytes, headers: Sequence[tuple[bytes, bytes]] = (),
                          *, end_stream: bool = False) -> H2Stream:
        """Send a request's headers, waiting for a free concurrent-stream slot."""
        while not self.core.can_open:
            if not self.usable:
                raise H2ConnectionError(self.end_reason or self.core.end_reason
                                        or "connection not open", refused=True)
            await self._progress.wait()
        sid = self.core.open_stream(method, path, list(headers), end_stream=end_stream)
        s = H2Stream(self, sid)
        self._streams[sid] = s
        self._kick()
        return s

    # --- tasks --------------------------------------------------------------------------

    async def _reader(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while not self.ended.is_set():
            try:
                data = await self._stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self._dispatch(self.core.connection_lost(f"read failed: {exc!r}"))
                return
            self._dispatch(self.core.receive(data, trio.current_time()))
            self._kick()

    async def _writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                await self._wake_writer.wait()
                self._wake_writer = trio.Event()
                while data := self.core.data_to_send():
                    try:
                        await self._stream.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                        self._dispatch(self.core.connection_lost(f"write failed: {exc!r}"))
                        return
                    self._release_senders()
                if self.ended.is_set():
                    return
        finally:
            self._writer_done.set()

    async def _timer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while (when := self.core.next_timer()) is not None:
            await trio.sleep_until(when)
            self._dispatch(self.core.tick(trio.current_time()))
            self._kick()

    # --- plumbing -----------------------------------------------------------------------

    def _kick(self) -> None:
        self._wake_writer.set()

    def _release_senders(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    def _dispatch(self, events: list[core.Event]) -> None:
        for ev in events:
            if isinstance(ev, core.PingAcked):
                self.pings_acked += 1
                self.last_rtt = ev.rtt
                self._pinged.set()
                self._pinged = trio.Event()
            elif isinstance(ev, core.ConnectionEnded):
                self.end_reason = ev.reason
                self.ended.set()
                self._pinged.set()
                self._kick()
            elif isinstance(ev, core.GoAwayReceived):
                pass  # the resets (and ConnectionEnded) that follow say all
            else:
                s = self._streams.get(ev.stream_id)
                if s is not None:
                    s._deliver(ev)
                    if isinstance(ev, (core.StreamEnded, core.StreamReset)):
                        del self._streams[ev.stream_id]
        if events:
            self._release_senders()


class H2Stream:
    """One request/response exchange on an :class:`H2ClientConnection`."""

    def __init__(self, conn: H2ClientConnection, stream_id: int) -> None:
        self._conn = conn
        self.id = stream_id
        send, self._inbox = trio.open_memory_channel[core.Event](math.inf)
        self._send = send
        self.headers: Headers | None = None
        self.trailers: Headers | None = None
        self.ended = False  # the server ended its half, cleanly
        self._error: H2StreamError | None = None

    def _deliver(self, ev: core.Event) -> None:
        # The inbox holds at most one flow-control window of unconsumed data plus a few
        # header events, so an unbounded channel is bounded by HTTP/2 itself.
        self._send.send_nowait(ev)

    async def response(self) -> Headers:
        """The response headers (waits for them)."""
        while self.headers is None:
            ev = await self._next()
            if isinstance(ev, core.DataReceived):
                raise H2StreamError(f"stream {self.id}: data before response headers")
        return self.headers

    async def receive(self) -> bytes:
        """The next body bytes; ``b""`` once the server has ended the stream cleanly."""
        while True:
            if self.ended:
                return b""
            ev = await self._next()
            if isinstance(ev, core.DataReceived):
                self._conn.core.consumed(self.id, len(ev.data))
                self._conn._kick()
                return ev.data

    async def _next(self) -> core.Event:
        if self._error is not None:
            raise self._error
        try:
            ev = await self._inbox.receive()
        except trio.EndOfChannel:
            raise self._error or H2StreamError(f"stream {self.id} is over") from None
        if isinstance(ev, core.ResponseReceived):
            self.headers = ev.headers
        elif isinstance(ev, core.TrailersReceived):
            self.trailers = ev.headers
        elif isinstance(ev, core.StreamEnded):
            self.ended = True
            self._send.close()
        elif isinstance(ev, core.StreamReset):
            self._send.close()
            conn = self._conn
            if conn.ended.is_set() or conn.core.state is core.ConnectionState.CLOSED:
                self._error = H2ConnectionError(
                    conn.end_reason or conn.core.end_reason or "connection closed",
                    refused=ev.refused)
            else:
                self._error = H2StreamError(
                    f"stream {self.id} reset by {'server' if ev.by_peer else 'us'} "
                    f"({core.error_name(ev.error_code)})", refused=ev.refused)
            raise self._error
        return ev

    async def send(self, data: bytes, *, end_stream: bool = False) -> None:
        """Queue ``data``; waits while this stream's queue is over its limit."""
        conn = self._conn
        while not conn.core.writable(self.id):
            await conn._progress.wait()
        if self._error is not None:
            raise self._error
        try:
            conn.core.send_data(self.id, data, end_stream=end_stream)
        except core.StreamGone as exc:
            raise self._error or H2StreamError(str(exc)) from None
        conn._kick()

    def reset(self) -> None:
        """Cancel the stream (RST_STREAM CANCEL) unless it is over already."""
        if self.id in self._conn._streams:
            del self._conn._streams[self.id]
            self._conn.core.reset(self.id)
            self._conn._kick()
        self._send.close()
        if self._error is None and not self.ended:
            self._error = H2StreamError(f"stream {self.id} cancelled")
