"""Typha's fall-behind rule, shared by every protocol's session (pure).

A client whose next breadcrumb is more than ``max_fall_behind`` older than the newest one is
dropped, except during a grace period after its snapshot was sent: a new client may take a
while to catch up with what happened while it was reading the snapshot.
"""

from __future__ import annotations

__sans_io__ = True

import enum

from .settings import ServerSettings


class Lag(enum.Enum):
    OK = "ok"
    GRACE_FIRST = "grace-first"  # behind, tolerated, and the first time (log it, count it)
    GRACE = "grace"  # behind, tolerated again
    DROP = "drop"


class LagPolicy:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.snapshot_sent_at: float | None = None
        self.grace_used = False

    def snapshot_sent(self, now: float) -> None:
        self.snapshot_sent_at = now

    def check(self, age: float, now: float) -> Lag:
        """The client is about to get a breadcrumb ``age`` seconds older than the newest."""
        if age <= self.settings.max_fall_behind:
            return Lag.OK
        started = self.snapshot_sent_at if self.snapshot_sent_at is not None else now
        if now > started + self.settings.new_client_fall_behind_grace:
            return Lag.DROP
        if self.grace_used:
            return Lag.GRACE
        self.grace_used = True
        return Lag.GRACE_FIRST

    def drop_reason(self, age: float) -> str:
        return (f"client fell behind by {age:.1f}s "
                f"(limit {self.settings.max_fall_behind:g}s)")
