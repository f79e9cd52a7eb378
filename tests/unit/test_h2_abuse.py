"""HTTP/2 flood budgets in the sans-IO core, fed raw frames a hostile peer would send."""

from __future__ import annotations

import h2.events
import hpack
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from test_grpc_h2conn import REQUEST, Pair, frames

from trio_typha.grpcwire.framing import frame_message
from trio_typha.grpcwire.status import StatusCode
from trio_typha.observe.throttle import LogThrottle
from trio_typha.protocols.grpc.abuse import DEFAULT_BUDGETS, Flood, FloodGuard
from trio_typha.protocols.grpc.h2conn import (
    MAX_HEADER_LIST_SIZE,
    ConnectionEnded,
    ConnectionState,
    H2Core,
    RequestReceived,
    StreamReset,
)
from trio_typha.sessions.budgets import Account, SharedBudgets

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class RawPeer:
    """Writes frames by hand (hyperframe + hpack), as an attacker would."""

    def __init__(self, shared: Account | None = None) -> None:
        self.core = H2Core(max_concurrent_streams=16, max_inbound_message=1 << 20,
                           shared_budget=shared)
        self.encoder = hpack.Encoder()
        self.events: list = []
        self.out = b""
        self.next_sid = 1
        self.send(PREFACE + SettingsFrame(0).serialize() + _ack())
        self.read()

    def send(self, data: bytes, now: float = 0.0) -> list:
        got = self.core.receive(data, now)
        self.events += got
        return got

    def read(self) -> list[Frame]:
        data = self.core.data_to_send()
        self.out += data
        return frames(data)

    def headers(self, *, end_stream: bool = False) -> tuple[int, bytes]:
        sid = self.next_sid
        self.next_sid += 2
        f = HeadersFrame(sid)
        f.data = self.encoder.encode(REQUEST)
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return sid, f.serialize()

    def ended(self) -> ConnectionEnded:
        (end,) = [e for e in self.events if isinstance(e, ConnectionEnded)]
        return end


def _ack() -> bytes:
    f = SettingsFrame(0)
    f.flags.add("ACK")
    return f.serialize()


def _rst(sid: int) -> bytes:
    f = RstStreamFrame(sid)
    f.error_code = ErrorCodes.CANCEL
    return f.serialize()


def _goaway_code(fs: list[Frame]) -> int:
    (goaway,) = [f for f in fs if isinstance(f, GoAwayFrame)]
    return goaway.error_code


def _window_update(sid: int, n: int = 1) -> bytes:
    f = WindowUpdateFrame(sid)
    f.window_increment = n
    return f.serialize()


def _priority(sid: int) -> bytes:
    f = PriorityFrame(sid)
    f.depends_on, f.stream_weight = 0, 16
    return f.serialize()


FLOODS = {
    Flood.SETTINGS: lambda peer: SettingsFrame(0).serialize(),
    Flood.PING: lambda peer: PingFrame(0).serialize(),
    Flood.WINDOW_UPDATE: lambda peer: _window_update(0),
    Flood.PRIORITY: lambda peer: _priority(1),
    Flood.EMPTY_DATA: lambda peer: DataFrame(1).serialize(),
}


@pytest.mark.parametrize("kind", list(FLOODS))
def test_control_frame_flood_gets_goaway_enhance_your_calm(kind: Flood) -> None:
    peer = RawPeer()
    sid, head = peer.headers()
    peer.send(head)
    n = DEFAULT_BUDGETS[kind] * 3
    # All in one read, as one 64 KiB receive would bring them.
    peer.send(b"".join(FLOODS[kind](peer) for _ in range(n)), now=5.0)
    end = peer.ended()
    assert end.flood is not None and end.flood.kind is kind
    assert end.flood.count == DEFAULT_BUDGETS[kind] + 1  # stopped at the first one over
    assert kind.value in end.reason
    assert _goaway_code(peer.read()) == ErrorCodes.ENHANCE_YOUR_CALM
    assert peer.core.state is ConnectionState.CLOSED


@pytest.mark.parametrize("kind", list(FLOODS))
def test_the_same_frames_spread_below_the_budget_are_fine(kind: Flood) -> None:
    peer = RawPeer()
    sid, head = peer.headers()
    peer.send(head)
    per_second = DEFAULT_BUDGETS[kind] // 2
    for second in range(5):
        peer.send(b"".join(FLOODS[kind](peer) for _ in range(per_second)), now=second * 1.0)
    assert not [e for e in peer.events if isinstance(e, ConnectionEnded)]
    assert peer.core.state is ConnectionState.OPEN


def test_rapid_reset_is_closed_after_the_budget():
    """CVE-2023-44487: HEADERS + RST_STREAM in a loop."""
    peer = RawPeer()
    burst = b""
    for _ in range(500):
        sid, head = peer.headers()
        burst += head + _rst(sid)
    peer.send(burst, now=1.0)
    end = peer.ended()
    assert end.flood is not None and end.flood.kind is Flood.RAPID_RESET
    assert sum(isinstance(e, RequestReceived) for e in peer.events) <= DEFAULT_BUDGETS[
        Flood.RAPID_RESET] + 1
    assert _goaway_code(peer.read()) == ErrorCodes.ENHANCE_YOUR_CALM


