"""Per-connection limits and timers, derived from the configuration declaration (pure).

Each field that comes from a Typha parameter names it (:func:`from_param`); its default is
that parameter's default after Typha's re-defaulting, so no default is written twice.
"""

from __future__ import annotations

__sans_io__ = True

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..config import Config, param_by_flag


def from_param(name: str) -> Any:
    """A :class:`ServerSettings` field taken from Typha parameter ``name``."""
    p = param_by_flag(name)
    return dataclasses.field(default=p.effective(p.default), metadata={"typha_param": p.name})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What every session of either protocol is held to (durations in seconds)."""

    ping_interval: float = from_param("ServerPingIntervalSecs")
    pong_timeout: float = from_param("ServerPongTimeoutSecs")
    handshake_timeout: float = from_param("ServerHandshakeTimeoutSecs")
    write_timeout: float = from_param("ServerWriteTimeoutSecs")
    max_fall_behind: float = from_param("ServerMaxFallBehindSecs")
    new_client_fall_behind_grace: float = from_param("ServerNewClientFallBehindGracePeriod")
    min_batching_age: float = from_param("ServerMinBatchingAgeThresholdSecs")
    max_message_size: int = from_param("ServerMaxMessageSize")  # KVs per message
    snapshot_reuse_age: float = from_param("SnapshotReuseAgeSecs")
    max_concurrent_streams: int = from_param("ServerMaxConcurrentStreams")
    drain_timeout: float = from_param("ServerDrainTimeoutSecs")
    h2_idle_timeout: float = from_param("ServerH2IdleTimeoutSecs")
    resume_digest_budget: int = from_param("ResumeDigestBudget")
    max_snapshot_sends: int = from_param("ServerMaxSnapshotSends")
    #: Bytes; a bigger client message is a protocol error (not configurable, as in Typha).
    max_inbound_message: int = 1 << 20

    @classmethod
    def from_config(cls, cfg: Config) -> ServerSettings:
        """The settings ``cfg`` asks for, re-defaulted and normalized as Typha does."""
        return cls(
            ping_interval=cfg.ping_interval, pong_timeout=cfg.server_pong_timeout_secs,
            handshake_timeout=cfg.handshake_timeout, write_timeout=cfg.write_timeout,
            max_fall_behind=cfg.max_fall_behind,
            new_client_fall_behind_grace=cfg.new_client_fall_behind_grace,
            min_batching_age=cfg.min_batching_age, max_message_size=cfg.max_message_size,
            snapshot_reuse_age=cfg.snapshot_reuse_age_secs,
            max_concurrent_streams=cfg.server_max_concurrent_streams,
            drain_timeout=cfg.server_drain_timeout_secs,
            h2_idle_timeout=cfg.server_h2_idle_timeout_secs,
            resume_digest_budget=cfg.resume_digest_budget,
            max_snapshot_sends=cfg.server_max_snapshot_sends).normalized()

    def normalized(self) -> ServerSettings:
        """Apply Typha's re-defaulting: PongTimeout must exceed twice the ping interval."""
        if self.pong_timeout <= 2 * self.ping_interval:
            return dataclasses.replace(self, pong_timeout=6 * self.ping_interval)
        return self
