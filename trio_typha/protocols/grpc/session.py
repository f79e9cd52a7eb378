"""The protocol rules of one Sync stream, as a pure state machine (no I/O, no clock).

The trio shell (:mod:`.sync_service`) asks this object what to send and when, feeds it
what the client sent and the current time, and turns the :class:`GrpcError` it raises into
the end of the stream.  Phases, h11-style::

    AWAIT_START --start--> SNAPSHOT --snapshot_sent()--> LIVE

Pings and the pong timeout only run in LIVE, as in Typha.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ...cache.core import Breadcrumb
from ...model.kv import SYNCER_TYPES, SyncStatus
from ...server.lag import Lag, LagPolicy
from ...server.settings import ServerSettings
from . import encode_once
from . import typha_pb2 as pb
from .status import GrpcError, StatusCode


class Phase(enum.Enum):
    AWAIT_START = "await-start"
    SNAPSHOT = "snapshot"
    LIVE = "live"


@dataclass(frozen=True, slots=True)
class ClientStart:
    """What the client said about itself in its start message."""

    syncer_type: str  # normalized: "" is already "felix"
    hostname: str
    info: str
    version: str
    client_conn_id: int


class SyncSession:
    """Sans-IO state of one Sync stream after the HTTP/2 layer has accepted it."""

    def __init__(self, settings: ServerSettings, *, rng: random.Random | None = None) -> None:
        self.settings = settings.normalized()
        self._rng = rng or random.Random()
        self.phase = Phase.AWAIT_START
        self.start: ClientStart | None = None
        self.last_status_sent: SyncStatus | None = None
        self.live_since = 0.0
        self.last_pong_at = 0.0
        self.next_ping_at = float("inf")
        self.last_rtt: float | None = None
        self.lag = LagPolicy(self.settings)
        self._ping_id = 0
        self._pings_in_flight: dict[int, float] = {}  # id -> sent at; bounded by pong timeout

    # --- client messages ----------------------------------------------------------------

    def on_request(self, payload: bytes, now: float) -> ClientStart | None:
        """Handle one client message; return the start info if this was the start."""
        request = encode_once.parse_request(payload)
        kind = request.WhichOneof("msg")
        if self.phase is Phase.AWAIT_START:
            if kind != "start":
                raise GrpcError(StatusCode.INVALID_ARGUMENT,
                                f"first request must be 'start', got {kind or 'an empty message'}")
            return self._on_start(request.start)
        if kind == "ack":
            self._on_ack(request.ack.ping_id, now)
            return None
        if kind == "start":
            raise GrpcError(StatusCode.INVALID_ARGUMENT, "'start' sent twice")
        raise GrpcError(StatusCode.INVALID_ARGUMENT, "empty request message")

    def _on_start(self, start: pb.SyncRequestStart) -> ClientStart:
        syncer_type = start.syncer_type or "felix"
        if syncer_type not in SYNCER_TYPES:
            raise GrpcError(StatusCode.INVALID_ARGUMENT,
                            f"unknown syncer_type {start.syncer_type!r}; expected one of "
                            f"{', '.join(SYNCER_TYPES)} (or empty for felix)")
        self.start = ClientStart(syncer_type, start.hostname, start.info, start.version,
                                 start.client_conn_id)
        self.phase = Phase.SNAPSHOT
        return self.start

    def _on_ack(self, ping_id: int, now: float) -> None:
        sent_at = self._pings_in_flight.pop(ping_id, None)
        if sent_at is None:
            raise GrpcError(StatusCode.INVALID_ARGUMENT, f"ack for unknown ping id {ping_id}")
        # An ack answers every earlier ping too (they may have crossed in flight).
        for older in [i for i in self._pings_in_flight if i < ping_id]:
            del self._pings_in_flight[older]
        self.last_pong_at = now
        self.last_rtt = now - sent_at

    # --- what to send -------------------------------------------------------------------

    def snapshot_sent(self, status: SyncStatus, now: float) -> None:
        """The header, snapshot and ``finished`` are out: start the live phase."""
        self.phase = Phase.LIVE
        self.last_status_sent = status
        self.live_since = self.last_pong_at = now
        self.lag.snapshot_sent(now)
        self.next_ping_at = now + self._ping_gap()

    def messages_for(self, crumb: Breadcrumb) -> list[bytes]:
        """What the client must get for ``crumb``: its updates, then a status change."""
        out = self._messages([crumb], self.last_status_sent)
        self.last_status_sent = crumb.status
        return out

    def render(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        """:meth:`messages_for` of each of ``crumbs``, as one write, recording nothing."""
        return b"".join(self._messages(crumbs, self.last_status_sent))

    def committed(self, crumbs: Sequence[Breadcrumb]) -> None:
        """What :meth:`render` made of ``crumbs`` is the client's now."""
        self.last_status_sent = crumbs[-1].status

    @staticmethod
    def _messages(crumbs: Sequence[Breadcrumb], status: SyncStatus | None) -> list[bytes]:
        out = []
        for crumb in crumbs:
            update = encode_once.update_message(crumb)
            if update:
                out.append(update)
            if crumb.status != status:
                out.append(encode_once.status_message(crumb.status))
                status = crumb.status
        return out

    def ping(self, now: float, timestamp_ns: int) -> bytes:
        """The next ping; schedules the one after (interval plus up to 10% jitter)."""
        self._ping_id += 1
        self._pings_in_flight[self._ping_id] = now
        self.next_ping_at = now + self._ping_gap()
        return encode_once.ping_message(self._ping_id, timestamp_ns)

    def _ping_gap(self) -> float:
        interval = self.settings.ping_interval
        return interval + self._rng.uniform(0.0, 0.1 * interval)

    # --- liveness -----------------------------------------------------------------------

    @property
    def pong_deadline(self) -> float:
        """When the stream dies unless an ack arrives first (inf before the live phase)."""
        if self.phase is not Phase.LIVE:
            return float("inf")
        return self.last_pong_at + self.settings.pong_timeout

    def check_pong(self, now: float) -> None:
        if now >= self.pong_deadline:
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                            f"no ping ack for {now - self.last_pong_at:.1f}s "
                            f"(pong timeout {self.settings.pong_timeout:g}s)")

    def check_fall_behind(self, crumb: Breadcrumb, latest: Breadcrumb, now: float, *,
                          age: float | None = None) -> bool:
        """Raise UNAVAILABLE if the client is too far behind the newest breadcrumb.

        Age is measured like Typha (newest breadcrumb's time minus the one being sent) unless
        ``age`` is given (the feed's client_age, which counts events not yet cached).  A
        new client is tolerated for a grace period after its snapshot; returns True the
        first time that grace is used (for a log line).
        """
        if age is None:
            age = latest.timestamp - crumb.timestamp
        verdict = self.lag.check(age, now)
        if verdict is Lag.DROP:
            raise GrpcError(StatusCode.UNAVAILABLE, self.lag.drop_reason(age))
        return verdict is Lag.GRACE_FIRST
