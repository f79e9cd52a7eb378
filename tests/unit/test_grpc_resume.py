"""How a Sync stream starts when the client kept a copy: the session state machine (pure)
for resume by position, by digest and the snapshot fallback, and the client's side of
the digest exchange feeding it."""

from __future__ import annotations

import random

import pytest

from trio_typha.cache.core import SnapshotCache
from trio_typha.cache.digest import KeyTree, Query, answer, tree_of
from trio_typha.grpcwire.framing import MessageDecoder
from trio_typha.grpcwire.status import GrpcError, StatusCode
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.protocols.grpc import encode_once
from trio_typha.protocols.grpc import typha_pb2 as pb
from trio_typha.protocols.grpc.session import Phase, SyncSession
from trio_typha.sessions.settings import ServerSettings


def kv(key: str, value: str, rev: str = "1") -> SerializedUpdate:
    return SerializedUpdate(key, value.encode(), rev)


def cache_with(n: int, *, history: int = 1000, epoch: int = 77) -> SnapshotCache:
    cache = SnapshotCache(max_batch_size=50, history_updates=history, history_age=60.0,
                          epoch=epoch)
    cache.apply([kv(f"/k{i}", "v") for i in range(n)], 1.0)
    cache.set_status(SyncStatus.IN_SYNC, 1.0)
    return cache


def start_msg(*, epoch: int = 0, seq: int = 0, tree: KeyTree | None = None) -> bytes:
    resume = pb.Resume(epoch=epoch, seq=seq,
                       root=tree.root.to_bytes(8, "big") if tree is not None else b"")
    return pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="felix", resume=resume)
                          ).SerializeToString()


def session(msg: bytes, budget: int = 20000) -> SyncSession:
    s = SyncSession(ServerSettings(resume_digest_budget=budget), rng=random.Random(1))
    s.on_request(msg, 0.0)
    return s


def query_of(framed: bytes) -> Query:
    (payload,) = MessageDecoder(len(framed)).feed(framed)
    q = pb.SyncResponse.FromString(payload).digest_query
    return Query(tuple(q.nodes), tuple(q.leaves), tuple(q.names))


def answer_msg(tree: KeyTree, q: Query) -> bytes:
    a = answer(tree, q)
    return pb.SyncRequest(digest=pb.DigestAnswer(sums=a.sums, leaves=a.leaves, names=a.names)
                          ).SerializeToString()


def run_digest(s: SyncSession, cache: SnapshotCache, tree: KeyTree) -> int:
    """Drive the exchange to its end with an honest client; return the rounds."""
    framed = s.resume(cache)
    rounds = 0
    while framed is not None:
        assert s.phase is Phase.DIGEST
        rounds += 1
        framed = s.on_digest(answer_msg(tree, query_of(framed)))
    assert s.phase is Phase.SNAPSHOT
    return rounds


def test_position_in_history_resumes_there() -> None:
    cache = cache_with(100)
    mark = cache.latest
    cache.apply([kv("/k3", "w")], 2.0)
    s = session(start_msg(epoch=77, seq=mark.seq))
    assert s.resume(cache) is None
    assert s.method == "position" and s.resume_from is mark


def test_wrong_epoch_falls_back_to_a_snapshot() -> None:
    cache = cache_with(100)
    s = session(start_msg(epoch=78, seq=cache.latest.seq))
    assert s.resume(cache) is None
    assert s.method == "snapshot" and s.resume_from is None
    assert s.resume_note == "another epoch"


def test_evicted_history_falls_back_to_digest_then_snapshot() -> None:
    cache = cache_with(100, history=10)
    old = cache.latest.seq
    for i in range(20):  # 20 updates: the history keeps 10
        cache.apply([kv(f"/k{i}", "w")], 2.0 + i)
    assert cache.position(77, old) is None
    assert cache.history_held <= 10 and cache.history_bytes > 0
    s = session(start_msg(epoch=77, seq=old))
    assert s.resume(cache) is None
    assert s.method == "snapshot" and "not in history" in s.resume_note
    # With a tree the same client is repaired by digest instead.
    client = tree_of((f"/k{i}", b"v", "1") for i in range(100))
    s = session(start_msg(epoch=77, seq=old, tree=client))
    run_digest(s, cache, client)
    assert s.method == "digest" and s.repair is not None
    assert s.repair.send == tuple(sorted(f"/k{i}" for i in range(20)))


def test_history_is_bounded_by_age_too() -> None:
    cache = cache_with(10)
    first = cache.latest.seq
    cache.apply([kv("/k1", "a")], 30.0)
    cache.apply([kv("/k1", "b")], 100.0)  # the history keeps 60 s
    assert cache.position(77, first) is None
    assert cache.position(77, cache.latest.seq) is cache.latest


@pytest.mark.parametrize("n", [3, 60, 900, 20000])
def test_digest_repairs_a_mismatch_at_any_level(n: int) -> None:
    cache = cache_with(n)
    client_kvs = {f"/k{i}": b"v" for i in range(n)}
    client_kvs["/k1"] = b"stale"
    client_kvs["/gone"] = b"x"
    del client_kvs["/k2"]
    client = tree_of((k, v, "1") for k, v in client_kvs.items())
    s = session(start_msg(epoch=5, seq=1, tree=client))
    rounds = run_digest(s, cache, client)
    assert 1 <= rounds <= 5
    assert s.method == "digest" and s.repair is not None
    repaired = dict(client_kvs)
    for u in s.repair_updates(cache):
        if u.deleted:
            repaired.pop(u.key, None)
        else:
            repaired[u.key] = u.value or b""
    assert repaired == cache.values_by_key()


