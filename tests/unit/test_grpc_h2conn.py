"""The sans-IO HTTP/2 core, driven by h2's own client-side state machine (no event loop)."""

from __future__ import annotations

import struct

import h2.config
import h2.connection
import h2.events
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame

from trio_typha.grpcwire.framing import frame_message
from trio_typha.grpcwire.status import StatusCode
from trio_typha.protocols.grpc import h2conn
from trio_typha.protocols.grpc.h2conn import (
    ConnectionEnded,
    ConnectionState,
    H2Core,
    InputEnded,
    MessageReceived,
    RequestReceived,
    StreamFailed,
    StreamGone,
    StreamReset,
)

REQUEST = [(":method", "POST"), (":scheme", "http"), (":path", "/typha.v1.Sync/Sync"),
           (":authority", "x"), ("content-type", "application/grpc"), ("te", "trailers")]


class Pair:
    """An H2Core and an h2 client wired back to back; bytes move only when asked."""

    def __init__(self, *, handshake: bool = True, **core_args) -> None:
        args = {"max_concurrent_streams": 16, "max_inbound_message": 1 << 20} | core_args
        self.server = H2Core(**args)
        self.client = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.client.initiate_connection()
        self.events: list = []
        self.client_events: list = []
        if handshake:
            self.exchange()

    def to_server(self) -> bool:
        data = self.client.data_to_send()
        if data:
            self.events += self.server.receive(data)
        return bool(data)

    def to_client(self, limit: int = h2conn.WRITE_CHUNK) -> bool:
        data = self.server.data_to_send(limit)
        if data:
            self.client_events += self.client.receive_data(data)
        return bool(data)

    def exchange(self) -> None:
        while self.to_server() | self.to_client():
            pass

    def open(self, *, end_stream: bool = False) -> int:
        sid = self.client.get_next_available_stream_id()
        self.client.send_headers(sid, REQUEST, end_stream=end_stream)
        return sid

    def send(self, sid: int, data: bytes) -> None:
        step = self.client.max_outbound_frame_size
        for i in range(0, len(data), step):
            self.client.send_data(sid, data[i:i + step])

    def take(self, kind: type) -> list:
        got = [e for e in self.events if isinstance(e, kind)]
        self.events = [e for e in self.events if not isinstance(e, kind)]
        return got

    def client_data(self, sid: int) -> bytes:
        return b"".join(e.data for e in self.client_events
                        if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)

    def client_ack(self, sid: int) -> None:
        """Give back the window for everything the client has received on ``sid``."""
        for e in self.client_events:
            if (isinstance(e, h2.events.DataReceived) and e.stream_id == sid
                    and not getattr(e, "acked", False)):
                self.client.acknowledge_received_data(e.flow_controlled_length, sid)
                e.acked = True


def frames(data: bytes) -> list[Frame]:
    out, pos = [], 0
    while pos < len(data):
        frame, length = Frame.parse_frame_header(memoryview(data[pos:pos + 9]))
        frame.parse_body(memoryview(data[pos + 9:pos + 9 + length]))
        out.append(frame)
        pos += 9 + length
    return out


def messages(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 5 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos + 1)
        assert pos + 5 + length <= len(data), "partial message"
        out.append(data[pos + 5:pos + 5 + length])
        pos += 5 + length
    assert pos == len(data)
    return out


def test_settings_advertise_the_stream_limit():
    p = Pair(max_concurrent_streams=7)
    assert p.server.handshake_done
    assert p.client.remote_settings.max_concurrent_streams == 7


def test_h2_pings_are_answered():
    p = Pair()
    p.client.ping(b"keepaliv")
    p.exchange()
    (ack,) = [e for e in p.client_events if isinstance(e, h2.events.PingAckReceived)]
    assert ack.ping_data == b"keepaliv"


def test_request_and_a_message_split_over_frames():
    p = Pair()
    sid = p.open()
    framed = frame_message(b"hello world")
    for i in range(0, len(framed), 3):
        p.client.send_data(sid, framed[i:i + 3])
    p.exchange()
    (req,) = p.take(RequestReceived)
    assert req.stream_id == sid
    assert (b":path", b"/typha.v1.Sync/Sync") in req.headers
    assert p.take(MessageReceived) == [MessageReceived(sid, b"hello world")]


def test_window_is_given_back_only_when_messages_are_consumed():
    p = Pair()
    sid = p.open()
    for _ in range(6):
        p.client.send_data(sid, frame_message(b"m" * 10_000))
    p.exchange()
    assert len(p.take(MessageReceived)) == 6
    assert p.client.local_flow_control_window(sid) == 65535 - 6 * 10_005
    for _ in range(5):
        p.server.consumed(sid)
        p.exchange()
    # Five of six consumed: nothing given back yet, so the peer cannot pile up more.
    assert p.client.local_flow_control_window(sid) == 65535 - 6 * 10_005
    p.server.consumed(sid)
    p.exchange()
    assert p.client.local_flow_control_window(sid) == 65535


