"""CacheFeed's broadcast rounds in trio time (autojump_clock): wake-ups, hand-backs, pings.

The writer task here does what the gob shell does: joins when caught up, sleeps until the
round hands the socket back or its ping is due, takes the socket back, finishes what is
pending or owed (slowly: a write takes ``write_time``), catches up, joins again.
"""

from __future__ import annotations

import pytest
import trio
from test_fanout import BudgetSeat, encode

from trio_typha.cache.fanout import Owner, RoundResult
from trio_typha.cache.feed import CacheFeed
from trio_typha.model.kv import SerializedUpdate


class TrioSeat(BudgetSeat):
    """test_fanout's byte-budget seat, with a writer task that waits in trio time."""

    def __init__(self, budget: int | None = None, *, tls: bool = False) -> None:
        super().__init__(budget, tls=tls)
        self.handed_back = trio.Event()
        self.pings: list[float] = []
        self.wakeups = 0

    def wake(self) -> None:
        super().wake()
        self.handed_back.set()

    async def writer(self, feed: CacheFeed, ping_interval: float, write_time: float) -> None:
        crumb = feed.latest
        next_ping = trio.current_time() + ping_interval
        while True:
            while crumb.next is not None:
                crumb = crumb.next
                await trio.sleep(write_time)
                self.received += encode([crumb])
            assert feed.broadcast.join(self, crumb)
            self.handed_back = trio.Event()
            with trio.move_on_at(next_ping):
                await self.handed_back.wait()
            self.wakeups += 1
            feed.broadcast.reclaim(self)
            assert self.owner is Owner.WRITER and self.crumb is not None
            crumb = self.crumb
            if self.pending or self.owes():
                await trio.sleep(write_time)
                self.received += self.owed  # a TLS stream's carry goes out first
                self.owed.clear()
                self.received += bytes(self.pending)
                self.pending = b""
            if trio.current_time() >= next_ping:
                self.pings.append(trio.current_time())
                next_ping += ping_interval


async def test_rounds_write_without_waking_and_pings_reclaim(autojump_clock) -> None:
    feed = CacheFeed("felix")
    rounds: list[RoundResult] = []
    feed.on_round = rounds.append
    seats = [TrioSeat() for _ in range(50)]
    expected = b"".join(f"/u{i};".encode() for i in range(100))
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run_broadcast)
        for seat in seats:
            nursery.start_soon(seat.writer, feed, 10.0, 0.01)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(100):  # over 25 s: two or three pings each
            feed.apply([SerializedUpdate(f"/u{i}", b"v")])
            await trio.sleep(0.25)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    for seat in seats:
        assert bytes(seat.received) == expected
        assert len(seat.pings) == 2
        assert seat.wakeups == 2  # only for its pings: the rounds never woke it
    assert sum(r.deliveries for r in rounds) > 90 * len(seats)


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_full_socket_goes_to_the_writer_and_comes_back(autojump_clock, tls: bool) -> None:
    """With TLS the round's send takes the bytes but owes them: handed back just the same."""
    feed = CacheFeed("felix")
    slow, fast = TrioSeat(budget=0, tls=tls), TrioSeat(tls=tls)
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run_broadcast)
        nursery.start_soon(slow.writer, feed, 1000.0, 0.5)
        nursery.start_soon(fast.writer, feed, 1000.0, 0.5)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(10):
            feed.apply([SerializedUpdate(f"/u{i}", b"v")])
            await trio.sleep(0.1)
        # The slow one is handed back every time it is seated; its writer catches up in
        # batches of what was published meanwhile.
        slow.budget = None
        await trio.sleep(5)
        assert slow in feed.broadcast and fast in feed.broadcast
        feed.apply([SerializedUpdate("/last", b"v")])
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    expected = b"".join(f"/u{i};".encode() for i in range(10)) + b"/last;"
    assert bytes(slow.received) == bytes(fast.received) == expected
    assert slow.wakeups >= 1 and fast.wakeups == 0


async def test_wake_interval_bounds_the_round_rate(autojump_clock) -> None:
    feed = CacheFeed("felix", wake_interval=1.0)
    rounds: list[RoundResult] = []
    feed.on_round = rounds.append
    seat = TrioSeat()
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run_broadcast)
        nursery.start_soon(seat.writer, feed, 1000.0, 0.0)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(5):
            feed.apply([SerializedUpdate(f"/u{i}", b"v")])
            await trio.sleep(0.1)
        await trio.sleep(3)
        nursery.cancel_scope.cancel()
    # First change at once, the other four together one interval later.
    assert [len(d.crumbs) for r in rounds for d in r.delivered] == [1, 4]
    assert bytes(seat.received) == b"".join(f"/u{i};".encode() for i in range(5))