def test_equal_content_needs_no_round() -> None:
    cache = cache_with(500)
    s = session(start_msg(tree=cache.tree))
    assert s.resume(cache) is None
    assert s.method == "digest" and s.repair is not None and s.repair.send == ()


def test_over_budget_falls_back_to_a_snapshot() -> None:
    cache = cache_with(3000)
    client = tree_of((f"/k{i}", b"other", "1") for i in range(3000))
    s = session(start_msg(tree=client), budget=200)
    run_digest(s, cache, client)
    assert s.method == "snapshot" and s.resume_from is None
    assert "over budget" in s.resume_note


def test_digest_off_means_a_snapshot() -> None:
    cache = cache_with(10)
    s = session(start_msg(tree=KeyTree()), budget=0)
    assert s.resume(cache) is None and s.method == "snapshot"


def test_lying_answers_end_the_stream() -> None:
    cache = cache_with(2000)
    client = tree_of((f"/k{i}", b"w", "1") for i in range(2000))
    s = session(start_msg(tree=client))
    framed = s.resume(cache)
    assert framed is not None
    bad = pb.SyncRequest(digest=pb.DigestAnswer(sums=b"\0" * 7)).SerializeToString()
    with pytest.raises(GrpcError) as err:
        s.on_digest(bad)
    assert err.value.code is StatusCode.INVALID_ARGUMENT and "bad digest answer" in str(err.value)


def test_an_ack_instead_of_an_answer_ends_the_stream() -> None:
    cache = cache_with(2000)
    s = session(start_msg(tree=KeyTree()))
    assert s.resume(cache) is not None
    with pytest.raises(GrpcError, match="expected a digest answer"):
        s.on_digest(pb.SyncRequest(ack=pb.Ack(ping_id=1)).SerializeToString())


def test_an_unasked_digest_answer_ends_the_stream() -> None:
    s = session(start_msg())
    s.snapshot_sent(SyncStatus.IN_SYNC, 1.0)
    with pytest.raises(GrpcError, match="not asked for"):
        s.on_request(pb.SyncRequest(digest=pb.DigestAnswer()).SerializeToString(), 1.0)


def test_a_malformed_root_is_refused() -> None:
    msg = pb.SyncRequest(start=pb.SyncRequestStart(resume=pb.Resume(root=b"abc")))
    s = SyncSession(ServerSettings())
    with pytest.raises(GrpcError, match="not 8"):
        s.on_request(msg.SerializeToString(), 0.0)


def test_a_client_claiming_every_node_differs_costs_at_most_the_budget() -> None:
    cache = cache_with(20000)
    budget = 3000
    s = session(start_msg(tree=KeyTree()), budget=budget)
    framed = s.resume(cache)
    rng = random.Random(3)
    answers = 0
    while framed is not None:
        q = query_of(framed)
        ans = pb.SyncRequest(digest=pb.DigestAnswer(
            sums=rng.randbytes(128 * len(q.nodes)), leaves=[b""] * len(q.leaves),
            names=[])).SerializeToString()
        framed = s.on_digest(ans)
        answers += 1
    assert s.method == "snapshot" and answers <= 4


def test_old_clients_get_todays_start() -> None:
    cache = cache_with(10)
    s = session(pb.SyncRequest(start=pb.SyncRequestStart(syncer_type="felix"))
                .SerializeToString())
    assert s.resume(cache) is None and s.method == "snapshot" and s.resume_note == ""


def test_update_messages_carry_their_seq_and_stay_shared() -> None:
    cache = cache_with(10)
    (crumb,) = cache.apply([kv("/k1", "new")], 5.0)
    first = encode_once.update_message(crumb)
    assert encode_once.update_message(crumb) is first
    (payload,) = MessageDecoder(len(first)).feed(first)
    assert pb.SyncResponse.FromString(payload).update.seq == crumb.seq


def test_cache_tree_follows_apply_and_append() -> None:
    cache = cache_with(50)
    cache.apply([kv("/k1", "x", "2"), SerializedUpdate("/k2", None)], 3.0)
    cache.append((kv("/new", "y"), SerializedUpdate("/k3", None)), SyncStatus.IN_SYNC, 4.0)
    fresh = tree_of((k, u.value, u.revision) for k, u in cache._kvs.items())
    assert cache.tree.root == fresh.root and len(cache.tree) == len(cache)


def test_a_mirror_numbers_its_breadcrumbs_as_the_primary() -> None:
    primary = cache_with(20)
    mirror = SnapshotCache(epoch=9, history_updates=100, history_age=60.0)
    mirror.append(tuple(primary.latest.snapshot()), SyncStatus.IN_SYNC, 1.0)
    (crumb,) = primary.apply([kv("/k1", "z")], 2.0)
    mine = mirror.append(crumb.updates, crumb.status, 2.0, seq=crumb.seq)
    assert mine.seq == crumb.seq and mirror.position(9, crumb.seq) is mine
    assert mirror.position(9, 1) is not None and mirror.position(9, 1).next is mine
    # A number that cannot follow (not after the newest) ends positions on this mirror.
    mirror.append((kv("/k2", "z"),), SyncStatus.IN_SYNC, 3.0, seq=crumb.seq)
    assert mirror.position(9, mirror.latest.seq) is None


def test_clients_lacking_the_same_keys_share_the_repair_bytes() -> None:
    cache = cache_with(300)
    client = tree_of((f"/k{i}", b"v", "1") for i in range(1, 300))  # lacks /k0
    repairs = []
    for _ in range(3):
        s = session(start_msg(tree=client))
        run_digest(s, cache, client)
        repairs.append(encode_once.repair_messages(cache.latest, s.repair_updates(cache), 50))
    assert repairs[0] and all(r is repairs[0] for r in repairs)
    assert cache.memo_builds[("grpc", "repair", 50)] == 1
