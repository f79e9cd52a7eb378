"""The ping/pong rule both protocols' sessions share (pure, no event loop)."""

from __future__ import annotations

import math
import random

import pytest

from trio_typha.sessions.liveness import PINGS_REMEMBERED, Liveness
from trio_typha.sessions.settings import ServerSettings

SETTINGS = ServerSettings(ping_interval=10.0, pong_timeout=60.0)


def live(settings: ServerSettings = SETTINGS) -> Liveness[int]:
    return Liveness(settings, random.Random(1))


def test_nothing_is_due_before_start() -> None:
    lv = live()
    assert lv.deadline == math.inf and lv.next_ping_at == math.inf
    assert not lv.ping_due(1e9) and not lv.expired(1e9)


def test_pings_every_interval_plus_at_most_ten_percent() -> None:
    lv = live()
    lv.start(100.0)
    now = 100.0
    for i in range(1000):
        gap = lv.next_ping_at - now
        assert 10.0 <= gap <= 11.0
        assert not lv.ping_due(lv.next_ping_at - 1e-6) and lv.ping_due(lv.next_ping_at)
        now = lv.next_ping_at
        lv.ping_sent(i, now)


def test_any_pong_moves_the_deadline_and_a_known_one_gives_the_rtt_once() -> None:
    lv = live()
    lv.start(0.0)
    assert lv.deadline == 60.0 and not lv.expired(59.9) and lv.expired(60.0)
    lv.ping_sent(1, 10.0)
    assert lv.pong(1, 10.25) and lv.last_rtt == pytest.approx(0.25)
    assert lv.take_rtt() == pytest.approx(0.25) and lv.take_rtt() is None
    assert lv.deadline == pytest.approx(70.25)
    assert not lv.pong(99, 30.0)  # not one of ours: still proof of life, no RTT
    assert lv.deadline == 90.0 and lv.take_rtt() is None and lv.pongs == 2
    assert lv.silence(35.0) == 5.0


def test_an_answer_to_a_later_ping_can_answer_the_earlier_ones() -> None:
    lv = live()
    lv.start(0.0)
    for i in (1, 2, 3):
        lv.ping_sent(i, 10.0 * i)
    assert lv.pong(2, 25.0, answers_earlier=True)
    assert not lv.pong(1, 26.0)  # answered by 2 already
    assert lv.pong(3, 31.0)


def test_every_ping_that_can_still_be_answered_in_time_is_remembered() -> None:
    settings = ServerSettings(ping_interval=1.0, pong_timeout=40.0)
    lv = live(settings)
    lv.start(0.0)
    for i in range(40):
        lv.ping_sent(i, float(i))
    assert PINGS_REMEMBERED < 40
    assert lv.pong(0, 39.5)  # 39.5 s after it was sent: within the pong timeout
    for i in range(41, 1000):  # and the memory stays bounded
        lv.ping_sent(i, float(i))
    assert not lv.pong(41, 1000.0)
