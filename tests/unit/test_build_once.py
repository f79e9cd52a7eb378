"""build_once: one build per breadcrumb and key, shared by concurrent callers; big ones in a thread."""

from __future__ import annotations

import threading

import trio

from trio_typha.cache.build import THREAD_BUILD_SIZE, build_once
from trio_typha.cache.core import SnapshotCache
from trio_typha.model.kv import SerializedUpdate


async def test_concurrent_callers_share_one_build() -> None:
    cache = SnapshotCache()
    [crumb] = cache.apply([SerializedUpdate("/a", b"1")], now=0)
    calls: list[str] = []
    results: list[object] = []
    reused: list[int] = []

    def build() -> bytes:
        calls.append(threading.current_thread().name)
        return b"encoded"

    async def caller() -> None:
        results.append(await build_once(crumb, ("k",), THREAD_BUILD_SIZE, build,
                                        on_reused=lambda: reused.append(1)))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(caller)
    assert results == [b"encoded"] * 5 and len(calls) == 1 and len(reused) == 4
    assert calls[0] != threading.main_thread().name  # large: built in a worker thread
    small = await build_once(crumb, ("small",), 3, lambda: threading.current_thread().name)
    assert small == threading.main_thread().name
