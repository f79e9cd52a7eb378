"""The sans-IO server session: handshake order, rejections, timers, streaming output."""

from __future__ import annotations

import dataclasses
import random

import pytest

from trio_typha.cache.core import SnapshotCache
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.gob import encode_once, snappy
from trio_typha.protocols.gob.codec import NEED_DATA, Decoder, Encoder
from trio_typha.protocols.gob.gotime import GoTime
from trio_typha.protocols.gob.messages import (
    ENVELOPE,
    REGISTRY,
    Envelope,
    MsgACK,
    MsgClientHello,
    MsgDecoderRestart,
    MsgKVs,
    MsgPing,
    MsgPong,
    MsgServerHello,
    MsgSyncStatus,
)
from trio_typha.protocols.gob.session import (
    AwaitTurn,
    Close,
    GraceUsed,
    Phase,
    Send,
    SendSnapshot,
    ServerSession,
    StartStreaming,
    collect_batch,
)
from trio_typha.sessions.settings import ServerSettings

SETTINGS = ServerSettings(ping_interval=10, pong_timeout=60, handshake_timeout=10,
                          max_fall_behind=300, new_client_fall_behind_grace=300)
MODERN = MsgClientHello(hostname="node1", syncer_type="felix", supports_decoder_restart=True,
                        supported_compression_algorithms=("snappy",),
                        supports_modern_policy_keys=True, client_conn_id=7)
LEGACY = MsgClientHello(hostname="old", syncer_type="bgp", supports_modern_policy_keys=True)


def new_session(now: float = 0.0, **settings: float) -> ServerSession:
    return ServerSession(settings=dataclasses.replace(SETTINGS, **settings),
                         syncer_types=("felix", "bgp", "tunnel-ip-allocation", "node-status"),
                         server_version="v-test", conn_id=0xABC, now=now,
                         rng=random.Random(1))


class Client:
    """The client's gob stream (one Go-style encoder for the connection's life)."""

    def __init__(self) -> None:
        self.encoder = Encoder(REGISTRY)

    def __call__(self, msg: object) -> bytes:
        return self.encoder.encode(Envelope(msg), ENVELOPE)


def decode(data: bytes) -> list[object]:
    dec = Decoder(REGISTRY, ENVELOPE, max_message_size=1 << 30)
    dec.feed(data)
    out = []
    while (v := dec.next_value()) is not NEED_DATA:
        out.append(v.message)
    assert dec.buffered == 0
    return out


def decode_snappy(data: bytes) -> list[object]:
    r = snappy.FrameReader()
    r.feed(data)
    plain = b""
    while (chunk := r.next_chunk()) is not None:
        plain += chunk
    return decode(plain)


def admit(s: ServerSession, hello_bytes: bytes, now: float) -> list[object]:
    """The hello, then its turn at once: the actions after the turn."""
    assert s.receive_data(hello_bytes, now)[1:] == [AwaitTurn()]
    return list(s.turn_started(now))


def test_modern_handshake_in_order() -> None:
    s, c = new_session(), Client()
    send, turn = s.receive_data(c(MODERN), now=1.0)
    assert isinstance(send, Send) and turn == AwaitTurn() and s.phase is Phase.QUEUED
    assert decode(send.data) == [MsgServerHello("v-test", "felix", True, 0xABC)]
    [restart] = s.turn_started(now=1.0)
    assert isinstance(restart, Send) and s.phase is Phase.AWAIT_ACK1
    assert decode(encode_once.STREAM_PREFIX + restart.data) == [
        MsgDecoderRestart("enable compression: snappy;send binary snapshot", "snappy")]
    assert s.deadline == 1.0 + SETTINGS.pong_timeout
    assert s.receive_data(c(MsgACK()), now=2.0) == [SendSnapshot(compressed=True)]
    assert s.deadline == float("inf")
    assert s.snapshot_sent(now=3.0) == [] and s.phase is Phase.AWAIT_ACK2
    assert s.deadline == 3.0 + SETTINGS.pong_timeout
    actions = s.receive_data(c(MsgACK()), now=4.0)
    assert actions == [Send(encode_once.SNAPPY_STREAM_START), StartStreaming()]
    assert decode_snappy(actions[0].data) == []  # identifier and definitions only
    assert s.phase is Phase.STREAMING and s.compressed
    assert 14.0 <= s.next_ping_at <= 15.0


