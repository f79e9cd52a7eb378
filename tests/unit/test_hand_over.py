"""datastore.base.hand_over: a burst of events goes downstream without a scheduling point
per event, and waits (losing nothing, in order) only while the pipeline's channel is full."""

from __future__ import annotations

import trio
import trio.testing

from trio_typha.datastore.base import KindSynced, hand_over
from trio_typha.model.kinds import NODE


def _events(n: int) -> list[KindSynced]:
    return [KindSynced(NODE) for _ in range(n)]


async def test_a_burst_that_fits_is_handed_over_without_yielding() -> None:
    send, recv = trio.open_memory_channel[object](100)
    others_ran: list[bool] = []

    async def other() -> None:
        others_ran.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)  # runs at our next checkpoint
        await hand_over(send, _events(100))
        assert others_ran == []  # not one scheduling point for 100 events
        await trio.testing.wait_all_tasks_blocked()  # (one checkpoint: trio may run us first)
        assert others_ran == [True]
    assert len([recv.receive_nowait() for _ in range(100)]) == 100


async def test_a_full_channel_waits_for_the_consumer_in_order() -> None:
    send, recv = trio.open_memory_channel[object](2)
    events = _events(50)
    got: list[object] = []

    async def consume() -> None:
        async for ev in recv:
            got.append(ev)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        async with send:
            await hand_over(send, events)
    assert [id(e) for e in got] == [id(e) for e in events]
