"""The sans-IO HTTP/2 client core against h2's own server-side state machine (no event loop)."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from h2.errors import ErrorCodes

from trio_typha.h2client import core
from trio_typha.h2client.core import (
    ConnectionEnded,
    ConnectionUnusable,
    DataReceived,
    H2ClientCore,
    Keepalive,
    PingAcked,
    ResponseReceived,
    StreamEnded,
    StreamGone,
    StreamReset,
    TrailersReceived,
)


class Pair:
    """An H2ClientCore and an h2 server wired back to back; bytes move only when asked."""

    def __init__(self, *, server_settings: dict[int, int] | None = None, **core_args) -> None:
        self.now = 0.0
        self.client = H2ClientCore(authority="etcd.test", **core_args)
        self.server = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.server.initiate_connection()
        if server_settings:
            self.server.update_settings(server_settings)
        self.events: list[core.Event] = []
        self.server_events: list[h2.events.Event] = []
        self.exchange()

    def to_server(self) -> bool:
        data = self.client.data_to_send()
        if data:
            self.server_events += self.server.receive_data(data)
        return bool(data)

    def to_client(self) -> bool:
        data = self.server.data_to_send()
        if data:
            self.events += self.client.receive(data, self.now)
        return bool(data)

    def exchange(self) -> None:
        while self.to_server() | self.to_client():
            pass

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def server_of(self, kind: type) -> list:
        return [e for e in self.server_events if isinstance(e, kind)]


def test_request_response_with_trailers() -> None:
    p = Pair()
    sid = p.client.open_stream(b"POST", b"/etcdserverpb.KV/Range", [(b"te", b"trailers")])
    p.client.send_data(sid, b"hello", end_stream=True)
    p.exchange()
    (req,) = p.server_of(h2.events.RequestReceived)
    head = dict(req.headers)
    assert head[b":authority"] == b"etcd.test" and head[b":path"] == b"/etcdserverpb.KV/Range"
    assert b"".join(e.data for e in p.server_of(h2.events.DataReceived)) == b"hello"
    assert p.server_of(h2.events.StreamEnded)
    p.server.send_headers(sid, [(b":status", b"200")])
    p.server.send_data(sid, b"world")
    p.server.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
    p.exchange()
    assert [type(e) for e in p.events] == [ResponseReceived, DataReceived, TrailersReceived,
                                           StreamEnded]
    assert p.of(DataReceived)[0].data == b"world"
    assert p.of(TrailersReceived)[0].headers == [(b"grpc-status", b"0")]
    assert not p.client.has_stream(sid) and p.client.open_streams == 0


def test_inbound_window_returns_only_on_consumption() -> None:
    p = Pair()
    sid = p.client.open_stream(b"POST", b"/w")
    p.exchange()
    p.server.send_headers(sid, [(b":status", b"200")])
    before = p.server.local_flow_control_window(sid)
    sent = 3 << 20  # past half the window, where h2 sends the WINDOW_UPDATE it owes
    for _ in range(sent // 16384):
        p.server.send_data(sid, b"x" * 16384)
        p.exchange()
    assert sum(len(e.data) for e in p.of(DataReceived)) == sent
    assert p.server.local_flow_control_window(sid) == before - sent  # nothing given back
    p.client.consumed(sid, sent)
    p.exchange()
    assert p.server.local_flow_control_window(sid) == before


def test_outbound_data_waits_for_the_servers_window() -> None:
    p = Pair(server_settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10})
    sid = p.client.open_stream(b"POST", b"/w")
    p.client.send_data(sid, b"a" * 25)
    p.exchange()
    got = b"".join(e.data for e in p.server_of(h2.events.DataReceived))
    assert got == b"a" * 10
    assert not p.client.wants_write  # the window is shut: nothing to do until credit
    p.server.acknowledge_received_data(10, sid)
    p.server.increment_flow_control_window(100, sid)
    p.exchange()
    got = b"".join(e.data for e in p.server_of(h2.events.DataReceived))
    assert got == b"a" * 25


def test_keepalive_ping_after_read_idle_and_ack_deadline() -> None:
    p = Pair(keepalive=Keepalive(idle=30.0, timeout=10.0))
    sid = p.client.open_stream(b"POST", b"/watch")
    p.exchange()
    assert p.client.next_timer() == 30.0
    assert p.client.tick(29.9) == [] and not p.client.wants_write
    p.now = 20.0  # a frame read at 20 s moves the idle deadline
    p.server.ping(b"srvping!")
    p.exchange()
    assert p.client.next_timer() == 50.0
    p.client.tick(50.0)
    assert p.client.pings_sent == 1
    p.to_server()
    assert p.server_of(h2.events.PingReceived)
    assert p.client.next_timer() == 60.0  # the ack is due timeout after the PING
    assert p.client.tick(59.9) == []
    ended = p.client.tick(60.0)
    assert [type(e) for e in ended] == [StreamReset, ConnectionEnded]
    assert ended[0].stream_id == sid and not ended[0].refused
    assert "no HTTP/2 PING ack within 10 s" in ended[1].reason
    assert p.client.closed and p.client.next_timer() is None


def test_acked_ping_keeps_the_connection() -> None:
    p = Pair(keepalive=Keepalive(idle=30.0, timeout=10.0))
    p.client.tick(30.0)
    p.to_server()  # h2 answers the PING itself
    p.now = 33.0
    p.to_client()
    (ack,) = p.of(PingAcked)
    assert ack.rtt == pytest.approx(3.0)
    assert p.client.next_timer() == 63.0
    assert p.client.tick(42.0) == [] and not p.client.closed


def test_for_deadline_gives_up_at_three_quarters_of_it() -> None:
    ka = Keepalive.for_deadline(40.0)
    assert (ka.idle, ka.timeout) == (20.0, 10.0)


def test_goaway_refuses_streams_the_server_never_saw() -> None:
    p = Pair()
    first = p.client.open_stream(b"POST", b"/a")
    p.exchange()
    second = p.client.open_stream(b"POST", b"/b")  # not yet delivered when GOAWAY leaves
    p.server.close_connection(ErrorCodes.NO_ERROR, b"shutting down", last_stream_id=first)
    p.to_client()
    resets = {e.stream_id: e for e in p.of(StreamReset)}
    assert resets[second].refused and not resets[first].refused
    (end,) = p.of(ConnectionEnded)
    assert end.by_peer and "GOAWAY (NO_ERROR): shutting down" in end.reason
    with pytest.raises(ConnectionUnusable, match="GOAWAY"):
        p.client.open_stream(b"POST", b"/c")


def test_server_concurrency_limit() -> None:
    p = Pair(server_settings={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1})
    sid = p.client.open_stream(b"POST", b"/a", end_stream=True)
    assert not p.client.can_open
    with pytest.raises(ConnectionUnusable, match="limit of 1"):
        p.client.open_stream(b"POST", b"/b")
    p.exchange()
    p.server.send_headers(sid, [(b":status", b"200")], end_stream=True)
    p.exchange()
    assert p.client.can_open


def test_server_ending_first_resets_our_half() -> None:
    p = Pair()
    sid = p.client.open_stream(b"POST", b"/watch")
    p.exchange()
    p.server.send_headers(sid, [(b":status", b"200"), (b"grpc-status", b"14")],
                          end_stream=True)
    p.exchange()
    assert p.of(StreamEnded)
    (reset,) = p.server_of(h2.events.StreamReset)
    assert reset.stream_id == sid and reset.error_code == ErrorCodes.NO_ERROR
    with pytest.raises(StreamGone):
        p.client.send_data(sid, b"late")


def test_peer_reset_and_eof() -> None:
    p = Pair()
    sid = p.client.open_stream(b"POST", b"/a")
    p.exchange()
    p.server.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
    p.exchange()
    (reset,) = p.of(StreamReset)
    assert reset.refused and reset.by_peer
    other = p.client.open_stream(b"POST", b"/b")
    ended = p.client.receive(b"", 1.0)
    assert [type(e) for e in ended] == [StreamReset, ConnectionEnded]
    assert ended[0].stream_id == other
    assert p.client.receive(b"more", 2.0) == []


def test_protocol_error_from_server_ends_connection() -> None:
    p = Pair()
    p.client.open_stream(b"POST", b"/a")
    p.exchange()
    garbage = b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00"  # WINDOW_UPDATE of 0
    ended = p.client.receive(garbage, 1.0)
    assert isinstance(ended[-1], ConnectionEnded) and "protocol error" in ended[-1].reason
    assert p.client.data_to_send()  # the GOAWAY h2 queued
