"""The client side of one HTTP/2 connection, as a sans-IO state machine.

:class:`H2ClientCore` wraps :class:`h2.connection.H2Connection` (client side) and adds what
h2 leaves to its user:

* outbound data queued per stream and fed into h2 only as far as the peer's flow-control
  windows allow, round-robin, so a stream whose window is shut blocks only itself;
* inbound flow control by *consumption*: received bytes are given back to the peer
  (WINDOW_UPDATE) only when the caller says it has consumed them (:meth:`consumed`), so the
  server can make us hold at most one window per stream of unread data;
* the peer's SETTINGS_MAX_CONCURRENT_STREAMS (:attr:`can_open`), and GOAWAY: streams the
  peer will not process are reported reset (:attr:`StreamReset.refused`, safe to retry on
  another connection) and no new stream is opened after it;
* keepalive bookkeeping (:class:`Keepalive`): when nothing has been read for ``idle``
  seconds a PING goes out, and a PING unanswered for ``timeout`` seconds ends the
  connection; the caller passes the time to :meth:`receive` and :meth:`tick`.

Bytes go in through :meth:`receive`; bytes to write come out of :meth:`data_to_send`.
Nothing here touches a socket or a clock.
"""

from __future__ import annotations

__sans_io__ = True

import contextlib
import enum
from collections import deque
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

Headers = list[tuple[bytes, bytes]]

#: The most a single :meth:`H2ClientCore.data_to_send` hands out.
WRITE_CHUNK = 64 * 1024
#: Our receive window per stream and for the connection (what a server may send ahead of
#: our consumption). h2's default of 64 KiB would hold a large range reply to one round
#: trip per 64 KiB.
STREAM_WINDOW = 4 << 20
CONNECTION_WINDOW = 16 << 20
MAX_HEADER_LIST_SIZE = 64 * 1024


@dataclass(frozen=True, slots=True)
class Keepalive:
    """HTTP/2 PING liveness: a PING after ``idle`` seconds with nothing read, and the
    connection declared dead when a PING stays unanswered for ``timeout`` seconds (gRPC's
    keepalive time/timeout, x/net/http2's ReadIdleTimeout/PingTimeout)."""

    idle: float
    timeout: float

    @classmethod
    def for_deadline(cls, deadline: float) -> Keepalive:
        """A PING after half the deadline read-idle, its ack due a quarter later: a dead
        connection is given up 3/4 of the deadline after its last frame, which leaves the
        rest for reconnecting and resuming within the deadline (Go's clients fix 30 s +
        10 s instead)."""
        return cls(idle=deadline / 2, timeout=deadline / 4)


# --- events -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ResponseReceived:
    """The response's (non-informational) headers."""

    stream_id: int
    headers: Headers


@dataclass(frozen=True, slots=True)
class DataReceived:
    """Body bytes; hand their count to :meth:`H2ClientCore.consumed` once they are used."""

    stream_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class TrailersReceived:
    stream_id: int
    headers: Headers


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The server ended its half of the stream; nothing more will arrive on it."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamReset:
    """The stream is gone before it ended. ``refused`` means the server never processed
    it (REFUSED_STREAM, or above a GOAWAY's last stream id): retrying elsewhere is safe.
    ``by_peer`` false: we reset it (h2 found the peer broke the stream's rules)."""

    stream_id: int
    error_code: int
    refused: bool = False
    by_peer: bool = True


@dataclass(frozen=True, slots=True)
class GoAwayReceived:
    """The server is shutting the connection: streams up to ``last_stream_id`` may still
    finish, no new one may be opened."""

    last_stream_id: int
    error_code: int
    debug: bytes


@dataclass(frozen=True, slots=True)
class PingAcked:
    """A keepalive PING came back after ``rtt`` seconds."""

    rtt: float


@dataclass(frozen=True, slots=True)
class ConnectionEnded:
    """Nothing more can happen on this connection (every open stream was reset first)."""

    reason: str
    by_peer: bool


Event = (ResponseReceived | DataReceived | TrailersReceived | StreamEnded | StreamReset
         | GoAwayReceived | PingAcked | ConnectionEnded)


class H2ClientError(Exception):
    """A request could not be made on this connection."""


class StreamGone(H2ClientError):
    """The stream is not (or no longer) open for sending."""


class ConnectionUnusable(H2ClientError):
    """No new stream may be opened: the connection is closed or going away, or the
    server's concurrent-stream limit is reached (see :attr:`H2ClientCore.can_open`)."""


class ConnectionState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class _Stream:
    __slots__ = ("id", "chunks", "buffered", "end_after", "local_open", "unacked")

    def __init__(self, stream_id: int) -> None:
        self.id = stream_id
        self.chunks: deque[memoryview] = deque()
        self.buffered = 0
        self.end_after = False  # END_STREAM goes with (or after) the last queued chunk
        self.local_open = True
        self.unacked = 0  # flow-controlled bytes received and not yet given back


