"""One syncer type's cache in a relay tier, following an upstream Typha with failover.

A :class:`RelayPipeline` keeps its cache current from one upstream at a time, chosen from
the configured or discovered addresses (:class:`UpstreamSet`) the way calico-node picks a
Typha: the first one not tried yet, starting over when all were.  It speaks one of two
protocols to it (:class:`~.sources.FeedSource` to a trio-typha, :class:`~.sources.GobSource`
to any Typha, Go's included); both hand it the same things: a snapshot, then breadcrumbs or
update batches, status changes, and how far behind the datastore the upstream is.

Every snapshot is treated as a relist (:func:`~.resync.relist_diff`): the first one fills
the cache, one from the upstream failed over to publishes only what differs, so the
relay's own clients keep their connections and lose or gain no key on a failover.  An
upstream that sends nothing for ``deadline`` seconds (WatchStallTimeoutSecs; a trio-typha
pings every second, a Go Typha every 10 s) is named as silent and dropped for the next
one.  Until another is reached the cache keeps serving what it has, as Typha does through a
datastore outage, and readiness says so.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ..backoff import Backoff
from ..cache.feed import CacheFeed
from ..client.discovery import (
    AttemptTracker,
    Discovery,
    DiscoveryError,
    TyphaAddress,
)
from ..model.kv import SerializedUpdate, SyncStatus
from ..upstream import wire
from .resync import relist_diff
from .sources import Source, UpstreamLost

log = logging.getLogger(__name__)

#: After a failover, the next dial waits up to this (random), so relays that lost the same
#: upstream do not all arrive at the next one in one instant.
FAILOVER_DELAY_MAX = 1.0


class UpstreamSet:
    """Where the upstream Typhas are (static or discovered) and which to dial next."""

    def __init__(self, discovery: Discovery, *, rng: random.Random | None = None) -> None:
        self.discovery = discovery
        self.rng = rng or random.Random()
        self._tracker = AttemptTracker()

    async def next(self) -> TyphaAddress:
        return self._tracker.pick(await self.discovery.discover())


@dataclass
class UpstreamState:
    """What the relay knows of its current upstream (readiness and /metrics show it)."""

    address: str = ""
    protocol: str = ""
    connected: bool = False
    #: Seconds from the root's datastore event to this relay, as of the last arrival.
    lag: float = 0.0
    failovers: int = 0


class RelayPipeline:
    """A relay tier's pipeline for ``syncer_type`` (a :class:`~..syncer.base.Pipeline`)."""

    heartbeat = None

    def __init__(self, syncer_type: str, feed: CacheFeed, upstreams: UpstreamSet,
                 source: Source, *, deadline: float,
                 on_lag: Callable[[float], None] | None = None,
                 on_failover: Callable[[], None] | None = None,
                 rng: random.Random | None = None) -> None:
        self.syncer_type = syncer_type
        self.feed = feed
        self.upstreams = upstreams
        self.source = source
        self.deadline = deadline
        self.failing: dict[Any, str] = {}
        self.state = UpstreamState(protocol=source.protocol)
        self.on_lag = on_lag
        self.on_failover = on_failover
        self.rng = rng or random.Random()
        self.backoff = Backoff(initial=0.5, maximum=30.0, random=self.rng.random)
        # When the oldest event still at the upstream (its own lag, from its pings) was
        # received there, in our clock: it is not in this cache either.
        self._upstream_pending: float | None = None
        feed.pending_since = lambda: self._upstream_pending
        self._synced_once = False

    @property
    def ready(self) -> bool:
        """In sync, from an upstream reached at least once (serving on through a failover,
        with readiness saying so)."""
        return self._synced_once and self.feed.status is SyncStatus.IN_SYNC

    def describe(self) -> str:
        """Where this cache's state comes from, for readiness."""
        s = self.state
        where = f"{s.protocol} upstream {s.address}" if s.address else "no upstream yet"
        if not s.connected:
            return f"{where} (not connected)"
        return f"state from {where}, {s.lag:.3f}s behind the datastore"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Follow one upstream after another; started once the first snapshot is in, or
        the first attempt failed (the cache then fills when an upstream answers)."""
        started = False

        def first_state() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        delay = 0.0
        while True:
            await trio.sleep(delay)
            try:
                address = await self.upstreams.next()
            except DiscoveryError as exc:
                self.failing[None] = f"no upstream Typha: {exc}"
                log.warning("Relay %s: %s", self.syncer_type, self.failing[None])
                first_state()
                delay = self.backoff.next_delay()
                continue
            if self.state.address and self.state.address != address.addr:
                self.state.failovers += 1
                if self.on_failover is not None:
                    self.on_failover()
            self.state.address = address.addr
            try:
                await self.source.follow(address, self.syncer_type, self,
                                         deadline=self.deadline, on_first=first_state)
            except UpstreamLost as exc:
                self.state.connected = False
                self.failing[None] = f"{self.source.protocol} upstream {address}: {exc}"
                log.warning("Relay %s: %s; failing over to the next upstream",
                            self.syncer_type, self.failing[None])
                first_state()
                if exc.after_data:  # it worked for a while: move on soon
                    self.backoff.reset()
                    delay = self.rng.uniform(0, FAILOVER_DELAY_MAX)
                else:
                    delay = self.backoff.next_delay()

    # -- what a source hands over -----------------------------------------------------------

    def connected(self) -> None:
        self.state.connected = True

    def snapshot(self, updates: Sequence[SerializedUpdate], status: SyncStatus,
                 lag: float) -> None:
        """A connection's snapshot: publish only how it differs from this cache."""
        now = trio.current_time()
        diff = relist_diff(self.feed.cache.values_by_key(), updates)
        if diff:
            self.feed.apply(diff, now - lag)
        self.feed.set_status(status)
        log.info("Relay %s: snapshot of %d keys from %s upstream %s; %d differed from "
                 "this cache", self.syncer_type, len(updates), self.source.protocol,
                 self.state.address, len(diff))
        self._arrived(lag)

    def crumb(self, record: wire.Crumb) -> None:
        """One of a trio-typha upstream's breadcrumbs, published here as it was there."""
        now = trio.current_time()
        feed = self.feed
        if record.seq > feed.latest.seq:
            # Its numbering, so its encodings (which carry the number) fit ours.
            feed.append(record.updates, record.status, now - record.age, record.memo,
                        record.seq)
        else:  # after a failover to an upstream numbering lower: our numbers, our bytes
            feed.append(record.updates, record.status, now - record.age)
        self._arrived(record.age)

    def updates(self, updates: Sequence[SerializedUpdate]) -> None:
        """A batch from a gob upstream (which carries no breadcrumb numbers or times)."""
        self.feed.apply(updates)
        self._arrived(self.state.lag)

    def status(self, status: SyncStatus) -> None:
        self.feed.set_status(status)
        self._check_sync()

    def lag(self, seconds: float) -> None:
        """How far behind the upstream's stream is (a gob ping's delay)."""
        self._report_lag(seconds)

    def pending(self, seconds: float) -> None:
        """A trio-typha upstream's own lag while it publishes nothing (its feed's ping):
        the events it has not got yet are not in this cache either."""
        self._upstream_pending = trio.current_time() - seconds if seconds > 0 else None
        self._report_lag(max(seconds, 0.0))

    def _arrived(self, lag: float) -> None:
        self._upstream_pending = None
        self._check_sync()
        self._report_lag(lag)

    def _check_sync(self) -> None:
        if self.feed.status is SyncStatus.IN_SYNC:
            self._synced_once = True
            self.failing.pop(None, None)

    def _report_lag(self, lag: float) -> None:
        self.state.lag = lag
        if self.on_lag is not None:
            self.on_lag(lag)
