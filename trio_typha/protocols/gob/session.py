"""Sans-IO server side of one Typha gob connection.

The session decides everything protocol-level: whether a hello is accepted, which streams
to use, when the client has been silent too long, what bytes a batch of breadcrumbs or a
ping becomes.  It never reads a clock or touches a socket: the caller passes ``now`` (trio's
clock) into every method and carries out the :data:`Action` values it gets back.

Phases (docs/typha-protocol.md §2.3)::

    AWAIT_HELLO --hello--> QUEUED --turn--> AWAIT_ACK1 --ACK--> SNAPSHOT --written--> AWAIT_ACK2 --ACK--> STREAMING
                                  \\--legacy-----------------> SNAPSHOT --written------------------------^

ServerHello goes out as soon as the hello is read; the session then waits for its turn at
sending a snapshot (:mod:`trio_typha.sessions.snapshot_turns`: a storm's snapshots are sent
a bounded number at a time), pinging on the plain stream meanwhile so that a client's read
timeout never fires while it waits, and taking pongs.  A compressed session then writes
MsgDecoderRestart on the plain stream, the pre-built snappy snapshot after ACK#1 and starts a
second snappy stream after ACK#2; nothing is written between a restart and its ACK (pongs
to pings sent while queued may come before ACK#1).  A legacy session streams everything
plainly.
"""

from __future__ import annotations

__sans_io__ = True

import enum
import math
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ...cache.core import Breadcrumb
from ...model.kv import SyncStatus
from ...sessions.lag import Lag, LagPolicy
from ...sessions.liveness import Liveness
from ...sessions.settings import ServerSettings
from . import encode_once, snappy
from .codec import NEED_DATA, Decoder, GobError
from .gotime import GoTime
from .messages import (
    COMPRESSION_SNAPPY,
    ENVELOPE,
    REGISTRY,
    MsgACK,
    MsgClientHello,
    MsgPing,
    MsgPong,
    MsgServerHello,
    message_name,
)

#: Typha serves an empty syncer type as felix.
DEFAULT_SYNCER_TYPE = "felix"


class Phase(enum.Enum):
    AWAIT_HELLO = "await-hello"
    QUEUED = "queued"
    AWAIT_ACK1 = "await-ack-1"
    SNAPSHOT = "snapshot"
    AWAIT_ACK2 = "await-ack-2"
    STREAMING = "streaming"
    CLOSED = "closed"


#: Phases in which the session pings and the pong deadline applies.
_PINGED = frozenset({Phase.QUEUED, Phase.STREAMING})


@dataclass(frozen=True, slots=True)
class Send:
    """Write these bytes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class SendSnapshot:
    """Write the snapshot (pre-built snappy stream if ``compressed``, else plain MsgKVs),
    then call :meth:`ServerSession.snapshot_sent`."""

    compressed: bool


@dataclass(frozen=True, slots=True)
class AwaitTurn:
    """Wait for a turn at sending a snapshot, sending :meth:`ServerSession.ping` when
    :meth:`ServerSession.ping_due`; then call :meth:`ServerSession.turn_started`."""


@dataclass(frozen=True, slots=True)
class StartStreaming:
    """Handshake and snapshot are done: follow the cache from the snapshot's breadcrumb."""


