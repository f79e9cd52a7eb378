"""Trio shell around the snapshot cache: publishes breadcrumbs and wakes waiting clients."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio

from ..model.kv import SerializedUpdate, SyncStatus
from .core import Breadcrumb, SnapshotCache


class CacheFeed:
    """One syncer type's cache as clients see it: a snapshot point, then ``wait_next``.

    Waking is one shared :class:`trio.Event` per publication, so a publish costs O(1) no
    matter how many clients wait, and nobody polls.
    """

    def __init__(self, syncer_type: str, *, max_batch_size: int = 100,
                 snapshot_reuse_age: float = 0.0, wake_interval: float = 0.0) -> None:
        self.syncer_type = syncer_type
        self.cache = SnapshotCache(max_batch_size=max_batch_size, now=trio.current_time())
        self.snapshot_reuse_age = snapshot_reuse_age
        self._published = trio.Event()
        self._in_sync = trio.Event()
        self.wake_interval = wake_interval
        self._dirty = trio.Event()
        #: Called with True when a client had to wait for the next breadcrumb, else False.
        self.on_wait: Callable[[bool], None] | None = None

    @property
    def latest(self) -> Breadcrumb:
        return self.cache.latest

    @property
    def status(self) -> SyncStatus:
        return self.cache.status

    def apply(self, updates: Iterable[SerializedUpdate]) -> list[Breadcrumb]:
        crumbs = self.cache.apply(updates, trio.current_time())
        if crumbs:
            self._wake()
        return crumbs

    def set_status(self, status: SyncStatus) -> None:
        if self.cache.set_status(status, trio.current_time()) is not None:
            if status is SyncStatus.IN_SYNC:
                self._in_sync.set()
            self._wake()

    def snapshot_point(self) -> Breadcrumb:
        return self.cache.snapshot_point(trio.current_time(), self.snapshot_reuse_age)

    async def wait_next(self, crumb: Breadcrumb) -> Breadcrumb:
        """Return ``crumb.next``, sleeping until it is published."""
        blocked = crumb.next is None
        while crumb.next is None:
            await self._published.wait()
        if self.on_wait is not None:
            self.on_wait(blocked)
        return crumb.next

    async def wait_in_sync(self) -> None:
        await self._in_sync.wait()

    def _wake(self) -> None:
        if self.wake_interval > 0:
            self._dirty.set()  # run_waker releases the waiters
        else:
            self._release()

    def _release(self) -> None:
        self._published.set()
        self._published = trio.Event()

    async def run_waker(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> None:
        """With a wake interval, release waiting clients at most once per interval.

        The first change after a quiet spell is released at once; later ones within the
        interval wait for its end, so every client then sends several breadcrumbs in one
        write.  With thousands of clients that turns per-update socket writes into
        per-interval ones, at the cost of at most one interval of extra delay.
        """
        task_status.started()
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            self._release()
            await trio.sleep(self.wake_interval)
