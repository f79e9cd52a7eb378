"""The protocol rules of one Sync stream, as a pure state machine (no I/O, no clock).

The trio shell (:mod:`.sync_service`) asks this object what to send and when, feeds it
what the client sent and the current time, and turns the :class:`GrpcError` it raises into
the end of the stream.  Phases, h11-style::

    AWAIT_START --start--> SNAPSHOT --snapshot_sent()--> LIVE

Pings and the pong timeout only run in LIVE, as in Typha.
"""

from __future__ import annotations

__sans_io__ = True

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ...cache.core import Breadcrumb
from ...grpcwire.status import GrpcError, StatusCode
from ...model.kv import SYNCER_TYPES, SyncStatus
from ...sessions.lag import Lag, LagPolicy
from ...sessions.liveness import Liveness
from ...sessions.settings import ServerSettings
from . import encode_once
from . import typha_pb2 as pb


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
        self.lag = LagPolicy(self.settings)
        self.liveness: Liveness[int] = Liveness(self.settings, self._rng)
        self._ping_id = 0

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
        # An ack answers every earlier ping too (they may have crossed in flight).
        if not self.liveness.pong(ping_id, now, answers_earlier=True):
            raise GrpcError(StatusCode.INVALID_ARGUMENT, f"ack for unknown ping id {ping_id}")

    # --- what to send -------------------------------------------------------------------

    def snapshot_sent(self, status: SyncStatus, now: float) -> None:
        """The header, snapshot and ``finished`` are out: start the live phase."""
        self.phase = Phase.LIVE
        self.last_status_sent = status
        self.live_since = now
        self.lag.snapshot_sent(now)
        self.liveness.start(now)

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
        self.liveness.ping_sent(self._ping_id, now)
        return encode_once.ping_message(self._ping_id, timestamp_ns)

    # --- liveness -----------------------------------------------------------------------

    @property
    def next_ping_at(self) -> float:
        return self.liveness.next_ping_at

    @property
    def last_rtt(self) -> float | None:
        return self.liveness.last_rtt

    @property
    def pong_deadline(self) -> float:
        """When the stream dies unless an ack arrives first (inf before the live phase)."""
        return self.liveness.deadline

    def check_pong(self, now: float) -> None:
        if self.liveness.expired(now):
            raise GrpcError(StatusCode.DEADLINE_EXCEEDED,
                            f"no ping ack for {self.liveness.silence(now):.1f}s "
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