def test_message_bigger_than_the_window_is_received():
    p = Pair()
    sid = p.open()
    framed = frame_message(b"b" * 200_000)
    sent = 0
    while sent < len(framed):
        n = min(p.client.local_flow_control_window(sid), p.client.max_outbound_frame_size,
                len(framed) - sent)
        assert n > 0, "deadlocked: the partial message's window was never given back"
        p.client.send_data(sid, framed[sent:sent + n])
        sent += n
        p.exchange()
    assert p.take(MessageReceived) == [MessageReceived(sid, b"b" * 200_000)]


def test_outbound_data_stops_at_the_window_and_resumes_on_window_update():
    p = Pair()
    sid = p.open()
    p.exchange()
    p.server.send_message(sid, frame_message(b"d" * 200_000))
    p.exchange()
    assert len(p.client_data(sid)) == 65535
    assert p.server.buffered(sid) == 200_005 - 65535
    assert p.server.data_to_send() == b""  # blocked: nothing to write
    p.client_ack(sid)
    p.exchange()
    assert len(p.client_data(sid)) > 65535
    while p.server.buffered(sid):
        p.client_ack(sid)
        p.exchange()
    assert messages(p.client_data(sid)) == [b"d" * 200_000]


def test_a_stream_with_a_shut_window_blocks_only_itself():
    p = Pair()
    p.client.increment_flow_control_window(10_000_000)  # connection window: plenty
    stuck, flowing = p.open(), p.open()
    p.exchange()
    for sid in (stuck, flowing):
        p.server.send_message(sid, frame_message(b"x" * 300_000))
    for _ in range(50):
        p.client_ack(flowing)  # only this stream's window is ever given back
        p.exchange()
    assert messages(p.client_data(flowing)) == [b"x" * 300_000]
    assert len(p.client_data(stuck)) == 65535
    assert p.server.buffered(stuck) == 300_005 - 65535


def test_streams_take_turns():
    p = Pair()
    p.client.increment_flow_control_window(10_000_000)
    a, b = p.open(), p.open()
    p.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1_000_000})
    p.exchange()
    p.server.send_message(a, frame_message(b"a" * 100_000))
    p.server.send_message(b, frame_message(b"b" * 100_000))
    p.exchange()
    order = [e.stream_id for e in p.client_events if isinstance(e, h2.events.DataReceived)]
    assert order[:6] == [a, b, a, b, a, b]


def test_writable_follows_the_stream_buffer_limit():
    p = Pair(stream_buffer_limit=1000)
    sid = p.open()
    p.exchange()
    p.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    p.exchange()
    p.server.send_message(sid, b"x" * 600)
    assert p.server.writable(sid)
    p.server.send_message(sid, b"x" * 600)
    assert not p.server.writable(sid)
    assert p.server.buffered(sid) == 1200
    p.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})
    p.exchange()
    assert p.server.writable(sid) and p.server.buffered(sid) == 0


def test_trailers_follow_the_data_then_the_peer_is_told_to_stop():
    p = Pair()
    sid = p.open()
    p.exchange()
    p.server.send_message(sid, frame_message(b"one"))
    p.server.end_stream(sid, StatusCode.UNAVAILABLE, "bye 100%")
    p.exchange()
    kinds = [type(e).__name__ for e in p.client_events if getattr(e, "stream_id", None) == sid]
    assert kinds == ["ResponseReceived", "DataReceived", "TrailersReceived", "StreamEnded",
                     "StreamReset"]
    (trailers,) = [e for e in p.client_events if isinstance(e, h2.events.TrailersReceived)]
    assert dict(trailers.headers) == {"grpc-status": "14", "grpc-message": "bye 100%25"}
    (reset,) = [e for e in p.client_events if isinstance(e, h2.events.StreamReset)]
    assert reset.error_code == ErrorCodes.NO_ERROR
    assert p.server.open_streams == 0
    with pytest.raises(StreamGone):
        p.server.send_message(sid, b"late")


def test_stream_the_peer_already_ended_is_not_reset():
    p = Pair()
    sid = p.open(end_stream=True)
    p.exchange()
    assert p.take(InputEnded) == [InputEnded(sid)]
    p.server.end_stream(sid, StatusCode.OK)
    p.exchange()
    assert not any(isinstance(e, h2.events.StreamReset) for e in p.client_events)
    assert p.server.open_streams == 0


def test_error_before_any_message_is_trailers_only():
    p = Pair()
    sid = p.open()
    p.exchange()
    p.server.end_stream(sid, StatusCode.UNIMPLEMENTED, "unknown method /x")
    p.exchange()
    (resp,) = [e for e in p.client_events if isinstance(e, h2.events.ResponseReceived)]
    assert dict(resp.headers)["grpc-status"] == "12"
    assert resp.stream_ended is not None
    assert not p.client_data(sid)


def test_discarding_keeps_only_the_rest_of_a_half_sent_message():
    p = Pair()
    sid = p.open()
    p.exchange()
    for tag in b"abc":
        p.server.send_message(sid, frame_message(bytes([tag]) * 50_000))
    p.exchange()  # message a and part of b fit the 64 KiB window
    p.server.end_stream(sid, StatusCode.DEADLINE_EXCEEDED, "too slow", discard_queued=True)
    assert p.server.buffered(sid) == 2 * 50_005 - 65535
    while p.server.has_stream(sid):
        p.client_ack(sid)
        p.exchange()
    assert messages(p.client_data(sid)) == [b"a" * 50_000, b"b" * 50_000]
    (trailers,) = [e for e in p.client_events if isinstance(e, h2.events.TrailersReceived)]
    assert dict(trailers.headers)["grpc-status"] == "4"


