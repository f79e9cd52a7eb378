"""Following another trio-typha process's caches over its feed (records: :mod:`.wire`).

:class:`UpstreamFeed` is the follower's datastore: where its caches come from, as a
Kubernetes API server or etcd is the primary's.  It holds no objects and converts nothing:
per syncer type it hands over the upstream's breadcrumbs as they were published there,
with the encodings the upstream made of them, so the follower's clients get the upstream's
bytes.  :class:`FollowerPipeline` is the follower's pipeline for one syncer type; its
``run`` reports started once the upstream's snapshot is in the cache, so the follower opens
its port with the upstream's state, not an empty one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ..cache.feed import CacheFeed
from ..model.kv import SyncStatus
from . import wire

log = logging.getLogger(__name__)


class UpstreamFeed:
    """Another trio-typha process's feed on a Unix socket: one connection per syncer type."""

    name = "primary"

    def __init__(self, path: str) -> None:
        self.path = path

    async def open(self, syncer_type: str) -> trio.abc.Stream:
        """A connection that will carry ``syncer_type``'s snapshot, then its breadcrumbs."""
        stream = await trio.open_unix_socket(self.path)
        try:
            await stream.send_all(wire.encode_hello(syncer_type))
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream


class FollowerPipeline:
    """One syncer type's cache, mirrored from an :class:`UpstreamFeed`.

    ``on_lost`` is called once the feed cannot be reached or has ended: without it
    the cache goes stale, and the process decides what that means (a worker ends).
    """

    heartbeat = None

    def __init__(self, syncer_type: str, feed: CacheFeed, upstream: UpstreamFeed, *,
                 on_lost: Callable[[], None] | None = None) -> None:
        self.syncer_type = syncer_type
        self.feed = feed
        self.upstream = upstream
        self.failing: dict[Any, str] = {}
        self.on_lost = on_lost

    @property
    def ready(self) -> bool:
        return self.feed.status is SyncStatus.IN_SYNC and not self.failing

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        try:
            stream = await self.upstream.open(self.syncer_type)
        except OSError as exc:
            self.failing[None] = f"cannot reach the {self.upstream.name}: {exc}"
            log.error("Cannot reach the %s at %s (%s)", self.upstream.name, self.upstream.path,
                      exc)
            task_status.started()
            self._lost()
            return
        try:
            await self._follow(stream, task_status)
        except (wire.WireError, trio.BrokenResourceError, OSError) as exc:
            self.failing[None] = f"lost the {self.upstream.name}: {exc}"
            log.error("Feed from the %s ended (%s)", self.upstream.name, exc)
        finally:
            await stream.aclose()
        self._lost()

    def _lost(self) -> None:
        if self.on_lost is not None:
            self.on_lost()

    async def _follow(self, stream: trio.abc.Stream, task_status: trio.TaskStatus[None]
                      ) -> None:
        decoder = wire.Decoder()
        feed = self.feed
        seq: int | None = None
        started = False
        while data := await stream.receive_some(1 << 20):
            decoder.feed(data)
            for record in decoder:
                now = trio.current_time()
                if isinstance(record, wire.Crumb):
                    if seq is not None and record.seq != seq + 1:
                        raise wire.WireError(f"breadcrumb {record.seq} after {seq}")
                    seq = record.seq
                    feed.append(record.updates, record.status, now - record.age, record.memo,
                                record.seq)
                elif isinstance(record, wire.Ping):
                    continue  # the primary is alive and has published nothing
                elif isinstance(record, wire.Snapshot) and not started:
                    feed.append(record.updates, record.status, now - record.age)
                    started = True
                    task_status.started()
                else:
                    raise wire.WireError(f"unexpected {type(record).__name__} record")
        raise trio.BrokenResourceError(f"the {self.upstream.name} closed the feed")
