"""The server side of one HTTP/2 connection carrying gRPC, as a sans-IO state machine.

:class:`H2Core` wraps :class:`h2.connection.H2Connection` and adds what h2 leaves to its
user:

* gRPC message framing per stream, in and out;
* inbound flow control by *consumption*: the bytes of a received message are given back to
  the peer (WINDOW_UPDATE) only when the handler says it has consumed that message, so a
  peer cannot make us queue more than its window's worth of unread messages;
* an outbound queue per stream, bounded by the caller (see :meth:`H2Core.writable`), fed
  into h2 round-robin and only as far as the peer's flow-control windows allow, so a
  stream whose window is shut blocks only itself;
* a graceful GOAWAY (h2 can only send a final one), after which new streams are refused
  while the old ones finish;
* flood limits (:mod:`.abuse`): frames are split out of the byte stream here, before h2
  sees them, so each flood-prone frame is counted against its per-second budget, empty
  DATA frames (which mean nothing) are dropped unanswered, and the caller can take the
  input a bounded number of frames at a time (:meth:`H2Core.feed`, :meth:`H2Core.process`)
  and let other connections run in between.

Bytes go in through :meth:`H2Core.receive` (or feed + process), which returns this
module's events; bytes to write come out of :meth:`H2Core.data_to_send`.  Nothing here
touches a socket or a clock: the caller passes the time.
"""

from __future__ import annotations

__sans_io__ = True

import enum
from collections import deque
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame

from ...grpcwire.framing import FramingError, MessageDecoder
from ...grpcwire.status import StatusCode
from ...sessions.budgets import Account
from .abuse import Flood, FloodGuard, FloodLimits, FloodReport
from .metadata import Headers, response_headers, trailers, trailers_only

#: The most a single :meth:`H2Core.data_to_send` hands out; bounds what sits between the
#: stream queues and the socket.
WRITE_CHUNK = 64 * 1024
#: Advertised in SETTINGS and enforced by the HPACK decoder (h2 only applies the
#: setting to its decoder once the peer ACKs it, so we set both at once).
MAX_HEADER_LIST_SIZE = 16 * 1024

_PREFACE_LEN = 24  # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_FRAME_HEADER_LEN = 9
# Frame types and flags (RFC 9113 section 6).
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS, _PING, _WINDOW_UPDATE = 0, 1, 2, 3, 4, 6, 8
_END_STREAM = 0x1
_FLOOD_KIND = {_PRIORITY: Flood.PRIORITY, _RST_STREAM: Flood.RAPID_RESET,
               _SETTINGS: Flood.SETTINGS, _PING: Flood.PING,
               _WINDOW_UPDATE: Flood.WINDOW_UPDATE}


# --- events -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A new stream: its request headers (the handler must answer it, even if only to refuse)."""

    stream_id: int
    headers: Headers


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """One whole gRPC message; call :meth:`H2Core.consumed` once it has been handled."""

    stream_id: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class InputEnded:
    """The peer half-closed the stream: no more messages will arrive on it."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The peer broke gRPC framing on this stream; end it with ``code`` and ``message``."""

    stream_id: int
    code: StatusCode
    message: str


@dataclass(frozen=True, slots=True)
class StreamReset:
    """The stream is gone: the peer reset (cancelled) it, or, with ``by_peer`` false, h2
    reset it because the peer broke its rules (a stream window overflow)."""

    stream_id: int
    error_code: int
    by_peer: bool = True


@dataclass(frozen=True, slots=True)
class ConnectionEnded:
    """The connection is over: the peer sent GOAWAY or broke the protocol (we sent GOAWAY).

    ``flood`` says which budget the peer exceeded when we closed it for flooding."""

    reason: str
    by_peer: bool
    flood: FloodReport | None = None


Event = RequestReceived | MessageReceived | InputEnded | StreamFailed | StreamReset | ConnectionEnded


