"""CacheFeed wake-ups: immediate by default; coalesced per interval when configured."""

from __future__ import annotations

import trio

from trio_typha.cache.feed import CacheFeed
from trio_typha.model.kv import SerializedUpdate


async def follow(feed: CacheFeed, n: int, woken: list[tuple[float, int]]) -> None:
    crumb = feed.latest
    seen = 0
    while seen < n:
        crumb = await feed.wait_next(crumb)
        batch = 1
        while crumb.next is not None:  # whatever else is already published
            crumb = crumb.next
            batch += 1
        seen += batch
        woken.append((trio.current_time(), batch))


async def test_immediate_wake_by_default(autojump_clock) -> None:
    feed = CacheFeed("felix")
    woken: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow, feed, 3, woken)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(3):
            feed.apply([SerializedUpdate(f"/k{i}", b"v")])
            await trio.sleep(0.1)
    start = woken[0][0]
    assert [(round(t - start, 3), b) for t, b in woken] == [(0.0, 1), (0.1, 1), (0.2, 1)]


async def test_coalesced_wake(autojump_clock) -> None:
    feed = CacheFeed("felix", wake_interval=1.0)
    woken: list[tuple[float, int]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run_broadcast)
        nursery.start_soon(follow, feed, 4, woken)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        for i in range(4):
            feed.apply([SerializedUpdate(f"/k{i}", b"v")])
            await trio.sleep(0.1)
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    # The first change goes at once; the next three wait for the interval and go together.
    assert [(round(t - start, 3), b) for t, b in woken] == [(0.0, 1), (1.0, 3)]
