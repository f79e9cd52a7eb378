"""The live feed: once a second, what this replica is doing, as JSON over a WebSocket.

``GET /feed`` on the health port upgrades to a WebSocket (trio-websocket) that receives one
JSON object per interval::

    {"type": "replica", "replica": "127.0.0.11:5473", "time": <unix seconds>,
     "connections": 17, "sessions": {"typha-gob": {"felix": 9}, "grpc": {"felix": 8}},
     "seq": {"felix": 812, ...}, "updates_per_s": {"felix": 40.0, ...},
     "lag_p50_ms": 0.0, "lag_p99_ms": 12.5, "bytes_per_s": 51200.0,
     "watches": {"count": 9, "stale": [], "max_silent_s": 4.2}}

``lag`` is read at the moment of the sample: for each streaming session, how far (in the
cache's time) the newest breadcrumb it has been sent trails the newest breadcrumb of its
syncer's cache, 0 when it has been sent everything.  It covers this replica's fan-out only:
not the datastore write, the watch and the conversion before the cache, nor the network and
the agent after the socket write, so a replica whose clients keep up reports 0 while a write
still takes milliseconds from the API server to an agent.  ``watches`` is the datastore side:
how many watch streams run, which are stale (silent past their deadline or known to have
missed changes) and the longest silence (:class:`~trio_typha.datastore.stall.WatchBoard`).
:class:`ReplicaSampler` computes a sample from the connection registry and the caches
(synchronous, no I/O); :func:`serve_feed` is the WebSocket side.  The feed only reads: it
never writes to a client socket or touches the caches, and a slow dashboard only delays its
own messages (trio-websocket's send waits on that one socket).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from ..cache.core import Breadcrumb
from ..cache.feed import CacheFeed
from ..datastore.stall import WatchState
from ..sessions.connections import ConnectionRegistry, State

if TYPE_CHECKING:  # imported by the first feed (see observe/httpd.py)
    from trio_websocket import WebSocketConnection

log = logging.getLogger(__name__)

FEED_PATH = "/feed"


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank), 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class ReplicaSampler:
    """Turns the registry and caches into the feed's numbers; rates are since the last call."""

    def __init__(self, name: str, registry: ConnectionRegistry,
                 feeds: Mapping[str, CacheFeed],
                 watches: Callable[[], Iterable[WatchState]] = tuple) -> None:
        self.name = name
        self.registry = registry
        self.feeds = feeds
        self.watches = watches
        self._crumbs: dict[str, Breadcrumb] = {}
        self._bytes: dict[int, int] = {}
        self._at: float | None = None

    def sample(self, now: float) -> dict[str, Any]:
        """``now`` is trio's clock (for the rates)."""
        elapsed = (now - self._at) if self._at is not None else 0.0
        self._at = now
        sessions: dict[str, dict[str, int]] = {}
        lags: list[float] = []
        sent = 0
        seen: dict[int, int] = {}
        conns = 0
        for conn in self.registry:
            conns += 1
            for s in conn.sessions.values():
                by_syncer = sessions.setdefault(s.protocol, {})
                by_syncer[s.syncer_type] = by_syncer.get(s.syncer_type, 0) + 1
                if s.state is State.STREAMING:
                    lags.append(s.lag()[1])
                key = id(s)
                seen[key] = s.bytes_sent
                sent += s.bytes_sent - self._bytes.get(key, 0)
        self._bytes = seen
        seq: dict[str, int] = {}
        rates: dict[str, float] = {}
        for syncer, feed in self.feeds.items():
            latest = feed.latest
            seq[syncer] = latest.seq
            updates = 0
            crumb = self._crumbs.get(syncer)
            while crumb is not None and crumb is not latest and crumb.next is not None:
                crumb = crumb.next
                updates += len(crumb.updates)
            self._crumbs[syncer] = latest
            rates[syncer] = round(updates / elapsed, 1) if elapsed > 0 else 0.0
        return {"type": "replica", "replica": self.name, "time": round(time.time(), 3),
                "connections": conns, "sessions": sessions, "seq": seq,
                "updates_per_s": rates,
                "lag_p50_ms": round(quantile(lags, 0.5) * 1e3, 2),
                "lag_p99_ms": round(quantile(lags, 0.99) * 1e3, 2),
                "bytes_per_s": round(sent / elapsed, 1) if elapsed > 0 else 0.0,
                "watches": self._watches()}

    def _watches(self) -> dict[str, Any]:
        states = list(self.watches())
        return {"count": len(states), "stale": [w.name for w in states if w.stale],
                "max_silent_s": round(max((w.age for w in states), default=0.0), 1)}


async def serve_feed(ws: WebSocketConnection, sampler: ReplicaSampler, *,
                     interval: float = 1.0) -> None:
    """Send a sample now and then every ``interval`` until the peer goes away.

    Rates are per call of ``sampler``, so give each WebSocket a sampler of its own.  What the
    peer sends is read and ignored, so a close is noticed at once (and frees its slot).
    """
    async def send() -> None:
        while True:
            await ws.send_message(json.dumps(sampler.sample(trio.current_time()),
                                             separators=(",", ":")))
            await trio.sleep(interval)

    async def ignore_input() -> None:
        while True:
            await ws.get_message()

    async with trio.open_nursery() as nursery:
        for task in (send, ignore_input):
            nursery.start_soon(_until_closed, task, nursery.cancel_scope)


async def _until_closed(task: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
    from trio_websocket import ConnectionClosed

    try:
        await task()
    except ConnectionClosed:
        log.debug("Live feed client went away")
        scope.cancel()
