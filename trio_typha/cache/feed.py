"""Trio shell around the snapshot cache: publishes breadcrumbs, runs the broadcast rounds for
caught-up clients and wakes the writers of the others."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import trio

from ..model.kv import SerializedUpdate, SyncStatus
from .core import Breadcrumb, MemoBuilds, SnapshotCache
from .fanout import Broadcast, RoundResult


class CacheFeed:
    """One syncer type's cache as clients see it: a snapshot point, then ``wait_next``.

    Clients that are caught up sit in :attr:`broadcast` and get each publication from one
    round of non-blocking sends (:meth:`run_broadcast`), without a task wake-up each.  The
    others wait on one shared :class:`trio.Event` per publication, so a publish costs O(1)
    no matter how many clients wait, and nobody polls.
    """

    def __init__(self, syncer_type: str, *, max_batch_size: int = 100,
                 snapshot_reuse_age: float = 0.0, wake_interval: float = 0.0,
                 max_fall_behind: float = 300.0, round_max_updates: int = 10000,
                 memo_builds: MemoBuilds | None = None, resume_history_updates: int = 0,
                 resume_history_age: float = 0.0, epoch: int | None = None) -> None:
        self.syncer_type = syncer_type
        self.cache = SnapshotCache(max_batch_size=max_batch_size, now=trio.current_time(),
                                   memo_builds=memo_builds,
                                   history_updates=resume_history_updates,
                                   history_age=resume_history_age, epoch=epoch)
        self.snapshot_reuse_age = snapshot_reuse_age
        self._published = trio.Event()
        self._in_sync = trio.Event()
        self.wake_interval = wake_interval
        #: Called with True when a client had to wait for the next breadcrumb, else False.
        self.on_wait: Callable[[bool], None] | None = None
        self.broadcast = Broadcast(max_updates=round_max_updates, max_age=max_fall_behind)
        #: True while :meth:`run_broadcast` runs; until then every client uses its writer.
        self.broadcasting = False
        #: Called after each broadcast round (metrics).
        self.on_round: Callable[[RoundResult], None] | None = None
        self._round_due = trio.Event()
        #: When the oldest datastore event not yet in this cache was received (None: none
        #: is pending); set by the pipeline that feeds the cache.
        self.pending_since: Callable[[], float | None] = lambda: None

    @property
    def latest(self) -> Breadcrumb:
        return self.cache.latest

    @property
    def status(self) -> SyncStatus:
        return self.cache.status

    def staleness(self, now: float) -> float:
        """Age of the oldest datastore event not yet in the cache (0 if none is pending)."""
        since = self.pending_since()
        return 0.0 if since is None else max(now - since, 0.0)

    def client_age(self, crumb: Breadcrumb, now: float) -> float:
        """How stale a client is whose next breadcrumb to get is ``crumb``: since the oldest
        event behind it was received, or the oldest event still upstream if that is older."""
        return max(now - crumb.origin, self.staleness(now))

    def apply(self, updates: Iterable[SerializedUpdate],
              origin: float | None = None) -> list[Breadcrumb]:
        crumbs = self.cache.apply(updates, trio.current_time(), origin)
        if crumbs:
            self._wake()
        return crumbs

    def set_status(self, status: SyncStatus) -> None:
        if self.cache.set_status(status, trio.current_time()) is not None:
            if status is SyncStatus.IN_SYNC:
                self._in_sync.set()
            self._wake()

    def append(self, updates: tuple[SerializedUpdate, ...], status: SyncStatus,
               origin: float | None = None, memo: dict[Any, Any] | None = None,
               seq: int | None = None) -> Breadcrumb:
        """Publish one breadcrumb exactly as given (:meth:`SnapshotCache.append`)."""
        crumb = self.cache.append(updates, status, trio.current_time(), origin, memo, seq)
        if status is SyncStatus.IN_SYNC:
            self._in_sync.set()
        self._wake()
        return crumb

    def snapshot_point(self) -> Breadcrumb:
        return self.cache.snapshot_point(trio.current_time(), self.snapshot_reuse_age)

    async def wait_next(self, crumb: Breadcrumb) -> Breadcrumb:
        """Return ``crumb.next``, sleeping until it is published."""
        blocked = crumb.next is None
        nxt = await self.wait_published(crumb)
        if self.on_wait is not None:
            self.on_wait(blocked)
        return nxt

    async def wait_published(self, crumb: Breadcrumb) -> Breadcrumb:
        """:meth:`wait_next` without counting the wait in the clients' metrics."""
        while crumb.next is None:
            await self._published.wait()
        return crumb.next

    async def wait_in_sync(self) -> None:
        await self._in_sync.wait()

    def _wake(self) -> None:
        if self.wake_interval > 0:
            self._round_due.set()  # run_broadcast releases the waiters too
        else:
            self._release()
            if self.broadcast:
                self._round_due.set()

    def _release(self) -> None:
        self._published.set()
        self._published = trio.Event()

    async def run_broadcast(self, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
        """Write each publication to the caught-up clients, one round at a time.

        Batching adapts to load: a round carries everything published since the previous
        one, so when publications come faster than a round takes, each client gets them
        in one write.  Before a round the broadcaster yields once, so the datastore
        watchers and pipelines that are ready to run go first and their output joins it.

        With a wake interval, waiting writers and rounds are released at most once per
        interval (the first change after a quiet spell at once): an upper bound on the
        write rate for operators who want one; the rounds keep up without it.
        """
        self.broadcasting = True
        task_status.started()
        try:
            while True:
                await self._round_due.wait()
                await trio.lowlevel.checkpoint()  # watchers and pipelines first
                self._round_due = trio.Event()
                if self.wake_interval > 0:
                    self._release()
                result = self.broadcast.round(self.cache.latest)
                if self.on_round is not None:
                    self.on_round(result)
                if self.wake_interval > 0:
                    await trio.sleep(self.wake_interval)
        finally:
            self.broadcasting = False