def test_peer_reset_drops_the_stream():
    p = Pair()
    sid = p.open()
    p.exchange()
    p.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    p.exchange()
    p.server.send_message(sid, frame_message(b"q" * 5000))
    p.client.reset_stream(sid, ErrorCodes.CANCEL)
    p.exchange()
    assert p.take(StreamReset) == [StreamReset(sid, ErrorCodes.CANCEL)]
    assert p.server.buffered_bytes == 0 and p.server.open_streams == 0
    with pytest.raises(StreamGone):
        p.server.send_message(sid, b"x")


def test_unconsumed_messages_are_given_back_when_the_stream_goes():
    p = Pair()
    sid = p.open()
    for _ in range(5):
        p.client.send_data(sid, frame_message(b"u" * 9_000))
    p.exchange()
    assert len(p.take(MessageReceived)) == 5
    assert p.client.outbound_flow_control_window == 65535 - 5 * 9_005
    p.server.reset(sid)
    p.exchange()
    # The connection window must not leak what the dead stream never consumed.
    assert p.client.outbound_flow_control_window == 65535


def test_bad_framing_fails_that_stream_only():
    p = Pair(max_inbound_message=100)
    bad, partial, good = p.open(), p.open(), p.open()
    p.client.send_data(bad, b"\x01\x00\x00\x00\x01z")  # compressed
    p.client.send_data(partial, frame_message(b"cut short")[:-2], end_stream=True)
    p.client.send_data(good, frame_message(b"fine"))
    p.exchange()
    failed = {e.stream_id: e.code for e in p.take(StreamFailed)}
    assert failed == {bad: StatusCode.INTERNAL, partial: StatusCode.INTERNAL}
    assert p.take(MessageReceived) == [MessageReceived(good, b"fine")]
    assert p.take(InputEnded) == [InputEnded(partial)]


def test_protocol_error_sends_goaway():
    p = Pair()
    events = p.server.receive(b"\x00\x00\x04\x00\x00\x00\x00\x00\x00abcd")  # DATA on stream 0
    assert len(events) == 1 and isinstance(events[0], ConnectionEnded)
    assert not events[0].by_peer
    (goaway,) = frames(p.server.data_to_send())
    assert isinstance(goaway, GoAwayFrame) and goaway.error_code == ErrorCodes.PROTOCOL_ERROR
    assert p.server.state is ConnectionState.CLOSED


def test_bad_preface_is_a_protocol_error():
    server = H2Core(max_concurrent_streams=4, max_inbound_message=100)
    (event,) = server.receive(b"GET / HTTP/1.1\r\n\r\n")
    assert isinstance(event, ConnectionEnded) and not event.by_peer


def test_more_streams_than_advertised_is_a_connection_error():
    # A client that ignores (here: has not yet seen) the advertised limit.
    p = Pair(handshake=False, max_concurrent_streams=1)
    p.open()
    p.open()
    p.to_server()
    assert isinstance(p.events[-1], ConnectionEnded)
    goaway = frames(p.server.data_to_send())[-1]
    assert isinstance(goaway, GoAwayFrame) and goaway.error_code == ErrorCodes.PROTOCOL_ERROR


def test_peer_goaway_ends_the_connection():
    p = Pair()
    sid = p.open()
    p.exchange()
    p.client.close_connection()
    p.to_server()
    assert p.events[-1] == ConnectionEnded("peer sent GOAWAY (NO_ERROR)", by_peer=True)
    with pytest.raises(StreamGone):
        p.server.send_message(sid, b"x")


def test_graceful_drain_refuses_new_streams_and_finishes_old_ones():
    p = Pair()
    old = p.open()
    p.exchange()
    p.take(RequestReceived)
    p.server.start_drain()
    # The client has not seen the GOAWAY yet and opens another stream.
    new = p.open()
    p.to_server()
    assert p.take(RequestReceived) == []
    p.server.send_message(old, frame_message(b"last words"))
    p.server.end_stream(old, StatusCode.UNAVAILABLE, "server is shutting down")
    out = frames(p.server.data_to_send())
    goaway = next(f for f in out if isinstance(f, GoAwayFrame))
    assert goaway.last_stream_id == old and goaway.error_code == 0
    refused = next(f for f in out if isinstance(f, RstStreamFrame))
    assert refused.stream_id == new and refused.error_code == ErrorCodes.REFUSED_STREAM
    after = out[out.index(goaway):]
    assert any(isinstance(f, DataFrame) and f.stream_id == old for f in after)
    assert any(isinstance(f, HeadersFrame) and "END_STREAM" in f.flags for f in after)
    p.server.close()
    final = frames(p.server.data_to_send())
    assert isinstance(final[-1], GoAwayFrame) and final[-1].last_stream_id == old