class StreamGone(Exception):
    """The stream is not (or no longer) open for sending."""


# --- per-stream state ---------------------------------------------------------------------

class Response(enum.Enum):
    """Where our half of a stream is, h11-style: each state allows only the next step."""

    IDLE = "idle"          # nothing sent yet
    STREAMING = "streaming"  # headers sent; messages may be queued
    ENDING = "ending"      # trailers wait behind the queued messages
    DONE = "done"          # trailers sent, or the stream was reset


class _Stream:
    __slots__ = ("id", "decoder", "peer_open", "accepting", "unacked", "undelivered", "chunks",
                 "head_started", "buffered", "response", "trailers")

    def __init__(self, stream_id: int, max_inbound_message: int) -> None:
        self.id = stream_id
        self.decoder = MessageDecoder(max_inbound_message)
        self.peer_open = True  # the peer has not ended its half of the stream
        self.accepting = True  # its messages are still decoded and delivered
        self.unacked = 0  # flow-controlled bytes received and not yet given back
        self.undelivered = 0  # messages handed out and not yet consumed
        # One entry per queued message; the first may be the rest of a message whose
        # start has already gone out (head_started).
        self.chunks: deque[memoryview] = deque()
        self.head_started = False
        self.buffered = 0
        self.response = Response.IDLE
        self.trailers: Headers | None = None


class ConnectionState(enum.Enum):
    OPEN = "open"
    DRAINING = "draining"  # graceful GOAWAY sent: old streams finish, new ones are refused
    CLOSED = "closed"      # final GOAWAY sent or received: nothing more may be sent