def test_ack2_may_arrive_before_the_snapshot_write_is_reported() -> None:
    s, c = new_session(), Client()
    admit(s, c(MODERN), 0)
    s.receive_data(c(MsgACK()), 0)
    assert s.receive_data(c(MsgACK()), 1) == []
    assert s.snapshot_sent(2) == [Send(encode_once.SNAPPY_STREAM_START), StartStreaming()]


def test_a_third_ack_is_refused() -> None:
    s, c = new_session(), Client()
    admit(s, c(MODERN), 0)
    s.receive_data(c(MsgACK()), 0)
    s.receive_data(c(MsgACK()), 0)
    [close] = s.receive_data(c(MsgACK()), 0)
    assert isinstance(close, Close) and "MsgACK" in close.reason


def test_legacy_handshake_streams_plainly() -> None:
    s, c = new_session(), Client()
    send, turn = s.receive_data(c(LEGACY), now=0)
    assert decode(send.data) == [MsgServerHello("v-test", "bgp", True, 0xABC)]
    assert turn == AwaitTurn()
    assert s.turn_started(now=0) == [SendSnapshot(compressed=False)]
    assert s.deadline == float("inf")
    assert s.snapshot_sent(now=5) == [StartStreaming()]
    assert not s.compressed and s.deadline == 5 + SETTINGS.pong_timeout


@pytest.mark.parametrize("hello", [
    MsgClientHello(supports_decoder_restart=True, supported_compression_algorithms=("zstd",),
                   supports_modern_policy_keys=True),
    MsgClientHello(supports_decoder_restart=True, supports_modern_policy_keys=True),
    MsgClientHello(supported_compression_algorithms=("snappy",),
                   supports_modern_policy_keys=True),
])
def test_no_restart_without_snappy_and_restart_support(hello: MsgClientHello) -> None:
    s = new_session()
    send, _ = s.receive_data(Client()(hello), now=0)
    assert s.turn_started(now=0) == [SendSnapshot(compressed=False)]
    assert decode(send.data) == [MsgServerHello("v-test", "felix", True, 0xABC)]


@pytest.mark.parametrize(("first", "reason"), [
    (MsgSyncStatus(SyncStatus.IN_SYNC), "first message was MsgSyncStatus"),
    (MsgACK(), "first message was MsgACK"),
    (None, "first message was nil"),
    (MsgClientHello(syncer_type="garbage", supports_modern_policy_keys=True), "garbage"),
    (MsgClientHello(syncer_type="garbage"), "garbage"),  # the syncer type is checked first
    (MsgClientHello(syncer_type="felix", supports_decoder_restart=True,
                    supported_compression_algorithms=("snappy",)), "modern policy keys"),
])
def test_rejected_hello_gets_no_reply(first: object, reason: str) -> None:
    s = new_session()
    [close] = s.receive_data(Client()(first), now=0)
    assert isinstance(close, Close) and reason in close.reason
    assert s.phase is Phase.CLOSED
    assert s.receive_data(b"more", now=1) == []


def test_empty_syncer_type_means_felix() -> None:
    [send, _] = new_session().receive_data(Client()(MsgClientHello(
        supports_modern_policy_keys=True)), now=0)
    assert decode(send.data)[0].syncer_type == "felix"


def test_hello_fed_one_byte_at_a_time() -> None:
    s = new_session()
    data = Client()(MODERN)
    actions = []
    for i in range(len(data)):
        actions += s.receive_data(data[i:i + 1], now=0)
    assert [type(a) for a in actions] == [Send, AwaitTurn]


def test_garbage_and_oversized_messages_close() -> None:
    s = new_session()
    [close] = s.receive_data(b"\x05\x7d\x02\x01\x00\x00", now=0)
    assert "bad data" in close.reason
    s = new_session(max_inbound_message=1000)
    [close] = s.receive_data(b"\xfe\x10\x00", now=0)
    assert "exceeds" in close.reason


