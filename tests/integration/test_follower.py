"""A follower's pipeline over a real Unix socket from the upstream's side of the feed
(upstream/follow.py against upstream/serve.py): the cache mirrors the upstream's with its
bytes, and losing the upstream is reported once.  (The connection limit travels on a
worker's control channel, not here: tests/integration/test_worker_channel.py.)"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import trio

from trio_typha.cache.feed import CacheFeed
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.upstream import wire
from trio_typha.upstream.follow import FollowerPipeline, UpstreamFeed
from trio_typha.upstream.serve import serve_follower


def upd(key: str, value: bytes | None) -> SerializedUpdate:
    return SerializedUpdate(key, value, revision="1")


async def _upstream(path: str, feeds: dict[str, CacheFeed],
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen()
    await trio.serve_listeners(
        partial(serve_follower, feeds, wire.encodings_for("all"), 30.0),
        [trio.SocketListener(sock)], task_status=task_status)


async def test_a_follower_mirrors_the_upstream_and_notices_it_going(tmp_path: Path) -> None:
    path = os.fspath(tmp_path / "upstream.sock")
    primary = CacheFeed("felix")
    primary.apply([upd("/a", b"1"), upd("/b", b"2")])
    primary.set_status(SyncStatus.IN_SYNC)
    mirror = CacheFeed("felix")
    lost = trio.Event()
    pipeline = FollowerPipeline("felix", mirror, UpstreamFeed(path), on_lost=lost.set)
    assert pipeline.heartbeat is None and not pipeline.ready
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            upstream = trio.CancelScope()

            async def serve(task_status: trio.TaskStatus[None]) -> None:
                with upstream:
                    await _upstream(path, {"felix": primary}, task_status=task_status)

            await nursery.start(serve)
            await nursery.start(pipeline.run)  # started: the snapshot is in
            assert mirror.cache.values_by_key() == primary.cache.values_by_key()
            assert pipeline.ready and not pipeline.failing
            (crumb,) = primary.apply([upd("/c", b"3"), upd("/a", None)])
            mine = await mirror.wait_next(mirror.latest)
            assert mine.updates == crumb.updates
            # The upstream's encodings, not ones built here.
            for e in wire.encodings_for("all"):
                assert mine.memo(e.memo_key, lambda _: b"built here") == e.build(crumb)
            upstream.cancel()  # the upstream goes away
            await lost.wait()
            assert "lost the primary" in pipeline.failing[None]
            assert not pipeline.ready


async def test_an_unreachable_upstream_is_reported_and_lost(tmp_path: Path) -> None:
    lost = trio.Event()
    pipeline = FollowerPipeline("felix", CacheFeed("felix"),
                                UpstreamFeed(os.fspath(tmp_path / "nobody.sock")),
                                on_lost=lost.set)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(pipeline.run)
            await lost.wait()
    assert "cannot reach the primary" in pipeline.failing[None]