def test_new_stream_flood_is_closed():
    """Requests the server answers at once (here: refused) still cost a task each."""
    peer = RawPeer()
    for _ in range(1000):
        sid, head = peer.headers(end_stream=True)
        peer.send(head, now=1.0)
        if peer.core.state is ConnectionState.CLOSED:
            break
        peer.core.end_stream(sid, StatusCode.UNIMPLEMENTED)
    end = peer.ended()
    assert end.flood is not None and end.flood.kind is Flood.NEW_STREAMS


def test_empty_data_frames_are_not_answered():
    peer = RawPeer()
    sid, head = peer.headers()
    peer.send(head)
    peer.read()
    peer.core.reset(sid)  # closed by us: h2 would answer each DATA frame with RST_STREAM
    peer.read()
    peer.send(b"".join(DataFrame(sid).serialize() for _ in range(50)))
    assert not [f for f in peer.read() if isinstance(f, RstStreamFrame)]
    assert peer.core.state is ConnectionState.OPEN


def test_empty_data_ending_the_stream_is_a_half_close_not_a_flood():
    peer = RawPeer()
    for _ in range(DEFAULT_BUDGETS[Flood.EMPTY_DATA] + 50):
        sid, head = peer.headers()
        end = DataFrame(sid)
        end.flags.add("END_STREAM")
        peer.send(head + end.serialize(), now=0.0)  # all in one second
        peer.core.end_stream(sid, StatusCode.OK)
    assert not [e for e in peer.events if isinstance(e, ConnectionEnded)]


def test_window_updates_as_a_busy_reader_sends_them_are_within_budget():
    """A client reading a big backlog may give the window back for every DATA frame, on
    the stream and on the connection: far more WINDOW_UPDATEs than the base budget."""
    p = Pair()
    sid = p.open()
    p.exchange()
    for _ in range(800):
        p.server.send_message(sid, frame_message(b"x" * 16_000))
    updates = 0
    while p.server.buffered(sid):
        seen = len(p.client_events)
        p.to_client()
        for e in p.client_events[seen:]:
            if isinstance(e, h2.events.DataReceived):
                p.client.increment_flow_control_window(e.flow_controlled_length)
                p.client.increment_flow_control_window(e.flow_controlled_length, stream_id=sid)
                updates += 2
        p.to_server()
    assert updates > DEFAULT_BUDGETS[Flood.WINDOW_UPDATE]
    assert p.server.state is ConnectionState.OPEN


def test_stream_window_overflow_is_a_reset_by_us_and_counts_as_one():
    peer = RawPeer()
    sid, head = peer.headers()
    peer.send(head)
    peer.send(_window_update(sid, (1 << 31) - 1))
    (reset,) = [e for e in peer.events if isinstance(e, StreamReset)]
    assert reset.stream_id == sid and not reset.by_peer
    assert reset.error_code == ErrorCodes.FLOW_CONTROL_ERROR
    assert peer.core.flood_guard.totals[Flood.RAPID_RESET] == 1


def test_header_list_limit_advertised_is_the_one_enforced():
    peer = RawPeer()
    settings = [f for f in frames(peer.out) if isinstance(f, SettingsFrame)][0]
    assert settings.settings[SettingsFrame.MAX_HEADER_LIST_SIZE] == MAX_HEADER_LIST_SIZE
    sid = peer.next_sid
    f = HeadersFrame(sid)
    # Below h2's own 64 KiB default, above what we advertise.
    f.data = peer.encoder.encode(REQUEST + [("x-pad", "p" * (MAX_HEADER_LIST_SIZE + 100))])
    f.flags.add("END_HEADERS")
    peer.send(f.serialize())
    assert not [e for e in peer.events if isinstance(e, RequestReceived)]
    assert peer.core.state is ConnectionState.CLOSED


def test_process_takes_at_most_max_frames_at_a_time():
    peer = RawPeer()
    peer.core.feed(b"".join(PingFrame(0).serialize() for _ in range(50)))
    rounds = 0
    while peer.core.inbound_pending:
        peer.core.process(0.0, max_frames=8)
        rounds += 1
    assert rounds == 7  # 50 frames, 8 per round
    assert len([f for f in peer.read() if isinstance(f, PingFrame)]) == 50


def test_frames_split_across_reads_are_reassembled():
    peer = RawPeer()
    sid, head = peer.headers()
    data = head + DataFrame(sid, data=frame_message(b"hello")).serialize()
    for i in range(len(data)):
        peer.send(data[i:i + 1])
    assert [e for e in peer.events if isinstance(e, RequestReceived)]
    assert peer.core.state is ConnectionState.OPEN


def test_guard_windows_roll():
    guard = FloodGuard()
    limit = DEFAULT_BUDGETS[Flood.PING]
    for t in range(10):
        for _ in range(limit):
            assert guard.count(Flood.PING, float(t)) is None
    report = None
    for _ in range(limit + 1):
        report = guard.count(Flood.PING, 10.5)
    assert report is not None and report.count == limit + 1 and report.limit == limit