@pytest.mark.parametrize(("steps", "phase_reason"), [
    (0, "handshake timeout"),
    (1, "while waiting to be sent the snapshot"),
    (2, "no MsgACK"),
    (4, "no MsgACK"),
    (5, "no MsgPong"),
])
def test_timers_per_phase(steps: int, phase_reason: str) -> None:
    s, c = new_session(), Client()
    script = [lambda: s.receive_data(c(MODERN), 0), lambda: s.turn_started(0),
              lambda: s.receive_data(c(MsgACK()), 0),
              lambda: s.snapshot_sent(0), lambda: s.receive_data(c(MsgACK()), 0)]
    for step in script[:steps]:
        step()
    deadline = s.deadline
    assert s.check_timers(deadline - 0.001) == []
    [close] = s.check_timers(deadline)
    assert phase_reason in close.reason and s.phase is Phase.CLOSED


def streaming_session(compressed: bool = True) -> tuple[ServerSession, Client]:
    s, c = new_session(), Client()
    admit(s, c(MODERN if compressed else LEGACY), 0)
    if compressed:
        s.receive_data(c(MsgACK()), 0)
        s.snapshot_sent(0)
        s.receive_data(c(MsgACK()), 0)
    else:
        s.snapshot_sent(0)
    assert s.phase is Phase.STREAMING
    return s, c


def test_pongs_keep_the_connection_and_measure_round_trips() -> None:
    s, c = streaming_session()
    assert not s.ping_due(s.next_ping_at - 0.01) and s.ping_due(s.next_ping_at)
    now = s.next_ping_at
    stamp = GoTime.from_unix_ns(1_700_000_000 * 10**9, offset=0)
    s.ping(now, stamp)
    assert now + 10 <= s.next_ping_at <= now + 11
    assert s.receive_data(c(MsgPong(ping_timestamp=stamp)), now + 0.25) == []
    assert s.last_rtt == pytest.approx(0.25) and s.pongs == 1
    assert s.deadline == now + 0.25 + SETTINGS.pong_timeout


def test_ping_bytes_on_each_stream() -> None:
    stamp = GoTime.from_unix_ns(1_700_000_000 * 10**9, offset=0)
    plain, _ = streaming_session(compressed=False)
    assert decode(encode_once.STREAM_PREFIX + plain.ping(20, stamp)) == [MsgPing(stamp)]
    packed, _ = streaming_session(compressed=True)
    assert decode_snappy(encode_once.SNAPPY_STREAM_START + packed.ping(20, stamp)) == [MsgPing(stamp)]


@pytest.mark.parametrize("msg", [MsgACK(), MODERN, None, MsgSyncStatus()])
def test_only_pongs_while_streaming(msg: object) -> None:
    s, c = streaming_session()
    [close] = s.receive_data(c(msg), 1)
    assert "expected MsgPong" in close.reason


def test_legacy_pong_during_snapshot_is_fine_but_starts_no_timer() -> None:
    s, c = new_session(), Client()
    admit(s, c(LEGACY), 0)
    assert s.receive_data(c(MsgPong()), 1) == []
    assert s.deadline == float("inf")


def _crumbs() -> tuple[SnapshotCache, list]:
    cache = SnapshotCache(max_batch_size=2, now=0.0)
    crumbs = cache.apply([SerializedUpdate(f"/k{i}", b"v", str(i)) for i in range(3)], now=1.0)
    crumbs.append(cache.set_status(SyncStatus.IN_SYNC, now=2.0))
    crumbs += cache.apply([SerializedUpdate("/k0", None, "9", update_type=UpdateType.DELETED)],
                          now=3.0)
    return cache, crumbs


@pytest.mark.parametrize("compressed", [False, True])
def test_updates_use_shared_encodings_and_send_status_changes_once(compressed: bool) -> None:
    _, crumbs = _crumbs()
    s1, _ = streaming_session(compressed)
    s2, _ = streaming_session(compressed)
    first = s1.updates(crumbs[:3])
    assert s2.updates(crumbs[:3]) == first
    per_crumb = encode_once.deltas_chunks if compressed else encode_once.deltas
    assert per_crumb(crumbs[0]) is per_crumb(crumbs[0])  # memoized on the breadcrumb
    rest = s1.updates(crumbs[3:])
    start = encode_once.SNAPPY_STREAM_START if compressed else encode_once.STREAM_PREFIX
    messages = (decode_snappy if compressed else decode)(start + first + rest)
    assert messages == [
        MsgKVs(crumbs[0].updates), MsgKVs(crumbs[1].updates),
        MsgSyncStatus(SyncStatus.IN_SYNC), MsgKVs(crumbs[3].updates)]
    assert s1.status(SyncStatus.IN_SYNC) == b""
    assert s1.status(SyncStatus.RESYNC_IN_PROGRESS) != b""