class H2ClientCore:
    """HTTP/2 client connection state (sans-IO).

    ``authority`` and ``scheme`` fill the pseudo-headers of every request;
    ``keepalive`` (None: no PINGs) is the liveness policy; ``stream_buffer_limit`` is the
    queue size above which :meth:`writable` says no.
    """

    def __init__(self, *, authority: str, scheme: str = "http",
                 keepalive: Keepalive | None = None, now: float = 0.0,
                 stream_buffer_limit: int = 256 * 1024) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._h2.local_settings = h2.settings.Settings(client=True, initial_values={
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
        })
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65535)
        self.authority = authority.encode("ascii")
        self.scheme = scheme.encode("ascii")
        self.keepalive = keepalive
        self.stream_buffer_limit = stream_buffer_limit
        self.state = ConnectionState.OPEN
        self.end_reason = ""
        self._streams: dict[int, _Stream] = {}
        self._ready: dict[int, _Stream] = {}  # streams with queued data, round-robin
        self._out = bytearray(self._h2.data_to_send())
        self._last_read = now
        self._ping_sent: float | None = None  # when the unanswered PING went out
        self._ping_seq = 0
        self.pings_sent = 0

    # --- inspection ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        # A property, not an inline comparison: translating events may close the
        # connection, which a type checker's narrowing of self.state cannot see.
        return self.state is ConnectionState.CLOSED

    @property
    def last_read(self) -> float:
        """When bytes were last read from the server (any frame: data, a PING's ack)."""
        return self._last_read

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def max_concurrent_streams(self) -> int:
        return int(self._h2.remote_settings.max_concurrent_streams)

    @property
    def can_open(self) -> bool:
        """May :meth:`open_stream` be called now?"""
        return (self.state is ConnectionState.OPEN
                and self._h2.open_outbound_streams < self.max_concurrent_streams)

    def writable(self, stream_id: int) -> bool:
        """May more data be queued on this stream without passing the buffer limit?"""
        s = self._streams.get(stream_id)
        return s is None or s.buffered < self.stream_buffer_limit

    def has_stream(self, stream_id: int) -> bool:
        return stream_id in self._streams

    @property
    def wants_write(self) -> bool:
        if self._out:
            return True
        return any(s.chunks and self._h2.local_flow_control_window(s.id) > 0
                   for s in self._ready.values())

    # --- requests -----------------------------------------------------------------------

    def open_stream(self, method: bytes, path: bytes, headers: Headers | None = None, *,
                    end_stream: bool = False) -> int:
        """Send a request's HEADERS; returns its stream id."""
        if not self.can_open:
            raise ConnectionUnusable(self._unusable_reason())
        stream_id = self._h2.get_next_available_stream_id()
        head: Headers = [(b":method", method), (b":scheme", self.scheme),
                         (b":authority", self.authority), (b":path", path), *(headers or ())]
        self._h2.send_headers(stream_id, head, end_stream=end_stream)
        s = _Stream(stream_id)
        s.local_open = not end_stream
        self._streams[stream_id] = s
        self._out += self._h2.data_to_send()
        return stream_id

    def _unusable_reason(self) -> str:
        if self.state is ConnectionState.OPEN:
            return f"server's limit of {self.max_concurrent_streams} concurrent streams reached"
        return f"connection {self.state.value}" + (f": {self.end_reason}"
                                                   if self.end_reason else "")

    def send_data(self, stream_id: int, data: bytes, *, end_stream: bool = False) -> None:
        """Queue body bytes (and END_STREAM after them); they go out as windows allow."""
        s = self._streams.get(stream_id)
        if s is None or not s.local_open or self.state is ConnectionState.CLOSED:
            raise StreamGone(f"stream {stream_id} is closed for sending")
        if data:
            s.chunks.append(memoryview(data))
            s.buffered += len(data)
        if end_stream:
            s.end_after = True
            s.local_open = False
        if s.chunks or s.end_after:
            self._ready.setdefault(stream_id, s)

    def end_stream(self, stream_id: int) -> None:
        """Half-close our side once the queued data has gone."""
        self.send_data(stream_id, b"", end_stream=True)

    def reset(self, stream_id: int, error_code: ErrorCodes = ErrorCodes.CANCEL) -> None:
        """Abandon a stream at once: queued data is dropped and RST_STREAM sent."""
        s = self._streams.pop(stream_id, None)
        if s is None or self.state is ConnectionState.CLOSED:
            return
        self._ready.pop(stream_id, None)
        # Already closed both ways inside h2 when its END_STREAM is in flight to us.
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            self._h2.reset_stream(stream_id, error_code)
        self._release(s)
        self._out += self._h2.data_to_send()

    def consumed(self, stream_id: int, n: int) -> None:
        """``n`` bytes of the stream's data have been used: give them back to the server."""
        s = self._streams.get(stream_id)
        if s is None or self.state is ConnectionState.CLOSED or n <= 0:
            return
        n = min(n, s.unacked)
        s.unacked -= n
        self._ack(stream_id, n)
        self._out += self._h2.data_to_send()

    def _ack(self, stream_id: int, n: int) -> None:
        if n <= 0:
            return
        try:
            self._h2.acknowledge_received_data(n, stream_id)
        except (h2.exceptions.StreamClosedError, KeyError):
            # The stream is closed inside h2: give back the connection window only.
            self._h2.increment_flow_control_window(n)

    def _release(self, s: _Stream) -> None:
        """A forgotten stream's unconsumed bytes still count against the connection window."""
        if s.unacked and self.state is not ConnectionState.CLOSED:
            self._h2.increment_flow_control_window(s.unacked)
        s.unacked = 0

    def close(self, error_code: ErrorCodes = ErrorCodes.NO_ERROR, reason: str = "") -> list[Event]:
        """Send GOAWAY and end the connection; returns the resets of the open streams."""
        if self.state is ConnectionState.CLOSED:
            return []
        self._h2.close_connection(error_code, reason.encode("utf-8")[:256] or None)
        return self._closed(reason or "closed by us", by_peer=False)

    def connection_lost(self, reason: str) -> list[Event]:
        """The socket broke under us (read or write failed); returns the resets."""
        return self._closed(reason, by_peer=True)

    # --- time ---------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        """When :meth:`tick` next has something to do (None: never, until more happens)."""
        ka = self.keepalive
        if ka is None or self.state is ConnectionState.CLOSED:
            return None
        if self._ping_sent is not None:
            return self._ping_sent + ka.timeout
        return self._last_read + ka.idle

    def tick(self, now: float) -> list[Event]:
        """Send a keepalive PING if the connection has been read-idle long enough; end it
        if a PING has gone unanswered past its timeout."""
        ka = self.keepalive
        if ka is None or self.state is ConnectionState.CLOSED:
            return []
        if self._ping_sent is not None:
            if now - self._ping_sent >= ka.timeout:
                reason = (f"no HTTP/2 PING ack within {ka.timeout:g} s "
                          f"(nothing read for {now - self._last_read:.1f} s)")
                self._h2.close_connection(ErrorCodes.NO_ERROR, b"keepalive timeout")
                return self._closed(reason, by_peer=False)
            return []
        if now - self._last_read >= ka.idle:
            self.ping(now)
        return []

    def ping(self, now: float) -> None:
        """Send a PING now (at most one outstanding); its ack is due ``keepalive.timeout``
        later."""
        if self._ping_sent is not None or self.state is ConnectionState.CLOSED:
            return
        self._ping_seq += 1
        self._h2.ping(self._ping_seq.to_bytes(8, "big"))
        self._ping_sent = now
        self.pings_sent += 1
        self._out += self._h2.data_to_send()

    # --- bytes in -----------------------------------------------------------------------

    def receive(self, data: bytes | bytearray, now: float) -> list[Event]:
        """Feed bytes read from the socket; return what they mean. ``b""`` is EOF."""
        if self.state is ConnectionState.CLOSED:
            return []
        if not data:
            return self._closed("server closed the connection", by_peer=True)
        self._last_read = now
        events: list[Event] = []
        try:
            h2_events = self._h2.receive_data(bytes(data))
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued a GOAWAY with the right error code already.
            self._out += self._h2.data_to_send()
            return self._closed(f"HTTP/2 protocol error from server: {exc}", by_peer=False)
        for ev in h2_events:
            self._translate(ev, now, events)
            if self.closed:
                break
        if not self.closed:
            self._out += self._h2.data_to_send()
        return events

    def _translate(self, ev: h2.events.Event, now: float, events: list[Event]) -> None:
        if isinstance(ev, h2.events.ResponseReceived):
            if ev.stream_id in self._streams:
                events.append(ResponseReceived(ev.stream_id, list(ev.headers or [])))
        elif isinstance(ev, h2.events.TrailersReceived):
            if ev.stream_id in self._streams:
                events.append(TrailersReceived(ev.stream_id, list(ev.headers or [])))
        elif isinstance(ev, h2.events.DataReceived):
            n = ev.flow_controlled_length or 0
            s = self._streams.get(ev.stream_id)
            if s is None:
                if n:
                    self._h2.increment_flow_control_window(n)
                return
            # Padding counts against the window but is never handed out: give it back now.
            pad = n - len(ev.data or b"")
            s.unacked += n - pad
            self._ack(ev.stream_id, pad)
            if ev.data:
                events.append(DataReceived(ev.stream_id, bytes(ev.data)))
        elif isinstance(ev, h2.events.StreamEnded):
            s = self._streams.get(ev.stream_id)
            if s is not None:
                events.append(StreamEnded(ev.stream_id))
                if s.local_open or s.end_after:
                    # The answer is complete; what we have not sent yet is not wanted,
                    # and the stream must not keep holding a concurrency slot.  (h2 may
                    # have closed it already, when our END_STREAM crossed the server's.)
                    with contextlib.suppress(h2.exceptions.StreamClosedError):
                        self._h2.reset_stream(s.id, ErrorCodes.NO_ERROR)
                self._forget(s)
        elif isinstance(ev, h2.events.StreamReset):
            s = self._streams.pop(ev.stream_id, None)
            if s is not None:
                self._ready.pop(s.id, None)
                self._release(s)
                code = int(ev.error_code or 0)
                events.append(StreamReset(ev.stream_id, code,
                                          refused=code == ErrorCodes.REFUSED_STREAM,
                                          by_peer=ev.remote_reset))
        elif isinstance(ev, h2.events.PingAckReceived):
            if self._ping_sent is not None:
                events.append(PingAcked(now - self._ping_sent))
                self._ping_sent = None
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self._goaway(ev, events)
        # SettingsAcknowledged, RemoteSettingsChanged, WindowUpdated, PingReceived (h2
        # answers it), PriorityUpdated: nothing for the caller, or seen via wants_write.

    def _goaway(self, ev: h2.events.ConnectionTerminated, events: list[Event]) -> None:
        last = int(ev.last_stream_id or 0)
        code = int(ev.error_code or 0)
        debug = bytes(ev.additional_data or b"")
        events.append(GoAwayReceived(last, code, debug))
        for sid in sorted(self._streams):
            if sid > last:
                del self._streams[sid]
                self._ready.pop(sid, None)
                events.append(StreamReset(sid, ErrorCodes.REFUSED_STREAM, refused=True))
        detail = debug.decode("utf-8", "replace")
        self.end_reason = (f"server sent GOAWAY ({error_name(code)})"
                           + (f": {detail}" if detail else ""))
        # h2 refuses to send anything after a GOAWAY (its state machine is closed), so
        # streams below last_stream_id cannot be finished here: end them all.
        events.extend(self._closed(self.end_reason, by_peer=True))

    def _forget(self, s: _Stream) -> None:
        self._streams.pop(s.id, None)
        self._ready.pop(s.id, None)
        self._release(s)

    def _closed(self, reason: str, *, by_peer: bool) -> list[Event]:
        if self.state is ConnectionState.CLOSED:
            return []
        self.state = ConnectionState.CLOSED
        self.end_reason = self.end_reason or reason
        self._out += self._h2.data_to_send()
        events: list[Event] = [StreamReset(sid, ErrorCodes.CANCEL, refused=False,
                                           by_peer=by_peer)
                               for sid in sorted(self._streams)]
        self._streams.clear()
        self._ready.clear()
        self._ping_sent = None
        events.append(ConnectionEnded(self.end_reason, by_peer))
        return events

    # --- bytes out ----------------------------------------------------------------------

    def data_to_send(self, limit: int = WRITE_CHUNK) -> bytes:
        """Bytes to write now: pending frames plus stream data the windows allow."""
        if self.state is not ConnectionState.CLOSED:
            self._pump(limit - len(self._out))
        out = bytes(self._out)
        self._out.clear()
        return out

    def _pump(self, budget: int) -> None:
        h2conn = self._h2
        progress = True
        while budget > 0 and self._ready and progress:
            progress = False
            for s in list(self._ready.values()):
                if s.chunks:
                    window = h2conn.local_flow_control_window(s.id)
                    n = min(window, h2conn.max_outbound_frame_size, budget)
                    if n <= 0:
                        continue
                    head = s.chunks[0]
                    piece = head[:n]
                    if len(head) <= n:
                        s.chunks.popleft()
                    else:
                        s.chunks[0] = head[n:]
                    last = not s.chunks and s.end_after
                    h2conn.send_data(s.id, bytes(piece), end_stream=last)
                    s.buffered -= len(piece)
                    budget -= len(piece)
                    progress = True
                    del self._ready[s.id]
                    if s.chunks:
                        self._ready[s.id] = s  # back of the line
                    elif last:
                        s.end_after = False
                elif s.end_after:
                    h2conn.end_stream(s.id)
                    s.end_after = False
                    del self._ready[s.id]
                    progress = True
                else:
                    del self._ready[s.id]
        self._out += h2conn.data_to_send()


def error_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"error {code}"
