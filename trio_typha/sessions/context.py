"""What every client session needs from the server, whatever its protocol."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import trio

from ..cache.feed import CacheFeed
from ..model.kv import SYNCER_TYPES
from ..observe.metrics import Metrics, SyncerMetrics
from ..observe.throttle import LogThrottle
from .budgets import SharedBudgets
from .connections import ConnectionRegistry, Session
from .settings import ServerSettings
from .snapshot_gate import SnapshotGate

log = logging.getLogger(__name__)


@dataclass
class ServerContext:
    """Shared by all sessions: the caches, the settings and the shutdown signal."""

    feeds: Mapping[str, CacheFeed]
    settings: ServerSettings = field(default_factory=ServerSettings)
    version: str = ""
    #: Set when the server starts draining: sessions send GOAWAY / close cleanly.
    draining: trio.Event = field(default_factory=trio.Event)
    #: The live connections and their sessions (one registry for the whole server).
    registry: ConnectionRegistry = field(default_factory=ConnectionRegistry)
    metrics: Metrics = field(
        default_factory=lambda: Metrics(process_metrics=False, clock=trio.current_time))
    _syncer_metrics: dict[str, SyncerMetrics] = field(default_factory=dict)
    #: Rate limit for log lines a peer can provoke at will, keyed by (peer host, kind).
    peer_log: LogThrottle = field(default_factory=LogThrottle)
    #: Flood budgets every connection from one address, and every connection, share.
    budgets: SharedBudgets = field(default_factory=SharedBudgets)
    #: Hello lines: a burst per peer host per interval (a peer can start syncs at will).
    hello_log: LogThrottle = field(default_factory=lambda: LogThrottle(10.0, burst=10))
    #: Turns at sending a snapshot (``settings.max_snapshot_sends`` at once); made from the
    #: settings when not given.
    snapshot_gate: SnapshotGate | None = None

    def __post_init__(self) -> None:
        if self.snapshot_gate is None:
            self.snapshot_gate = SnapshotGate(self.settings.max_snapshot_sends)

    @property
    def snapshots(self) -> SnapshotGate:
        """The process's snapshot turns (every protocol's sessions share them)."""
        assert self.snapshot_gate is not None
        return self.snapshot_gate

    @property
    def sessions(self) -> dict[int, Session]:
        """Every live session by id (a view of the registry)."""
        return self.registry.sessions

    def next_conn_id(self) -> int:
        return self.registry.next_id()

    def syncer_metrics(self, syncer_type: str) -> SyncerMetrics:
        """Typha's per-syncer series for ``syncer_type`` (one of the four)."""
        sm = self._syncer_metrics.get(syncer_type)
        if sm is None:
            label = syncer_type if syncer_type in SYNCER_TYPES else "felix"
            sm = self._syncer_metrics[syncer_type] = SyncerMetrics(self.metrics, label)
        return sm

    def feed(self, syncer_type: str) -> CacheFeed | None:
        """The cache of ``syncer_type`` (``""`` means felix, as in Typha), or None."""
        return self.feeds.get(syncer_type or "felix")