def test_compressed_updates_are_whole_chunks_per_breadcrumb() -> None:
    _, crumbs = _crumbs()
    s, _ = streaming_session()
    r = snappy.FrameReader()
    r.feed(snappy.STREAM_IDENTIFIER)
    r.next_chunk()
    r.feed(s.updates(crumbs[:1]))
    data = b""
    while (chunk := r.next_chunk()) is not None:
        data += chunk
    # nothing left over: the message is readable as soon as these bytes arrive
    assert r.unconsumed() == b"" and data == encode_once.deltas(crumbs[0])


def test_fall_behind_grace_then_drop() -> None:
    s, _ = streaming_session()
    assert s.check_lag(age=299, now=10) == []
    assert s.check_lag(age=301, now=10) == [GraceUsed(301)]
    assert s.check_lag(age=500, now=200) == []  # grace used only once, logged once
    [close] = s.check_lag(age=301, now=301)
    assert "fell behind" in close.reason


def test_collect_batch() -> None:
    cache = SnapshotCache(max_batch_size=10, now=0.0)
    crumbs = [cache.apply([SerializedUpdate(f"/k{i}/{j}", b"v") for j in range(4)], now=float(i))[0]
              for i in range(10)]
    newest = crumbs[-1].timestamp
    # a young breadcrumb goes alone
    assert collect_batch(crumbs[-1], newest, min_batching_age=0.5, max_updates=100) == crumbs[-1:]
    # an old one takes the following ones until the size limit...
    assert collect_batch(crumbs[0], newest, min_batching_age=0.5, max_updates=10) == crumbs[:3]
    # ...or until a young one
    assert collect_batch(crumbs[5], newest, min_batching_age=0.5, max_updates=100) == crumbs[5:]


def test_a_queued_session_is_pinged_on_the_plain_stream_and_takes_pongs() -> None:
    """Waiting for its turn, a session pings plainly (the client's decoder has not been
    restarted yet) and its pong deadline applies; a pong may still come after the restart,
    before ACK#1."""
    s, c = new_session(), Client()
    s.receive_data(c(MODERN), 0)
    assert s.phase is Phase.QUEUED and 10 <= s.next_ping_at <= 11
    assert s.deadline == SETTINGS.pong_timeout
    now = s.next_ping_at
    assert s.ping_due(now)
    stamp = GoTime.from_unix_ns(1_700_000_000 * 10**9, offset=0)
    assert decode(encode_once.STREAM_PREFIX + s.ping(now, stamp)) == [MsgPing(stamp)]
    assert s.receive_data(c(MsgPong(ping_timestamp=stamp)), now + 1) == []
    assert s.deadline == now + 1 + SETTINGS.pong_timeout and s.pongs == 1
    later = GoTime.from_unix_ns(1_700_000_020 * 10**9, offset=0)
    s.ping(now + 20, later)
    [restart] = s.turn_started(now + 20.5)
    assert isinstance(restart, Send) and s.phase is Phase.AWAIT_ACK1
    assert not s.ping_due(now + 1000)
    assert s.receive_data(c(MsgPong(ping_timestamp=later)), now + 21) == []
    assert s.receive_data(c(MsgACK()), now + 22) == [SendSnapshot(compressed=True)]


@pytest.mark.parametrize("msg", [MsgACK(), MODERN, None])
def test_only_pongs_while_queued(msg: object) -> None:
    s, c = new_session(), Client()
    s.receive_data(c(MODERN), 0)
    [close] = s.receive_data(c(msg), 1)
    assert "expected MsgPong" in close.reason and s.phase is Phase.CLOSED


def test_a_turn_only_starts_a_queued_session() -> None:
    s, c = new_session(), Client()
    with pytest.raises(RuntimeError):
        s.turn_started(0)
    admit(s, c(MODERN), 0)
    with pytest.raises(RuntimeError):
        s.turn_started(0)
