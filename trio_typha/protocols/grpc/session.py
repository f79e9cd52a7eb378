"""The protocol rules of one Sync stream, as a pure state machine (no I/O, no clock).

The trio shell (:mod:`.sync_service`) asks this object what to send and when, feeds it
what the client sent and the current time, and turns the :class:`GrpcError` it raises into
the end of the stream.  Phases, h11-style::

    AWAIT_START --start--> [resume()] --> SNAPSHOT --snapshot_sent()--> LIVE
                                 \\--> DIGEST --on_digest()...--^

Pings and the pong timeout only run in LIVE, as in Typha.  :meth:`SyncSession.resume`
decides how a stream whose client kept a copy starts: by position (the breadcrumb it
reached is still in this cache's history), by digest (the client's hash tree is compared
with the cache's, :mod:`trio_typha.cache.digest`) or, failing both, with a snapshot.
"""

from __future__ import annotations

__sans_io__ = True

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ...cache.core import Breadcrumb, SnapshotCache
from ...cache.digest import DigestError, DigestExchange, Outcome, Query
from ...grpcwire.status import GrpcError, StatusCode
from ...model.kv import SYNCER_TYPES, SerializedUpdate, SyncStatus, UpdateType
from ...sessions.lag import Lag, LagPolicy
from ...sessions.liveness import Liveness
from ...sessions.settings import ServerSettings
from . import encode_once
from . import typha_pb2 as pb


class Phase(enum.Enum):
    AWAIT_START = "await-start"
    DIGEST = "digest"
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
    #: The client's position (0: none) and the root of its hash tree (None: none).
    resume_epoch: int = 0
    resume_seq: int = 0
    resume_root: int | None = None


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
        #: How the stream starts: "snapshot", "position" or "digest".
        self.method = "snapshot"
        #: The breadcrumb the client's copy is at after the start (position, digest).
        self.resume_from: Breadcrumb | None = None
        #: What the digest exchange found the client lacking.
        self.repair: Outcome | None = None
        #: Why a resume the client asked for was not possible (for the log).
        self.resume_note = ""
        self._exchange: DigestExchange | None = None

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
        if kind == "digest":
            raise GrpcError(StatusCode.INVALID_ARGUMENT, "digest answer not asked for")
        raise GrpcError(StatusCode.INVALID_ARGUMENT, "empty request message")

    def _on_start(self, start: pb.SyncRequestStart) -> ClientStart:
        syncer_type = start.syncer_type or "felix"
        if syncer_type not in SYNCER_TYPES:
            raise GrpcError(StatusCode.INVALID_ARGUMENT,
                            f"unknown syncer_type {start.syncer_type!r}; expected one of "
                            f"{', '.join(SYNCER_TYPES)} (or empty for felix)")
        root: int | None = None
        if start.HasField("resume") and start.resume.root:
            if len(start.resume.root) != 8:
                raise GrpcError(StatusCode.INVALID_ARGUMENT,
                                f"resume root is {len(start.resume.root)} bytes, not 8")
            root = int.from_bytes(start.resume.root, "big")
        self.start = ClientStart(syncer_type, start.hostname, start.info, start.version,
                                 start.client_conn_id, start.resume.epoch, start.resume.seq,
                                 root)
        self.phase = Phase.SNAPSHOT
        return self.start

    # --- how the stream starts ----------------------------------------------------------

    def resume(self, cache: SnapshotCache) -> bytes | None:
        """Decide how the stream starts; return the first digest query to send, or None
        once decided (:attr:`method`, :attr:`resume_from`, :attr:`repair`)."""
        start = self.start
        assert start is not None and self.phase is Phase.SNAPSHOT
        if start.resume_epoch:
            crumb = cache.position(start.resume_epoch, start.resume_seq)
            if crumb is not None:
                self.method, self.resume_from = "position", crumb
                return None
            self.resume_note = ("another epoch" if start.resume_epoch != cache.epoch
                                else f"seq {start.resume_seq} not in history "
                                     f"({cache.history_first_seq}..{cache.latest.seq})")
        if start.resume_root is None:
            return None
        if self.settings.resume_digest_budget <= 0:
            self.resume_note += "; resume by digest is off" if self.resume_note else \
                "resume by digest is off"
            return None
        # The repair is as of the newest breadcrumb now; what is published during the
        # exchange is replayed after it, so keys that change meanwhile still end right.
        self.resume_from = cache.latest
        self._exchange = DigestExchange(cache.tree, start.resume_root,
                                        self.settings.resume_digest_budget)
        return self._digest_step(self._exchange.begin())

    def on_digest(self, payload: bytes) -> bytes | None:
        """Handle the client's answer to the last digest query; return the next query, or
        None once the exchange is over."""
        assert self.phase is Phase.DIGEST and self._exchange is not None
        request = encode_once.parse_request(payload)
        kind = request.WhichOneof("msg")
        if kind != "digest":
            raise GrpcError(StatusCode.INVALID_ARGUMENT,
                            f"expected a digest answer, got {kind or 'an empty message'}")
        try:
            step = self._exchange.receive(encode_once.digest_answer(request.digest))
        except DigestError as exc:
            raise GrpcError(StatusCode.INVALID_ARGUMENT, f"bad digest answer: {exc}") from None
        return self._digest_step(step)

    def _digest_step(self, step: Query | Outcome) -> bytes | None:
        if isinstance(step, Query):
            self.phase = Phase.DIGEST
            return encode_once.digest_query_message(step)
        self.phase = Phase.SNAPSHOT
        self._exchange = None
        if step.over_budget:
            self.resume_from = None
            note = f"digest over budget ({step.work} > {self.settings.resume_digest_budget})"
            self.resume_note = f"{self.resume_note}; {note}" if self.resume_note else note
        else:
            self.method, self.repair = "digest", step
        return None

    def repair_updates(self, cache: SnapshotCache) -> list[SerializedUpdate]:
        """The KVs a resume by digest sends: the current entry of each differing key (a
        deletion where the key is gone now)."""
        assert self.repair is not None
        out = []
        for key in sorted({*self.repair.send, *self.repair.delete}):
            current = cache.get(key)
            out.append(current if current is not None else SerializedUpdate(
                key, None, update_type=UpdateType.DELETED))
        return out

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
