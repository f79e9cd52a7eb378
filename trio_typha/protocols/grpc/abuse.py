"""Per-connection HTTP/2 flood budgets (pure: the caller passes the time).

After CVE-2023-44487 (rapid reset) nginx, Envoy and Go's x/net/http2 bound what one
connection may make the server do for free.  A frame that opens no stream and carries no
data still costs parsing, h2 bookkeeping and often an answer; a peer sending them as fast as
it can holds a core.  :class:`FloodGuard` counts such frames per kind in one-second
windows; the first kind over its budget ends the connection (GOAWAY ENHANCE_YOUR_CALM).

The budgets are far above what a Typha client needs (one stream per connection, a
SETTINGS and its ACK, window updates as it reads): a legitimate peer never comes near them.
WINDOW_UPDATE is the one a busy legitimate reader sends many of (one or two per DATA
frame it takes), so its budget grows with the DATA frames we sent in the same window.

A connection may also carry an :class:`~trio_typha.sessions.budgets.Account`: the same
frames are then charged against the budgets its source address and the process share, and
an overdraft closes it the same way; WINDOW_UPDATE, and PING and SETTINGS while we are
sending the peer data, are not (a legitimate reader sends them in step with our data).
"""

from __future__ import annotations

__sans_io__ = True

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...sessions.budgets import Account, Overdraft


class Flood(enum.Enum):
    """What a peer floods us with (the ``kind`` label of ``typha_h2_abuse_closed``)."""

    RAPID_RESET = "rapid_reset"  # streams reset by the peer, or by us because of it
    NEW_STREAMS = "new_streams"  # HEADERS opening streams
    SETTINGS = "settings"
    PING = "ping"
    WINDOW_UPDATE = "window_update"
    PRIORITY = "priority"
    EMPTY_DATA = "empty_data"  # DATA frames with no payload that do not end the stream


DEFAULT_BUDGETS: Mapping[Flood, int] = {
    Flood.RAPID_RESET: 100,
    Flood.NEW_STREAMS: 200,
    Flood.SETTINGS: 50,
    Flood.PING: 100,
    Flood.WINDOW_UPDATE: 1000,
    Flood.PRIORITY: 100,
    Flood.EMPTY_DATA: 100,
}


@dataclass(frozen=True, slots=True)
class FloodLimits:
    """Frames per second per kind, before the connection is closed."""

    per_second: Mapping[Flood, int] = field(default_factory=lambda: dict(DEFAULT_BUDGETS))
    #: WINDOW_UPDATE frames allowed on top of the budget per DATA frame we sent.
    window_updates_per_data_frame: int = 2


@dataclass(frozen=True, slots=True)
class FloodReport:
    """Why a connection was closed: which kind, how many in how long, against what."""

    kind: Flood
    count: int
    seconds: float
    limit: int
    #: Set when a budget shared with other connections ran dry, not this one's own.
    shared: Overdraft | None = None

    def __str__(self) -> str:
        if self.shared is not None:
            return str(self.shared)
        return (f"{self.kind.value} flood: {self.count} frames in {self.seconds:.2f}s "
                f"(budget {self.limit}/s)")


_NEVER_SHARED = frozenset({Flood.WINDOW_UPDATE})
_ANSWERING_DATA = frozenset({Flood.WINDOW_UPDATE, Flood.PING, Flood.SETTINGS})


class FloodGuard:
    """Counts flood-prone frames in one-second windows; reports the first kind over budget."""

    WINDOW = 1.0

    def __init__(self, limits: FloodLimits | None = None, *,
                 shared: Account | None = None) -> None:
        self.limits = limits or FloodLimits()
        self.shared = shared
        self._start: float | None = None
        self._counts: dict[Flood, int] = dict.fromkeys(Flood, 0)
        self._data_sent = 0
        self._data_sent_before = 0  # in the previous window: their updates may come now
        #: Totals over the connection's life, for the closing log line.
        self.totals: dict[Flood, int] = dict.fromkeys(Flood, 0)

    def _roll(self, now: float) -> None:
        if self._start is None or now - self._start >= self.WINDOW:
            recent = self._start is not None and now - self._start < 2 * self.WINDOW
            self._data_sent_before = self._data_sent if recent else 0
            self._start = now
            self._counts = dict.fromkeys(Flood, 0)
            self._data_sent = 0

    def data_sent(self, now: float, frames: int = 1) -> None:
        """We sent ``frames`` DATA frames: the peer may answer each with window updates."""
        self._roll(now)
        self._data_sent += frames

    def _unshared(self) -> frozenset[Flood]:
        """Kinds not charged to the shared budgets now: WINDOW_UPDATE always (it tracks our
        own sending), and PING and SETTINGS while we are sending this peer data (a client
        reading a snapshot probes its bandwidth with PINGs)."""
        if self._data_sent or self._data_sent_before:
            return _ANSWERING_DATA
        return _NEVER_SHARED

    def count(self, kind: Flood, now: float) -> FloodReport | None:
        """Count one frame of ``kind``; a report if that put the window over budget."""
        self._roll(now)
        self.totals[kind] += 1
        n = self._counts[kind] = self._counts[kind] + 1
        limit = self.limits.per_second[kind]
        if kind is Flood.WINDOW_UPDATE:
            limit += self.limits.window_updates_per_data_frame * (
                self._data_sent + self._data_sent_before)
        assert self._start is not None
        if n > limit:
            return FloodReport(kind, n, max(now - self._start, 0.0), limit)
        if self.shared is not None and kind not in self._unshared() and \
                (overdraft := self.shared.charge(kind.value, now)) is not None:
            return FloodReport(kind, n, max(now - self._start, 0.0), limit, overdraft)
        return None