def test_log_throttle_lets_one_line_per_interval_and_counts_the_rest():
    throttle = LogThrottle(interval=10.0)
    assert throttle.allow("peer", 0.0) == 0
    assert [throttle.allow("peer", t) for t in (1.0, 2.0, 9.9)] == [None] * 3
    assert throttle.allow("other", 3.0) == 0
    assert throttle.allow("peer", 10.0) == 3


def test_log_throttle_with_a_burst_lets_that_many_through_per_interval():
    throttle = LogThrottle(interval=10.0, burst=3)
    assert [throttle.allow("peer", t) for t in (0.0, 1.0, 2.0)] == [0, 0, 0]
    assert [throttle.allow("peer", t) for t in (3.0, 9.0)] == [None, None]
    assert throttle.allow("peer", 10.0) == 2  # a new interval: the held-back count first
    assert throttle.allow("peer", 11.0) == 0


def test_log_throttle_memory_is_bounded():
    throttle = LogThrottle(interval=10.0, max_keys=100)
    for i in range(10_000):
        throttle.allow(i, float(i) / 1000)
    assert len(throttle._last) <= 100


@pytest.mark.parametrize("length", [16_384 + 1, (1 << 24) - 1])
def test_frame_over_the_advertised_max_size_is_a_connection_error(length: int) -> None:
    # RFC 9113 section 4.2: a frame larger than SETTINGS_MAX_FRAME_SIZE (16,384 until we
    # advertise more) cannot be skipped, so the connection ends with FRAME_SIZE_ERROR at
    # once rather than parsing on out of step with the peer.
    peer = RawPeer()
    sid, opening = peer.headers()
    header = length.to_bytes(3) + bytes([0, 0]) + sid.to_bytes(4)
    peer.send(opening + header + b"\0" * 1000)
    assert [e for e in peer.events if isinstance(e, RequestReceived)]
    end = peer.ended()
    assert not end.by_peer and end.flood is None
    assert "FRAME_SIZE_ERROR" in end.reason and str(length) in end.reason
    assert peer.core.state is ConnectionState.CLOSED
    fs = peer.read()
    assert _goaway_code(fs) == ErrorCodes.FRAME_SIZE_ERROR
    (goaway,) = [f for f in fs if isinstance(f, GoAwayFrame)]
    assert goaway.last_stream_id == sid
    assert str(length).encode() in goaway.additional_data
    # Nothing more is read from it.
    assert peer.send(PingFrame(0).serialize()) == []
    assert peer.read() == []


def test_oversized_frame_split_across_reads_is_refused_on_its_header() -> None:
    peer = RawPeer()
    peer.send(((1 << 24) - 1).to_bytes(3)[:2])
    assert peer.core.state is ConnectionState.OPEN
    peer.send(((1 << 24) - 1).to_bytes(3)[2:] + bytes([0, 0, 0, 0, 0, 1]))
    assert "FRAME_SIZE_ERROR" in peer.ended().reason
    assert _goaway_code(peer.read()) == ErrorCodes.FRAME_SIZE_ERROR


def test_a_frame_of_exactly_the_max_size_is_accepted() -> None:
    peer = RawPeer()
    sid, opening = peer.headers()
    data = DataFrame(sid)
    data.data = frame_message(b"x" * (16_384 - 5))
    peer.send(opening + data.serialize())
    assert not [e for e in peer.events if isinstance(e, ConnectionEnded)]
    assert peer.core.state is ConnectionState.OPEN


def test_rapid_reset_spread_over_connections_is_closed_by_the_shared_budget() -> None:
    # 50 connections from one address, each resetting 40 streams a second (well under its
    # own budget of 100/s): together 2,000/s against the address's 100/s.
    budgets = SharedBudgets()
    peers = [RawPeer(budgets.account("10.9.9.9")) for _ in range(50)]
    for tick in range(40):
        now = tick * 0.025
        for peer in peers:
            if peer.core.state is not ConnectionState.CLOSED:
                sid, opening = peer.headers()
                peer.send(opening + _rst(sid), now)
    closed = [p for p in peers if p.core.state is ConnectionState.CLOSED]
    assert len(closed) >= 45
    for peer in closed:
        end = peer.ended()
        assert end.flood is not None and end.flood.kind is Flood.RAPID_RESET
        assert end.flood.shared is not None and end.flood.count <= 100
        assert _goaway_code(peer.read()) == ErrorCodes.ENHANCE_YOUR_CALM
    # A fresh connection from the same address opening its one stream is untouched.
    good = RawPeer(budgets.account("10.9.9.9"))
    _, opening = good.headers()
    assert [type(e) for e in good.send(opening, 1.0)] == [RequestReceived]


def test_frames_after_the_close_are_dropped_unparsed() -> None:
    peer = RawPeer()
    peer.core.close(ErrorCodes.ENHANCE_YOUR_CALM, "flood")
    sid, opening = peer.headers()
    peer.core.feed(opening * 1000)
    assert not peer.core.inbound_pending and peer.core.process(1.0) == []
    assert len(peer.core._in) == 0
