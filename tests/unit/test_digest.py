"""The hash tree and the resume-by-digest exchange (pure core, no event loop)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.cache import digest
from trio_typha.cache.digest import (
    Answer,
    DigestError,
    DigestExchange,
    KeyTree,
    Outcome,
    Query,
    answer,
    tree_of,
)

KVMap = dict[str, tuple[bytes, str]]

keys = st.text(alphabet="abcdefgh/0123", min_size=1, max_size=12)
values = st.tuples(st.binary(min_size=1, max_size=6), st.sampled_from(["1", "2", "3"]))
kv_maps = st.dictionaries(keys, values, max_size=60)


def tree_for(kvs: KVMap) -> KeyTree:
    return tree_of((k, v, r) for k, (v, r) in kvs.items())


def run_exchange(server: KVMap, client: KVMap, budget: int = 10**9
                 ) -> tuple[Outcome, int]:
    """Run the whole exchange; return the outcome and the bytes both sides sent."""
    st_, ct = tree_for(server), tree_for(client)
    ex = DigestExchange(st_, ct.root, budget)
    step = ex.begin()
    wire = 8  # the root hash in the start message
    while isinstance(step, Query):
        wire += 4 * (len(step.nodes) + len(step.leaves)) + 8 * len(step.names)
        ans = answer(ct, step)
        wire += ans.size
        step = ex.receive(ans)
    wire += sum(len(k) + len(server[k][0]) + len(server[k][1]) for k in step.send)
    wire += sum(len(k) for k in step.delete)
    return step, wire


def repaired(server: KVMap, client: KVMap, outcome: Outcome) -> KVMap:
    out = dict(client)
    for k in outcome.delete:
        del out[k]
    for k in outcome.send:
        out[k] = server[k]
    return out


@settings(max_examples=300, deadline=None)
@given(kv_maps, kv_maps)
def test_exchange_turns_the_clients_map_into_the_servers(server: KVMap, client: KVMap) -> None:
    outcome, _ = run_exchange(server, client)
    assert not outcome.over_budget
    assert repaired(server, client, outcome) == server
    # Only differences travel: every key sent or deleted really differs.
    for k in outcome.send:
        assert client.get(k) != server[k]
    for k in outcome.delete:
        assert k in client and k not in server


@settings(max_examples=200, deadline=None)
@given(kv_maps, st.lists(st.tuples(keys, st.one_of(st.none(), values)), max_size=40))
def test_incremental_tree_equals_one_built_from_scratch(start: KVMap, changes) -> None:
    tree = tree_for(start)
    kvs = dict(start)
    for key, val in changes:
        if val is None:
            kvs.pop(key, None)
            tree.put(key, None, "")
        else:
            kvs[key] = val
            tree.put(key, val[0], val[1])
    fresh = tree_for(kvs)
    assert tree.root == fresh.root
    assert len(tree) == len(kvs)
    assert all(tree.sum(n) == fresh.sum(n) and tree.count(n) == fresh.count(n)
               for n in range(digest.NODES))


def test_leaf_hash_covers_key_value_and_revision() -> None:
    base = digest.leaf_hash("/k", b"v", "1")
    assert base != digest.leaf_hash("/k2", b"v", "1")
    assert base != digest.leaf_hash("/k", b"w", "1")
    assert base != digest.leaf_hash("/k", b"v", "2")
    # The separators keep (key, value) boundaries apart.
    assert digest.leaf_hash("/ka", b"b", "") != digest.leaf_hash("/k", b"ab", "")


@pytest.mark.parametrize("changes", [0, 1, 10, 100])
def test_bytes_are_bounded_by_the_differences(changes: int) -> None:
    rng = random.Random(changes)
    n = 20000
    server = {f"/calico/v1/host/node-{i % 500}/workload/pod-{i}": (b"x" * 200, str(i))
              for i in range(n)}
    client = dict(server)
    touched = rng.sample(sorted(server), changes)
    for i, k in enumerate(touched):
        if i % 3 == 0:
            del client[k]  # the server has it, the client missed it
        elif i % 3 == 1:
            client[k] = (b"y" * 200, "old")  # stale value
        else:
            client[k + "/gone"] = (b"z", "9")  # the client still has a deleted key
    outcome, wire = run_exchange(server, client)
    assert repaired(server, client, outcome) == server
    assert len(outcome.send) + len(outcome.delete) == changes
    # O(changes x log n): per change one node's FANOUT sums per level plus its leaves.
    per_change = digest.FANOUT * 8 * (digest.DEPTH + 1) + 400
    assert wire <= 8 + changes * per_change
    assert outcome.rounds <= digest.DEPTH + 2
    snapshot = sum(len(k) + 200 + 6 for k in server)
    if changes:
        assert wire < snapshot * changes / 500
    per_bucket = math.ceil(n / digest.BUCKETS)
    assert outcome.work <= changes * (digest.FANOUT * digest.DEPTH + 4 * per_bucket + 4)


def test_equal_maps_cost_nothing_but_the_root() -> None:
    kvs = {f"/k{i}": (b"v", "1") for i in range(1000)}
    outcome, wire = run_exchange(kvs, dict(kvs))
    assert outcome == Outcome()
    assert wire == 8


def test_mismatch_found_at_every_level() -> None:
    # The size of the map decides at which depth a differing node is small enough to be
    # compared leaf by leaf: at the root, or one, two or three levels down.
    depths = set()
    for n, changed in [(3, 0), (3, 2), (40, 0), (40, 39), (600, 5), (600, 300), (5000, 1),
                 (5000, 4999), (60000, 7)]:
        server = {f"/k{i}": (b"v", "1") for i in range(n)}
        tree = tree_for(server)
        client = dict(server)
        client[f"/k{changed}"] = (b"other", "1")
        outcome, _ = run_exchange(server, client)
        assert outcome.send == (f"/k{changed}",) and outcome.delete == ()
        bucket = digest.key_hash(f"/k{changed}") >> (64 - digest.BUCKET_BITS)
        depth = next(d for d in range(digest.DEPTH + 1)
                     if d == digest.DEPTH or tree.count(digest.node_id(
                         d, bucket >> (digest.FANOUT_BITS * (digest.DEPTH - d))))
                     <= digest.LEAF_LIMIT)
        assert outcome.rounds == depth + 1
        depths.add(depth)
    assert depths == set(range(digest.DEPTH + 1))


def test_budget_stops_the_walk_and_asks_for_a_snapshot() -> None:
    server = {f"/k{i}": (b"v", "1") for i in range(3000)}
    client = {k: (b"w", "1") for k in server}  # every leaf differs
    outcome, _ = run_exchange(server, client, budget=500)
    assert outcome.over_budget and outcome.send == () and outcome.work <= 500 + 4 * 3000


# ---- a client that lies --------------------------------------------------------------


def started(n: int = 2000) -> tuple[DigestExchange, KeyTree, Query]:
    server = tree_of((f"/k{i}", b"v", "1") for i in range(n))
    client = tree_of((f"/k{i}", b"v", "2" if i == 7 else "1") for i in range(n))
    ex = DigestExchange(server, client.root, 10**6)
    q = ex.begin()
    assert isinstance(q, Query)
    return ex, client, q


def test_short_sums_are_refused() -> None:
    ex, client, q = started()
    with pytest.raises(DigestError, match="bytes of sums"):
        ex.receive(Answer(sums=answer(client, q).sums[:-1]))


def test_leaves_outside_the_node_asked_are_refused() -> None:
    ex, client, q = started()
    while not q.leaves:
        step = ex.receive(answer(client, q))
        assert isinstance(step, Query)
        q = step
    outside = next(kh for kh in (digest.key_hash(f"/x{i}") for i in range(1000))
                   if not digest.in_node(kh, q.leaves[0]))
    bogus = Answer(sums=answer(client, q).sums,
                   leaves=(digest.pack_leaves([(outside, 1)]),) * len(q.leaves))
    with pytest.raises(DigestError, match="is not under node"):
        ex.receive(bogus)


def test_a_name_that_does_not_hash_to_what_was_asked_is_refused() -> None:
    server = tree_of([("/a", b"v", "1")])
    client = tree_of([("/a", b"v", "1"), ("/b", b"v", "1")])
    ex = DigestExchange(server, client.root, 1000)
    step = ex.begin()
    while isinstance(step, Query) and not step.names:
        step = ex.receive(answer(client, step))
    assert isinstance(step, Query)
    with pytest.raises(DigestError, match="does not hash"):
        ex.receive(Answer(names=("/not-b",)))


def test_an_unasked_answer_is_refused() -> None:
    ex, client, q = started()
    with pytest.raises(DigestError, match="leaf lists"):
        ex.receive(Answer(sums=answer(client, q).sums, leaves=(b"",)))


def test_a_client_claiming_everything_differs_is_bounded_by_the_budget() -> None:
    n = 20000
    server = tree_of((f"/k{i}", b"v", "1") for i in range(n))
    budget = 5000
    ex = DigestExchange(server, 12345, budget)
    step = ex.begin()
    answered = 0
    while isinstance(step, Query):
        # Random sums: every node differs; random leaves: every bucket differs.
        rng = random.Random(answered)
        step = ex.receive(Answer(
            sums=bytes(rng.randrange(256) for _ in range(digest.FANOUT * 8 * len(step.nodes))),
            leaves=tuple(b"" for _ in step.leaves),
            names=()))
        answered += 1
    assert step.over_budget
    assert ex.work <= budget + digest.FANOUT * digest.NODES // digest.FANOUT
    assert answered <= digest.DEPTH + 1


def test_node_ids_are_checked() -> None:
    with pytest.raises(DigestError):
        digest.depth_of(digest.NODES)
    with pytest.raises(DigestError):
        digest.children(digest.LEVEL_START[digest.DEPTH])
    assert list(digest.children(0)) == list(range(1, 1 + digest.FANOUT))
    assert digest.bucket_range(0) == range(digest.BUCKETS)
    assert math.prod([digest.FANOUT] * digest.DEPTH) == digest.BUCKETS
