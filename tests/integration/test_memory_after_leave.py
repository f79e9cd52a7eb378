"""After a crowd of clients has left, nothing of their sessions stays alive, and the server
gives the freed memory back (trio_typha/server/memtrim.py).  Counts, not timings."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from tests.e2e.harness import HANG
from tests.grpcio_sync import grpcio_sync
from trio_typha.client.typha import TyphaClient
from trio_typha.daemon import Daemon
from trio_typha.model.kv import SyncStatus
from trio_typha.server import memtrim

CLIENTS = 12  # per protocol


async def test_sessions_of_departed_clients_are_released(
        memory_daemon: Callable[..., Awaitable[Daemon]]) -> None:
    daemon = await memory_daemon()
    port = daemon.ports["server"]
    refs: list[weakref.ref[Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        gobs = [await stack.enter_async_context(TyphaClient(
            "127.0.0.1", port, syncer_type="felix", hostname=f"gob-{i}"))
            for i in range(CLIENTS)]
        grpcs = [await stack.enter_async_context(grpcio_sync(port, "felix",
                                                             hostname=f"grpc-{i}"))
                 for i in range(CLIENTS)]
        with trio.fail_after(HANG):
            for gob in gobs:
                await gob.wait_for_status(SyncStatus.IN_SYNC)
            for client in grpcs:
                await client.wait_until(lambda c=client: c.in_sync)
        assert len(daemon.ctx.sessions) == 2 * CLIENTS
        refs += [weakref.ref(s) for s in daemon.ctx.sessions.values()]
        refs += [weakref.ref(c) for c in daemon.connections]
    with trio.fail_after(HANG):
        while len(daemon.connections):  # noqa: ASYNC110 - polls the registry
            await trio.sleep(0.02)
    assert len(daemon.ctx.sessions) == 0
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert alive == [], [type(o).__name__ for o in alive]
    # Nor does any feed keep a seat for a departed session.
    for feed in daemon.ctx.feeds.values():
        assert len(feed.broadcast) == 0


async def test_memory_is_given_back_once_the_count_has_fallen(
        autojump_clock: Any, monkeypatch: Any) -> None:
    given: list[int] = []
    now = [0]
    monkeypatch.setattr(memtrim, "give_back", lambda freezer=None: given.append(now[0]))
    async with trio.open_nursery() as nursery:
        await nursery.start(memtrim.run_trimmer, lambda: now[0])
        # Each count is set half-way between two of the trimmer's looks.
        await trio.sleep(memtrim.CHECK_INTERVAL / 2)
        for count in (100, 500, 400, 260, 250, 240, 0, 0, 30, 10):
            now[0] = count
            await trio.sleep(memtrim.CHECK_INTERVAL)
        nursery.cancel_scope.cancel()
    # Once when 500 had fallen to half (250), once more when 250 had fallen to 0.
    assert given == [250, 0]


def test_policy_waits_for_a_real_fall() -> None:
    p = memtrim.TrimPolicy(fraction=0.5, min_drop=64)
    assert [p.observe(n) for n in (10, 200, 120, 100)] == [False, False, False, True]
    # A small server's churn (under min_drop) never triggers it.
    q = memtrim.TrimPolicy(fraction=0.5, min_drop=64)
    assert not any(q.observe(n) for n in (40, 0, 40, 0, 60, 1))


def test_malloc_trim_is_found_on_glibc() -> None:
    import platform
    if platform.libc_ver()[0] == "glibc":
        assert memtrim.MALLOC_TRIM is not None
        assert memtrim.MALLOC_TRIM() in (0, 1)
    memtrim.give_back()  # and it runs wherever there is none


def test_freezing_follows_arrivals_not_churn() -> None:
    p = memtrim.FreezePolicy(step=100)
    # 0 -> 250 in steps: a freeze at 100 and 200; a fall resets the base, so coming back
    # up by a step freezes again, churn below a step never does.
    assert [p.observe(n) for n in (50, 100, 150, 200, 250)] == [False, True, False, True,
                                                                 False]
    assert [p.observe(n) for n in (120, 200, 219, 220)] == [False, False, False, True]
    q = memtrim.FreezePolicy(step=100)
    assert not any(q.observe(n) for n in (40, 0, 90, 10, 99, 0))


def test_what_a_storm_froze_is_collected_when_memory_is_given_back() -> None:
    """A cycle frozen while the storm arrived is freed by the return after it."""
    class Node:
        other: object

    freezer = memtrim.Freezer(memtrim.FreezePolicy(step=1))
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    frozen_before = gc.get_freeze_count()
    assert freezer.check(1) and freezer.frozen
    assert gc.get_freeze_count() > frozen_before
    del a, b
    gc.collect()
    assert ref() is not None  # frozen: the collector does not see it
    memtrim.give_back(freezer)
    assert ref() is None and not freezer.frozen
    assert gc.get_freeze_count() > 0  # what survives is frozen again
