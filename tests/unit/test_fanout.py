"""The broadcast core (pure): ownership hand-offs and rounds, without an event loop.

The "socket" here is a byte budget per send (what the kernel would take); the writer side is
simulated the way the gob shell behaves: finish the pending bytes, catch up one breadcrumb at
a time, join again.  Every update must arrive exactly once and in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.cache.core import Breadcrumb, SnapshotCache
from trio_typha.cache.fanout import Broadcast, Owner, Seat
from trio_typha.model.kv import SerializedUpdate


def encode(crumbs: Sequence[Breadcrumb]) -> bytes:
    return b"".join(b"".join(u.key.encode() + b";" for u in c.updates) for c in crumbs)


class BudgetSeat(Seat):
    """A client whose socket takes at most ``budget`` bytes per send (None: everything).

    ``tls``: like the TLS stream, the send takes every byte and what the socket does not
    take is *owed* (carried by the transport) instead of returned as a short count."""

    def __init__(self, budget: int | None = None, key: object = None, *,
                 tls: bool = False) -> None:
        super().__init__()
        self.budget = budget
        self._key = key
        self.tls = tls
        self.owed = bytearray()
        self.received = bytearray()
        self.renders = 0
        self.woken = 0
        self.fail: OSError | None = None

    def key(self) -> object:
        return self._key

    def render(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        self.renders += 1
        return encode(crumbs)

    def send_nowait(self, data: bytes | memoryview) -> int:
        assert self.owner is Owner.BROADCAST, "the round wrote to a socket it does not own"
        assert not self.owed, "the round wrote while the transport still owed bytes"
        if self.fail is not None:
            raise self.fail
        if self.budget == 0 and not self.tls:
            raise BlockingIOError
        n = len(data) if self.budget is None else min(self.budget, len(data))
        self.received += bytes(data[:n])
        if self.tls:
            self.owed += bytes(data[n:])
            return len(data)
        return n

    def owes(self) -> bool:
        return bool(self.owed)

    def wake(self) -> None:
        self.woken += 1

    # The writer task's side, as the gob shell does it.
    def writer_catch_up(self, broadcast: Broadcast, latest: Breadcrumb) -> None:
        assert self.owner is Owner.WRITER and self.crumb is not None
        self.received += self.owed  # the transport's carry goes out first
        self.owed.clear()
        self.received += bytes(self.pending)
        self.pending = b""
        while self.crumb.next is not None:
            self.crumb = self.crumb.next
            self.received += encode([self.crumb])
        assert broadcast.join(self, self.crumb)


def cache_with(n: int) -> SnapshotCache:
    cache = SnapshotCache(max_batch_size=1)
    cache.apply([SerializedUpdate(f"/k{i}", b"v") for i in range(n)], 0.0)
    return cache


def publish(cache: SnapshotCache, name: str, now: float = 1.0) -> None:
    cache.apply([SerializedUpdate(name, name.encode())], now)


def test_join_only_when_caught_up() -> None:
    cache = cache_with(2)
    b = Broadcast()
    seat = BudgetSeat()
    first = cache.latest
    publish(cache, "/a")
    assert not b.join(seat, first)  # there is more to send: the writer keeps the socket
    assert seat.owner is Owner.WRITER and seat not in b
    assert b.join(seat, cache.latest)
    assert seat.owner is Owner.BROADCAST and seat in b
    with pytest.raises(RuntimeError):
        b.join(seat, cache.latest)  # already the broadcast's


def test_round_sends_shared_bytes_once_per_key() -> None:
    cache = cache_with(1)
    b = Broadcast()
    seats = [BudgetSeat(key="plain") for _ in range(5)] + [BudgetSeat(key="snappy")]
    for s in seats:
        assert b.join(s, cache.latest)
    publish(cache, "/a")
    publish(cache, "/b")
    result = b.round(cache.latest)
    assert [bytes(s.received) for s in seats] == [b"/a;/b;"] * 6
    # One render per group (adaptive batching: both breadcrumbs in one write each).
    assert sum(s.renders for s in seats) == 2
    assert result.deliveries == 6 and not result.handed_back
    assert all(s.crumb is cache.latest and s.owner is Owner.BROADCAST for s in seats)
    assert all(s.woken == 0 for s in seats)  # nobody's task was woken
    assert not b.round(cache.latest).delivered  # nothing new: nothing sent


def test_partial_send_hands_back_with_the_rest_pending() -> None:
    cache = cache_with(1)
    b = Broadcast()
    slow, fast = BudgetSeat(budget=2), BudgetSeat()
    b.join(slow, cache.latest)
    b.join(fast, cache.latest)
    publish(cache, "/abc")
    result = b.round(cache.latest)
    assert result.handed_back == [slow] and slow.woken == 1
    assert slow.owner is Owner.WRITER and slow not in b
    assert bytes(slow.received) == b"/a" and bytes(slow.pending) == b"bc;"
    assert slow.crumb is cache.latest  # the pending bytes cover it
    publish(cache, "/d")
    b.round(cache.latest)
    assert bytes(fast.received) == b"/abc;/d;"
    assert bytes(slow.received) == b"/a"  # not the round's any more
    slow.writer_catch_up(b, cache.latest)
    assert bytes(slow.received) == b"/abc;/d;" and slow.owner is Owner.BROADCAST


def test_owed_bytes_hand_back_and_block_joining() -> None:
    """TLS: the plaintext is taken whole, but ciphertext the kernel did not take is owed."""
    cache = cache_with(1)
    b = Broadcast()
    tls, fast = BudgetSeat(budget=2, tls=True), BudgetSeat(tls=True)
    b.join(tls, cache.latest)
    b.join(fast, cache.latest)
    publish(cache, "/abc")
    result = b.round(cache.latest)
    assert result.handed_back == [tls] and tls.woken == 1 and fast in b
    assert tls.owner is Owner.WRITER and not tls.pending and tls.owes()
    assert tls.crumb is cache.latest and result.deliveries == 2
    with pytest.raises(RuntimeError):
        b.join(tls, cache.latest)  # owed bytes first: one writer at a time
    publish(cache, "/d")
    b.round(cache.latest)
    tls.budget = None
    tls.writer_catch_up(b, cache.latest)
    assert bytes(tls.received) == bytes(fast.received) == b"/abc;/d;"
    assert tls.owner is Owner.BROADCAST


def test_would_block_and_errors() -> None:
    cache = cache_with(1)
    b = Broadcast()
    full, broken = BudgetSeat(budget=0), BudgetSeat()
    broken.fail = ConnectionResetError("reset")
    start = cache.latest
    b.join(full, start)
    b.join(broken, start)
    publish(cache, "/a")
    result = b.round(cache.latest)
    assert set(result.handed_back) == {full, broken}
    assert bytes(full.pending) == b"/a;" and full.crumb is cache.latest
    # A failed send commits nothing: the writer ends the connection with the error.
    assert broken.error is not None and broken.crumb is start and not broken.pending


def test_behind_seats_go_to_their_writer() -> None:
    cache = cache_with(1)
    b = Broadcast(max_updates=2, max_age=10.0)
    many, old = BudgetSeat(key=1), BudgetSeat(key=2)
    b.join(many, cache.latest)
    b.join(old, cache.latest)
    for name in ("/a", "/b", "/c"):
        publish(cache, name)
    result = b.round(cache.latest)
    # Three updates are more than a round carries: the writer's batch limits apply.
    assert set(result.handed_back) == {many, old} and not many.received
    cache2 = cache_with(1)
    b2 = Broadcast(max_updates=100, max_age=10.0)
    stale = BudgetSeat()
    b2.join(stale, cache2.latest)
    cache2.apply([SerializedUpdate("/x", b"x")], now=30.0, origin=5.0)
    assert b2.round(cache2.latest).handed_back == [stale]  # 25 s stale: the lag rule decides


def test_reclaim_and_leave() -> None:
    cache = cache_with(1)
    b = Broadcast()
    seat = BudgetSeat()
    b.join(seat, cache.latest)
    b.reclaim(seat)  # a ping is due: the writer takes the socket back
    assert seat.owner is Owner.WRITER and seat not in b
    b.reclaim(seat)  # no-op
    publish(cache, "/a")
    b.round(cache.latest)
    assert not seat.received
    b.leave(seat)
    assert seat.owner is Owner.CLOSED
    with pytest.raises(RuntimeError):
        b.join(seat, cache.latest)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.sampled_from([None, 0, 1, 3, 7]),
                                                       min_size=3, max_size=3)),
                min_size=1, max_size=30))
def test_every_update_exactly_once_in_order(steps: list[tuple[int, list[int | None]]]) -> None:
    """Random publications and socket budgets; writers catch up between rounds.  The
    third seat is TLS-like (short sends leave bytes owed rather than pending)."""
    cache = cache_with(1)
    b = Broadcast(max_updates=5)
    seats = [BudgetSeat(), BudgetSeat(), BudgetSeat(tls=True)]
    start = cache.latest
    for s in seats:
        b.join(s, start)
    expected = bytearray()
    n = 0
    for publications, budgets in steps:
        for _ in range(publications):
            n += 1
            publish(cache, f"/u{n}")
            expected += f"/u{n};".encode()
        for seat, budget in zip(seats, budgets, strict=True):
            seat.budget = budget
        for seat in b.round(cache.latest).handed_back:
            seat.budget = None
            seat.writer_catch_up(b, cache.latest)
    for seat in seats:
        if seat.owner is Owner.BROADCAST:
            seat.budget = None
    b.round(cache.latest)
    for seat in seats:
        if seat.owner is Owner.WRITER:
            seat.writer_catch_up(b, cache.latest)
        assert bytes(seat.received) == bytes(expected)
