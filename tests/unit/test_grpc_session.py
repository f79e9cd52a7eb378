"""The Sync stream's protocol rules (pure) and its encode-once messages."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from trio_typha.cache.core import SnapshotCache
from trio_typha.grpcwire.framing import MessageDecoder
from trio_typha.grpcwire.status import GrpcError, StatusCode
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType
from trio_typha.protocols.grpc import encode_once
from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.protocols.grpc.session import Phase, SyncSession
from trio_typha.sessions.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]


def req(**kwargs) -> bytes:
    return pb.SyncRequest(**kwargs).SerializeToString()


def start(syncer_type: str = "felix", **kwargs) -> bytes:
    return req(start=pb.SyncRequestStart(syncer_type=syncer_type, **kwargs))


def decode(framed: bytes) -> pb.SyncResponse:
    (payload,) = MessageDecoder(len(framed)).feed(framed)
    return pb.SyncResponse.FromString(payload)


def live_session(settings: ServerSettings | None = None, now: float = 100.0) -> SyncSession:
    s = SyncSession(settings or ServerSettings(), rng=random.Random(1))
    s.on_request(start(), now)
    s.snapshot_sent(SyncStatus.IN_SYNC, now)
    return s


# --- start and acks -----------------------------------------------------------------------

def test_start_is_parsed_and_empty_syncer_type_is_felix():
    s = SyncSession(ServerSettings())
    got = s.on_request(start("", hostname="node-1", info="i", version="v3.32",
                             client_conn_id=9), 0.0)
    assert (got.syncer_type, got.hostname, got.info, got.version, got.client_conn_id) == (
        "felix", "node-1", "i", "v3.32", 9)
    assert s.phase is Phase.SNAPSHOT


@pytest.mark.parametrize("syncer_type", ["felix", "bgp", "tunnel-ip-allocation", "node-status"])
def test_known_syncer_types(syncer_type):
    assert SyncSession(ServerSettings()).on_request(start(syncer_type), 0).syncer_type == syncer_type


@pytest.mark.parametrize(("payload", "fragment"), [
    (start("Felix"), "unknown syncer_type"),
    (req(ack=pb.Ack(ping_id=1)), "first request must be 'start'"),
    (req(), "first request must be 'start'"),
    (b"\xff\xff\xff", "not a valid SyncRequest"),
])
def test_bad_first_messages(payload, fragment):
    with pytest.raises(GrpcError) as info:
        SyncSession(ServerSettings()).on_request(payload, 0)
    assert info.value.code is StatusCode.INVALID_ARGUMENT
    assert fragment in info.value.message


def test_second_start_and_unknown_acks_are_rejected():
    s = live_session()
    for payload, fragment in [(start(), "twice"), (req(ack=pb.Ack(ping_id=5)), "unknown ping"),
                              (req(), "empty")]:
        with pytest.raises(GrpcError) as info:
            s.on_request(payload, 101)
        assert info.value.code is StatusCode.INVALID_ARGUMENT
        assert fragment in info.value.message


# --- pings and pongs ----------------------------------------------------------------------

def test_pings_are_spaced_by_interval_plus_up_to_ten_percent():
    s = live_session(ServerSettings(ping_interval=10), now=0)
    times = []
    now = 0.0
    for _ in range(200):
        now = s.next_ping_at
        times.append(now)
        s.ping(now, 0)
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    assert all(10 <= g <= 11 for g in gaps)
    assert max(gaps) - min(gaps) > 0.5  # really jittered


def test_ping_message_and_ack_round_trip():
    s = live_session(now=0)
    ping = decode(s.ping(10.0, 1234)).ping
    assert (ping.id, ping.timestamp_unix_nanos) == (1, 1234)
    assert s.on_request(req(ack=pb.Ack(ping_id=1, ping_timestamp_unix_nanos=1234)), 10.5) is None
    assert s.last_rtt == pytest.approx(0.5)
    assert s.pong_deadline == 10.5 + 60
    with pytest.raises(GrpcError):  # each ping is answered once
        s.on_request(req(ack=pb.Ack(ping_id=1)), 11)


def test_an_ack_also_answers_earlier_pings():
    s = live_session(now=0)
    s.ping(10, 0)
    s.ping(20, 0)
    s.on_request(req(ack=pb.Ack(ping_id=2)), 21)
    with pytest.raises(GrpcError):
        s.on_request(req(ack=pb.Ack(ping_id=1)), 22)


def test_pong_timeout():
    s = live_session(ServerSettings(ping_interval=10, pong_timeout=60), now=100)
    s.check_pong(159.9)
    with pytest.raises(GrpcError) as info:
        s.check_pong(160)
    assert info.value.code is StatusCode.DEADLINE_EXCEEDED
    assert "pong timeout 60s" in info.value.message


def test_pong_timeout_is_redefaulted_like_typha():
    assert live_session(ServerSettings(ping_interval=10, pong_timeout=20)).settings.pong_timeout == 60
    assert SyncSession(ServerSettings()).pong_deadline == float("inf")  # not before LIVE


# --- updates, status, fall-behind ---------------------------------------------------------

def cache_with(n: int) -> SnapshotCache:
    cache = SnapshotCache(now=0)
    cache.apply([SerializedUpdate(f"/k/{i:03d}", b"v%d" % i) for i in reversed(range(n))], 0)
    cache.set_status(SyncStatus.IN_SYNC, 0)
    return cache


def test_updates_then_a_status_change_per_breadcrumb():
    cache = cache_with(1)
    s = live_session()
    (crumb,) = cache.apply([SerializedUpdate("/k/000", b"new", update_type=UpdateType.UPDATED),
                            SerializedUpdate("/k/gone", None, update_type=UpdateType.DELETED)], 1)
    (only,) = s.messages_for(crumb)
    kvs = decode(only).update.kvs
    assert [(kv.key, kv.value, kv.update_type, kv.deleted) for kv in kvs] == [
        ("/k/000", b"new", pb.UPDATE_TYPE_UPDATED, False),
        ("/k/gone", b"", pb.UPDATE_TYPE_DELETED, True)]
    status_crumb = cache.set_status(SyncStatus.RESYNC_IN_PROGRESS, 2)
    (status,) = s.messages_for(status_crumb)
    assert decode(status).status.sync_status == pb.SYNC_STATUS_RESYNC_IN_PROGRESS
    assert s.messages_for(status_crumb) == []  # already told


def test_fall_behind_is_tolerated_during_grace_then_dropped():
    settings = ServerSettings(max_fall_behind=300, new_client_fall_behind_grace=300)
    cache = SnapshotCache(now=0)
    old = cache.apply([SerializedUpdate("/a", b"1")], 0)[0]
    newest = cache.apply([SerializedUpdate("/a", b"2")], 400)[0]
    s = live_session(settings, now=0)
    assert s.check_fall_behind(newest, newest, 400) is False
    assert s.check_fall_behind(old, newest, 250) is True  # first use of the grace: log it
    assert s.check_fall_behind(old, newest, 300) is False
    with pytest.raises(GrpcError) as info:
        s.check_fall_behind(old, newest, 301)
    assert info.value.code is StatusCode.UNAVAILABLE
    assert "fell behind by 400.0s" in info.value.message


# --- encode once --------------------------------------------------------------------------

def test_snapshot_batches_are_sorted_new_and_built_once():
    cache = cache_with(250)
    crumb = cache.snapshot_point(0)
    batches = encode_once.snapshot_messages(crumb, 100)
    assert encode_once.snapshot_messages(crumb, 100) is batches  # memoized on the breadcrumb
    decoded = [decode(b).update.kvs for b in batches]
    assert [len(kvs) for kvs in decoded] == [100, 100, 50]
    keys = [kv.key for kvs in decoded for kv in kvs]
    assert keys == sorted(keys) and len(keys) == 250
    assert {kv.update_type for kvs in decoded for kv in kvs} == {pb.UPDATE_TYPE_NEW}
    finished = encode_once.finished_message(crumb)
    assert encode_once.finished_message(crumb) is finished
    assert decode(finished).finished.snapshot_size == 250
    assert encode_once.snapshot_messages(cache_with(0).snapshot_point(0), 100) == ()


def test_update_message_is_built_once_per_breadcrumb():
    cache = cache_with(1)
    (crumb,) = cache.apply([SerializedUpdate("/k/000", b"x")], 1)
    first = encode_once.update_message(crumb)
    assert encode_once.update_message(crumb) is first
    # Two sessions following the same breadcrumb send the very same bytes object.
    a, b = live_session(), live_session()
    assert a.messages_for(crumb)[0] is b.messages_for(crumb)[0] is first


def test_header_message():
    h = decode(encode_once.header_message(conn_id=42, server_version="v", syncer_type="bgp",
                                       status=SyncStatus.IN_SYNC)).header
    assert (h.server_conn_id, h.server_version, h.syncer_type, h.sync_status) == (
        42, "v", "bgp", pb.SYNC_STATUS_IN_SYNC)


def test_proto_enums_match_the_model():
    assert {s.name: int(s) for s in SyncStatus} == {
        n.removeprefix("SYNC_STATUS_"): v for n, v in pb.SyncStatus.items()}
    assert {u.name: int(u) for u in UpdateType} == {
        n.removeprefix("UPDATE_TYPE_"): v for n, v in pb.UpdateType.items()}
    assert pb.DESCRIPTOR.services_by_name["Sync"].full_name == encode_once.SERVICE


def test_checked_in_generated_code_matches_the_proto():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