@dataclass(frozen=True, slots=True)
class GraceUsed:
    """The client is behind by ``age`` seconds but still inside its post-snapshot grace."""

    age: float


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection (no goodbye message exists); ``reason`` is for the log."""

    reason: str


Action = Send | AwaitTurn | SendSnapshot | StartStreaming | GraceUsed | Close


class ServerSession:
    """One client connection's protocol state (Typha's per-connection handler, minus I/O)."""

    def __init__(self, *, settings: ServerSettings, syncer_types: Collection[str],
                 server_version: str, conn_id: int, now: float,
                 rng: random.Random | None = None) -> None:
        self.settings = settings.normalized()
        self.syncer_types = frozenset(syncer_types)
        self.server_version = server_version
        self.conn_id = conn_id
        self._rng = rng if rng is not None else random.Random()
        self._decoder = Decoder(REGISTRY, ENVELOPE,
                                max_message_size=self.settings.max_inbound_message)
        self.phase = Phase.AWAIT_HELLO
        # Handshake and ACK timeouts; while streaming the pong deadline applies instead.
        self._phase_deadline = now + self.settings.handshake_timeout
        self.hello: MsgClientHello | None = None
        self.syncer_type = ""
        self.compressed = False
        self.close_reason: str | None = None
        self.lag = LagPolicy(self.settings)
        self.liveness: Liveness[GoTime] = Liveness(self.settings, self._rng)
        self._last_status = SyncStatus.WAIT_FOR_DATASTORE
        self._early_ack = False

    # ---- input from the client

    def receive_data(self, data: bytes | bytearray, now: float) -> list[Action]:
        """Bytes read from the client; returns what to do about them."""
        if self.phase is Phase.CLOSED:
            return []
        self._decoder.feed(data)
        actions: list[Action] = []
        while self._still_open():
            try:
                envelope = self._decoder.next_value()
            except GobError as exc:
                actions.append(self._close(f"bad data from client: {exc}"))
                break
            if envelope is NEED_DATA:
                break
            actions.extend(self._on_message(envelope.message, now))
        return actions

    def _on_message(self, msg: object, now: float) -> list[Action]:
        phase = self.phase
        if phase is Phase.AWAIT_HELLO:
            return self._on_hello(msg, now)
        if phase is Phase.QUEUED or (phase is Phase.AWAIT_ACK1 and isinstance(msg, MsgPong)):
            # Waiting for a turn only pongs are valid; and a pong may still come after
            # the restart was written, before its ACK.
            if isinstance(msg, MsgPong):
                self._on_pong(msg, now)
                return []
            return [self._close(f"unexpected {message_name(msg)} (expected MsgPong)")]
        if self.compressed and phase is not Phase.STREAMING:
            # Between the restarts only the two ACKs are valid.
            if isinstance(msg, MsgACK):
                if phase is Phase.AWAIT_ACK1:
                    self.phase = Phase.SNAPSHOT
                    self._phase_deadline = math.inf
                    return [SendSnapshot(compressed=True)]
                if phase is Phase.AWAIT_ACK2:
                    return self._start_streaming(now, [Send(encode_once.SNAPPY_STREAM_START)])
                if not self._early_ack:
                    # ACK#2 may overtake the shell's report that the snapshot was written.
                    self._early_ack = True
                    return []
            return [self._close(f"unexpected {message_name(msg)} (expected MsgACK)")]
        # Streaming (or a legacy client's snapshot): only pongs.
        if isinstance(msg, MsgPong):
            self._on_pong(msg, now)
            return []
        return [self._close(f"unexpected {message_name(msg)} (expected MsgPong)")]

    def _on_hello(self, msg: object, now: float) -> list[Action]:
        # Same checks in the same order as Typha; a rejected client gets no reply at all.
        if not isinstance(msg, MsgClientHello):
            return [self._close(f"first message was {message_name(msg)}, not MsgClientHello")]
        self.hello = msg
        syncer_type = msg.syncer_type or DEFAULT_SYNCER_TYPE
        if syncer_type not in self.syncer_types:
            return [self._close(f"unknown syncer type {syncer_type!r}")]
        compressed = (COMPRESSION_SNAPPY in msg.supported_compression_algorithms
                      and msg.supports_decoder_restart)
        if not msg.supports_modern_policy_keys:
            return [self._close("client does not support modern policy keys (too old)")]
        self.syncer_type = syncer_type
        self.compressed = compressed
        hello = encode_once.STREAM_PREFIX + encode_once.encode(MsgServerHello(
            self.server_version, syncer_type, True, self.conn_id))
        self.phase = Phase.QUEUED
        self.liveness.start(now)  # pings and the pong deadline while it waits its turn
        return [Send(hello), AwaitTurn()]

    def turn_started(self, now: float) -> list[Action]:
        """The session's turn at sending a snapshot has come."""
        if self.phase is not Phase.QUEUED:
            raise RuntimeError(f"turn_started in phase {self.phase.name}")
        if self.compressed:
            self.phase = Phase.AWAIT_ACK1
            self._phase_deadline = now + self.settings.pong_timeout
            return [Send(encode_once.RESTART_FOR_SNAPSHOT)]
        self.phase = Phase.SNAPSHOT
        self._phase_deadline = math.inf
        return [SendSnapshot(compressed=False)]

    def _on_pong(self, msg: MsgPong, now: float) -> None:
        # Any pong proves the client alive, even one for a ping we no longer remember.
        self.liveness.pong(msg.ping_timestamp, now)

    # ---- progress reported by the shell

    def snapshot_sent(self, now: float) -> list[Action]:
        """The snapshot has been handed to the socket in full."""
        if self.phase is not Phase.SNAPSHOT:
            raise RuntimeError(f"snapshot_sent in phase {self.phase.name}")
        self.lag.snapshot_sent(now)
        if not self.compressed:
            return self._start_streaming(now, [])
        if self._early_ack:
            return self._start_streaming(now, [Send(encode_once.SNAPPY_STREAM_START)])
        self.phase = Phase.AWAIT_ACK2
        self._phase_deadline = now + self.settings.pong_timeout
        return []

    def _start_streaming(self, now: float, actions: list[Action]) -> list[Action]:
        self.phase = Phase.STREAMING
        self.liveness.start(now)
        return [*actions, StartStreaming()]

    def check_timers(self, now: float) -> list[Action]:
        """Call when ``now`` reaches :attr:`deadline`: handshake, ACK and pong timeouts."""
        if self.phase is Phase.CLOSED or now < self.deadline:
            return []
        if self.phase is Phase.AWAIT_HELLO:
            reason = (f"handshake timeout: no MsgClientHello within "
                      f"{self.settings.handshake_timeout}s")
        elif self.phase is Phase.QUEUED:
            reason = (f"no MsgPong within {self.settings.pong_timeout}s while waiting to "
                      "be sent the snapshot")
        elif self.phase in (Phase.AWAIT_ACK1, Phase.AWAIT_ACK2):
            reason = f"no MsgACK within {self.settings.pong_timeout}s"
        else:
            reason = f"no MsgPong within {self.settings.pong_timeout}s"
        return [self._close(reason)]

    # ---- output while streaming

    def frame(self, message: bytes) -> bytes:
        """A gob message as it goes on this connection's current stream (plain until the
        second snappy stream has started)."""
        if self.compressed and self.phase is Phase.STREAMING:
            return snappy.chunks(message)
        return message

    def status(self, status: SyncStatus) -> bytes:
        """MsgSyncStatus if ``status`` differs from the last one sent (first: vs 0)."""
        if status == self._last_status:
            return b""
        self._last_status = status
        return encode_once.STATUS_CHUNKS[status] if self.compressed else encode_once.STATUS[status]

    def updates(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        """Shared encodings of each breadcrumb's deltas, then the status if it changed."""
        data = self.render(crumbs)
        self.committed(crumbs)
        return data

    def fanout_key(self) -> tuple[bool, SyncStatus]:
        """Sessions with equal keys get equal bytes from :meth:`render` for equal crumbs."""
        return (self.compressed, self._last_status)

    def render(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        """What :meth:`updates` would return, without recording that it was sent."""
        per_crumb = encode_once.deltas_chunks if self.compressed else encode_once.deltas
        parts = [per_crumb(c) for c in crumbs]
        status = crumbs[-1].status
        if status != self._last_status:
            parts.append(encode_once.STATUS_CHUNKS[status] if self.compressed
                         else encode_once.STATUS[status])
        return b"".join(parts)

    def committed(self, crumbs: Sequence[Breadcrumb]) -> None:
        """The bytes :meth:`render` made of ``crumbs`` belong to the client now."""
        self._last_status = crumbs[-1].status

    def check_lag(self, age: float, now: float) -> list[Action]:
        """The client is processing a breadcrumb ``age`` seconds older than the newest."""
        verdict = self.lag.check(age, now)
        if verdict is Lag.DROP:
            return [self._close(self.lag.drop_reason(age))]
        if verdict is Lag.GRACE_FIRST:
            return [GraceUsed(age)]
        return []

    def _still_open(self) -> bool:
        # A call, not an inline comparison: handling a message may close the session,
        # which a type checker's narrowing of self.phase cannot see.
        return self.phase is not Phase.CLOSED

    @property
    def deadline(self) -> float:
        """When :meth:`check_timers` must next run (inf: no timer pending)."""
        if self.phase in _PINGED:
            return self.liveness.deadline
        return self._phase_deadline

    @property
    def next_ping_at(self) -> float:
        return self.liveness.next_ping_at if self.phase in _PINGED else math.inf

    @property
    def pongs(self) -> int:
        return self.liveness.pongs

    @property
    def last_rtt(self) -> float | None:
        return self.liveness.last_rtt

    def ping_due(self, now: float) -> bool:
        return self.phase in _PINGED and self.liveness.ping_due(now)

    def ping(self, now: float, wall: GoTime) -> bytes:
        """A MsgPing stamped ``wall`` (the wall clock: it is data, echoed by the client)."""
        self.liveness.ping_sent(wall, now)
        return self.frame(encode_once.encode(MsgPing(wall)))

    def _close(self, reason: str) -> Close:
        self.phase = Phase.CLOSED
        self.close_reason = reason
        self._phase_deadline = math.inf
        return Close(reason)


def collect_batch(first: Breadcrumb, newest: float, *, min_batching_age: float,
                  max_updates: int) -> list[Breadcrumb]:
    """Breadcrumbs to send together, starting at ``first`` (Typha's delta batching).

    A young breadcrumb goes out alone straight away.  A client that is behind gets the
    breadcrumbs already published after it as well, up to ``max_updates`` updates, stopping
    at the first young one.  ``newest`` is the timestamp of the cache's newest breadcrumb.
    """
    batch = [first]
    if newest - first.timestamp < min_batching_age:
        return batch
    count = len(first.updates)
    crumb = first
    while crumb.next is not None and count < max_updates:
        crumb = crumb.next
        batch.append(crumb)
        count += len(crumb.updates)
        if newest - crumb.timestamp < min_batching_age:
            break
    return batch
