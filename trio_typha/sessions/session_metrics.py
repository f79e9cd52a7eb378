"""What every protocol's session reports as it goes: its state in the registry, the
snapshot-send time, the streaming gauge and ping latency (one helper for both shells)."""

from __future__ import annotations

from types import TracebackType

from ..observe.metrics import SyncerMetrics
from .connections import Session, State


class SessionReport:
    """Use as ``with SessionReport(info, metrics) as report:`` around a session's life;
    the streaming gauge counts the session from :meth:`streaming` until the block ends."""

    def __init__(self, info: Session, metrics: SyncerMetrics) -> None:
        self.info = info
        self.metrics = metrics
        self._snapshot_started: float | None = None
        self._streaming = False

    def __enter__(self) -> SessionReport:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """The session is over (idempotent)."""
        if self._streaming:
            self.metrics.streaming.dec()
            self._streaming = False

    def snapshot_started(self, now: float) -> None:
        self.info.state = State.SNAPSHOT
        self._snapshot_started = now

    def streaming(self, now: float) -> None:
        """The snapshot is out: the session streams from ``now``."""
        if self._snapshot_started is not None:
            self.metrics.snapshot_send_secs.observe(now - self._snapshot_started)
        self.metrics.streaming.inc()
        self._streaming = True
        self.info.state = State.STREAMING

    def measured_rtt(self, rtt: float | None) -> None:
        """Report a round-trip time a pong just measured (``Liveness.take_rtt()``), if any."""
        if rtt is not None:
            self.metrics.ping_latency.observe(rtt)