class H2Core:
    """gRPC-over-HTTP/2 server connection state (sans-IO).

    ``stream_buffer_limit`` is the queue size above which :meth:`writable` says no; a
    sender that respects it keeps at most that plus one message queued per stream.
    """

    def __init__(self, *, max_concurrent_streams: int, max_inbound_message: int,
                 stream_buffer_limit: int = 64 * 1024,
                 flood_limits: FloodLimits | None = None,
                 shared_budget: Account | None = None) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        # Set before initiate_connection so they are in force from the first frame (h2
        # applies initial values at once and only later changes on the peer's ACK).
        self._h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: max_concurrent_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_SIZE,
        })
        self._h2.decoder.max_header_list_size = MAX_HEADER_LIST_SIZE
        self._h2.initiate_connection()
        self.flood_guard = FloodGuard(flood_limits, shared=shared_budget)
        self._in = bytearray()  # received bytes not yet given to h2
        self._preface_left = _PREFACE_LEN
        self._highest_seen = 0  # the highest stream id a HEADERS frame has named
        self._now = 0.0
        self._tripped: FloodReport | None = None  # a budget h2's own resets went over
        self.max_inbound_message = max_inbound_message
        self.stream_buffer_limit = stream_buffer_limit
        self.state = ConnectionState.OPEN
        self._streams: dict[int, _Stream] = {}
        # Streams with queued data or trailers, in round-robin order.
        self._ready: dict[int, _Stream] = {}
        self._out = bytearray(self._h2.data_to_send())
        self._goaway_last: int | None = None
        #: The peer's preface and first SETTINGS have arrived.
        self.handshake_done = False

    # --- inspection ---------------------------------------------------------------------

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def pending_output(self) -> int:
        """Bytes h2 has produced (control frames, headers, data) not yet taken for writing."""
        return len(self._out)

    @property
    def buffered_bytes(self) -> int:
        """Everything this connection holds for sending: stream queues plus pending output."""
        return sum(s.buffered for s in self._streams.values()) + len(self._out)

    def buffered(self, stream_id: int) -> int:
        s = self._streams.get(stream_id)
        return s.buffered if s is not None else 0

    def writable(self, stream_id: int) -> bool:
        """May another message be queued on this stream without passing the buffer limit?"""
        s = self._streams.get(stream_id)
        return s is None or s.buffered < self.stream_buffer_limit

    def has_stream(self, stream_id: int) -> bool:
        """Is the stream still known (not both ended, reset or forgotten)?"""
        return stream_id in self._streams

    @property
    def wants_write(self) -> bool:
        """Is there anything :meth:`data_to_send` could return right now?"""
        if self._out:
            return True
        h2conn = self._h2
        return any(
            (not s.chunks and s.trailers is not None)
            or (s.chunks and h2conn.local_flow_control_window(s.id) > 0)
            for s in self._ready.values()
        )

    # --- bytes in -----------------------------------------------------------------------

    @property
    def inbound_pending(self) -> bool:
        """Has :meth:`feed` left whole frames that :meth:`process` has not handled yet?"""
        return self._frame_end(0) is not None and self.state is not ConnectionState.CLOSED

    def receive(self, data: bytes, now: float = 0.0) -> list[Event]:
        """Feed bytes read from the socket and process all of them; return what they mean."""
        self.feed(data)
        return self.process(now)

    def feed(self, data: bytes | bytearray) -> None:
        """Buffer bytes read from the socket; :meth:`process` takes them frame by frame."""
        if self.state is not ConnectionState.CLOSED:
            self._in += data

    def process(self, now: float, max_frames: int | None = None) -> list[Event]:
        """Handle up to ``max_frames`` buffered frames (all if None); return their events.

        Each frame is counted against the flood budgets first; the first one over budget
        closes the connection with GOAWAY ENHANCE_YOUR_CALM and nothing after it is read.
        """
        if self.state is ConnectionState.CLOSED:
            return []
        self._now = now
        events: list[Event] = []
        buf = self._in
        pos = 0
        if self._preface_left:
            pos = min(self._preface_left, len(buf))
            self._preface_left -= pos
        run_start = 0  # bytes [run_start, pos) go to h2 together
        frames = 0
        report: FloodReport | None = None
        oversized = 0  # the length an oversized frame header announced
        while max_frames is None or frames < max_frames:
            end = self._frame_end(pos)
            if end is None:
                break
            if end < 0:
                oversized = int.from_bytes(buf[pos:pos + 3])
                break
            frames += 1
            ftype, flags = buf[pos + 3], buf[pos + 4]
            length = end - pos - _FRAME_HEADER_LEN
            kind = _FLOOD_KIND.get(ftype)
            if ftype == _DATA and length == 0 and not flags & _END_STREAM:
                # Means nothing; answering it (RST_STREAM on a closed stream) is the cost.
                kind = Flood.EMPTY_DATA
                if not self._h2_receive(buf[run_start:pos], events):
                    break
                run_start = end
            elif ftype == _HEADERS:
                sid = int.from_bytes(buf[pos + 5:pos + 9]) & 0x7FFFFFFF
                if sid > self._highest_seen:
                    self._highest_seen = sid
                    kind = Flood.NEW_STREAMS
            pos = end
            if kind is not None and (report := self.flood_guard.count(kind, now)) is not None:
                break
        ok = self._h2_receive(buf[run_start:pos], events)
        del buf[:pos]
        if oversized and ok:
            # Framing cannot resume after a frame we will not read: a connection error
            # (RFC 9113 section 4.2), answered at once.
            limit = self._h2.max_inbound_frame_size
            reason = f"frame of {oversized} bytes exceeds SETTINGS_MAX_FRAME_SIZE {limit}"
            self.close(ErrorCodes.FRAME_SIZE_ERROR, reason)
            events.append(ConnectionEnded(f"HTTP/2 protocol error from peer: {reason} "
                                          "(FRAME_SIZE_ERROR)", by_peer=False))
            buf.clear()
            ok = False
        report = report or self._tripped
        if report is not None and ok:
            self.close(ErrorCodes.ENHANCE_YOUR_CALM, str(report))
            events.append(ConnectionEnded(f"closed for flooding: {report}", by_peer=False,
                                          flood=report))
        self._out += self._h2.data_to_send()
        return events

    def _frame_end(self, pos: int) -> int | None:
        """Where the frame starting at ``pos`` ends; None if incomplete, -1 if too big."""
        buf = self._in
        if self._preface_left or len(buf) - pos < _FRAME_HEADER_LEN:
            return None
        length = int.from_bytes(buf[pos:pos + 3])
        if length > self._h2.max_inbound_frame_size:
            return -1
        end = pos + _FRAME_HEADER_LEN + length
        return end if end <= len(buf) else None

    def _h2_receive(self, data: bytes | bytearray, events: list[Event]) -> bool:
        """Hand whole frames to h2 and translate its events; False once the connection
        is over (h2 found a protocol error, or the peer said GOAWAY)."""
        if not data or self.state is ConnectionState.CLOSED:
            return self.state is not ConnectionState.CLOSED
        try:
            h2_events = self._h2.receive_data(bytes(data))
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued a GOAWAY with the right error code already.
            self._closed()
            events.append(ConnectionEnded(f"HTTP/2 protocol error from peer: {exc}",
                                          by_peer=False))
            return False
        for ev in h2_events:
            self._translate(ev, events)
        return self._still_open()

    def _still_open(self) -> bool:
        # A call, not an inline comparison: translating events may have closed the
        # connection, which a type checker's narrowing of self.state cannot see.
        return self.state is not ConnectionState.CLOSED

    def _translate(self, ev: h2.events.Event, events: list[Event]) -> None:
        if isinstance(ev, h2.events.RequestReceived):
            sid = ev.stream_id
            if self._goaway_last is not None and sid > self._goaway_last:
                self._h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
                return
            self._streams[sid] = _Stream(sid, self.max_inbound_message)
            events.append(RequestReceived(sid, list(ev.headers)))
        elif isinstance(ev, h2.events.DataReceived):
            self._on_data(ev, events)
        elif isinstance(ev, h2.events.StreamEnded):
            s = self._streams.get(ev.stream_id)
            if s is not None:
                s.peer_open = False
                if s.accepting:
                    s.accepting = False
                    if not s.decoder.at_boundary:
                        events.append(StreamFailed(s.id, StatusCode.INTERNAL,
                                                   "request stream ended inside a message"))
                    events.append(InputEnded(s.id))
                self._maybe_forget(s)
        elif isinstance(ev, h2.events.StreamReset):
            if not ev.remote_reset:
                # h2 reset it for the peer's fault (a window overflow): a reset all the
                # same, and one way to make us reset streams in a loop.
                self._tripped = self._tripped or self.flood_guard.count(
                    Flood.RAPID_RESET, self._now)
            s = self._streams.get(ev.stream_id)
            if s is not None:
                s.response = Response.DONE
                s.peer_open = s.accepting = False
                self._forget(s)
                events.append(StreamReset(ev.stream_id, int(ev.error_code or 0),
                                          by_peer=ev.remote_reset))
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            self.handshake_done = True
        elif isinstance(ev, h2.events.ConnectionTerminated):
            code = ev.error_code
            name = code.name if isinstance(code, ErrorCodes) else str(code)
            self._closed()
            events.append(ConnectionEnded(f"peer sent GOAWAY ({name})", by_peer=True))
        # Window updates and settings changes only make data_to_send able to do more;
        # h2 answers PINGs and SETTINGS itself.

    def _on_data(self, ev: h2.events.DataReceived, events: list[Event]) -> None:
        flow_len = ev.flow_controlled_length or 0
        s = self._streams.get(ev.stream_id)
        if s is None or not s.accepting:
            self._h2.acknowledge_received_data(flow_len, ev.stream_id)
            return
        try:
            payloads = s.decoder.feed(ev.data or b"")
        except FramingError as exc:
            s.accepting = False
            self._h2.acknowledge_received_data(flow_len, s.id)
            events.append(StreamFailed(s.id, exc.code, exc.message))
            return
        s.unacked += flow_len
        s.undelivered += len(payloads)
        events.extend(MessageReceived(s.id, p) for p in payloads)
        if not s.undelivered:
            # The handler has consumed everything: the bytes sit in the decoder only, which
            # the message size limit bounds, so give the window back now (a message bigger
            # than the window would deadlock otherwise).
            self._release(s)

    def _release(self, s: _Stream) -> None:
        if s.unacked:
            self._h2.acknowledge_received_data(s.unacked, s.id)
            s.unacked = 0

    # --- the handler's calls ------------------------------------------------------------

    def consumed(self, stream_id: int) -> None:
        """The handler is done with one message of ``stream_id``.

        Once it has consumed every message handed out, the stream's received bytes are
        given back to the peer (WINDOW_UPDATE); until then the peer can send at most one
        window more, which bounds what an unread stream can make us hold.
        """
        s = self._streams.get(stream_id)
        if s is None or self.state is ConnectionState.CLOSED:
            return  # a forgotten stream's bytes were given back when it was forgotten
        s.undelivered -= 1
        if not s.undelivered:
            self._release(s)
            self._out += self._h2.data_to_send()

    def send_message(self, stream_id: int, message: bytes) -> None:
        """Queue one gRPC-framed message (response headers go first if not sent yet)."""
        s = self._sendable(stream_id)
        if s.response is Response.IDLE:
            self._h2.send_headers(stream_id, response_headers())
            self._out += self._h2.data_to_send()
            s.response = Response.STREAMING
        if message:
            s.chunks.append(memoryview(message))
            s.buffered += len(message)
            self._ready.setdefault(stream_id, s)

    def end_stream(self, stream_id: int, code: StatusCode, message: str = "", *,
                   discard_queued: bool = False) -> None:
        """Finish the response with a gRPC status, after any queued messages.

        With ``discard_queued`` the messages not started yet are dropped (only the rest of
        a half-sent one must still go, so the peer sees whole messages).  A stream that
        never sent anything gets a Trailers-Only response at once.
        """
        s = self._sendable(stream_id)
        if discard_queued and s.chunks:
            keep = s.chunks[0] if s.head_started else None
            s.chunks.clear()
            if keep is not None:
                s.chunks.append(keep)
            s.buffered = len(keep) if keep is not None else 0
        if s.response is Response.IDLE:
            s.trailers = trailers_only(code, message)
        else:
            s.trailers = trailers(code, message)
        s.response = Response.ENDING
        self._ready.setdefault(stream_id, s)
        self._pump_trailers(s)

    def reject(self, stream_id: int, headers: Headers) -> None:
        """Answer a request that is not gRPC with a plain HTTP response (``headers``)."""
        s = self._sendable(stream_id)
        if s.response is not Response.IDLE:
            raise StreamGone(f"stream {stream_id} has already started its response")
        s.trailers = headers
        s.response = Response.ENDING
        self._ready.setdefault(stream_id, s)
        self._pump_trailers(s)

    def reset(self, stream_id: int, error_code: ErrorCodes = ErrorCodes.CANCEL) -> None:
        """Abandon a stream at once: queued data is dropped and RST_STREAM sent."""
        s = self._streams.get(stream_id)
        if s is None or self.state is ConnectionState.CLOSED:
            return
        if s.response is not Response.DONE:
            self._h2.reset_stream(stream_id, error_code)
            self._out += self._h2.data_to_send()
        s.response = Response.DONE
        s.peer_open = s.accepting = False
        self._forget(s)

    def start_drain(self) -> None:
        """Send a GOAWAY(NO_ERROR) naming the last stream we accept; keep serving those.

        Built by hand because h2's own GOAWAY closes its state machine for sending.
        """
        if self.state is not ConnectionState.OPEN:
            return
        self._goaway_last = self._h2.highest_inbound_stream_id
        frame = GoAwayFrame(0)
        frame.last_stream_id = self._goaway_last
        frame.error_code = ErrorCodes.NO_ERROR
        self._out += frame.serialize()
        self.state = ConnectionState.DRAINING

    def close(self, error_code: ErrorCodes = ErrorCodes.NO_ERROR, reason: str = "") -> None:
        """Send the final GOAWAY; every stream is dropped."""
        if self.state is ConnectionState.CLOSED:
            return
        self._h2.close_connection(error_code, reason.encode("utf-8")[:256] or None,
                                  last_stream_id=self._goaway_last)
        self._closed()

    # --- bytes out ----------------------------------------------------------------------

    def data_to_send(self, limit: int = WRITE_CHUNK) -> bytes:
        """Bytes to write now: pending frames plus stream data the windows allow.

        Streams take turns one frame at a time, so one busy stream cannot starve the rest,
        and a stream with a shut window is skipped without holding anything up.
        """
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
                    if len(head) <= n:
                        # Whole messages: as many as fit go out in one DATA frame, so a
                        # client catching up costs one h2 frame, not one per message.
                        piece = s.chunks.popleft()
                        if s.chunks and len(piece) + len(s.chunks[0]) <= n:
                            parts = [piece]
                            size = len(piece)
                            while s.chunks and size + len(s.chunks[0]) <= n:
                                parts.append(s.chunks.popleft())
                                size += len(parts[-1])
                            piece = memoryview(b"".join(parts))
                        s.head_started = False
                    else:
                        piece = head[:n]
                        s.chunks[0] = head[n:]
                        s.head_started = True
                    h2conn.send_data(s.id, piece)
                    self.flood_guard.data_sent(self._now)
                    s.buffered -= len(piece)
                    budget -= len(piece)
                    progress = True
                    # Back of the line.
                    del self._ready[s.id]
                    self._ready[s.id] = s
                if not s.chunks:
                    if s.trailers is None:
                        self._ready.pop(s.id, None)
                    else:
                        self._pump_trailers(s)
                        progress = True
                if budget <= 0:
                    break
        self._out += h2conn.data_to_send()

    def _pump_trailers(self, s: _Stream) -> None:
        if s.chunks or s.trailers is None or self.state is ConnectionState.CLOSED:
            return
        self._h2.send_headers(s.id, s.trailers, end_stream=True)
        if s.peer_open:
            # The answer is complete; tell the peer to stop sending (RFC 9113 8.1).
            self._h2.reset_stream(s.id, ErrorCodes.NO_ERROR)
            s.peer_open = s.accepting = False
        self._out += self._h2.data_to_send()
        s.trailers = None
        s.response = Response.DONE
        self._ready.pop(s.id, None)
        self._maybe_forget(s)

    # --- bookkeeping --------------------------------------------------------------------

    def _sendable(self, stream_id: int) -> _Stream:
        s = self._streams.get(stream_id)
        if (s is None or self.state is ConnectionState.CLOSED
                or s.response in (Response.ENDING, Response.DONE)):
            raise StreamGone(f"stream {stream_id} is closed")
        return s

    def _maybe_forget(self, s: _Stream) -> None:
        if s.response is Response.DONE and not s.peer_open:
            self._forget(s)

    def _forget(self, s: _Stream) -> None:
        self._streams.pop(s.id, None)
        self._ready.pop(s.id, None)
        s.chunks.clear()
        s.buffered = 0
        if self.state is not ConnectionState.CLOSED:
            # Unconsumed messages still count against the connection window.
            self._release(s)
            self._out += self._h2.data_to_send()
        s.unacked = s.undelivered = 0

    def _closed(self) -> None:
        self.state = ConnectionState.CLOSED
        self._in.clear()  # what the peer sent after the end is never parsed
        self._out += self._h2.data_to_send()
        for s in list(self._streams.values()):
            s.response = Response.DONE
            s.peer_open = s.accepting = False
            self._forget(s)
