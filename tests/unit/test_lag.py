"""Typha's fall-behind rule, shared by both protocols."""

from __future__ import annotations

from trio_typha.sessions.lag import Lag, LagPolicy
from trio_typha.sessions.settings import ServerSettings


def test_grace_then_drop() -> None:
    lag = LagPolicy(ServerSettings(max_fall_behind=10, new_client_fall_behind_grace=30))
    lag.snapshot_sent(100)
    assert lag.check(5, 101) is Lag.OK
    assert lag.check(11, 110) is Lag.GRACE_FIRST
    assert lag.check(20, 120) is Lag.GRACE
    assert lag.check(10, 140) is Lag.OK  # caught up: at the limit is fine
    assert lag.check(11, 131) is Lag.DROP
    assert "11.0s" in lag.drop_reason(11)


def test_no_snapshot_yet_counts_from_now() -> None:
    lag = LagPolicy(ServerSettings(max_fall_behind=1, new_client_fall_behind_grace=5))
    assert lag.check(2, 50) is Lag.GRACE_FIRST
