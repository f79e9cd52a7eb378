"""Exponential backoff with jitter (pure, seeded random source)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_typha.backoff import Backoff


def test_without_jitter_delays_double_up_to_the_ceiling() -> None:
    b = Backoff(initial=0.5, maximum=5.0, factor=2.0, jitter=0.0, random=random.random)
    assert [b.next_delay() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert b.failures == 7


def test_reset_starts_over() -> None:
    b = Backoff(initial=1.0, maximum=8.0, jitter=0.0, random=random.random)
    b.next_delay()
    b.next_delay()
    b.reset()
    assert b.failures == 0
    assert b.next_delay() == 1.0


def test_jitter_uses_the_random_source() -> None:
    values = iter([0.0, 0.5, 0.999])
    b = Backoff(initial=1.0, maximum=100.0, factor=2.0, jitter=0.5, random=lambda: next(values))
    assert b.next_delay() == 1.0  # r=0: no cut
    assert b.next_delay() == 2.0 * 0.75  # r=0.5: cut by a quarter
    assert b.next_delay() == pytest.approx(4.0 * (1 - 0.4995))


def test_same_seed_same_schedule() -> None:
    def schedule(seed: int) -> list[float]:
        b = Backoff(initial=0.1, maximum=10.0, random=random.Random(seed).random)
        return [b.next_delay() for _ in range(10)]

    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)


@given(initial=st.floats(0.01, 10), ceiling=st.floats(1, 3), factor=st.floats(1, 4),
       jitter=st.floats(0, 0.99), seed=st.integers(), n=st.integers(1, 40))
def test_delays_stay_within_bounds(initial: float, ceiling: float, factor: float,
                                   jitter: float, seed: int, n: int) -> None:
    maximum = initial * ceiling * 10
    b = Backoff(initial=initial, maximum=maximum, factor=factor, jitter=jitter,
                random=random.Random(seed).random)
    base = initial
    for _ in range(n):
        delay = b.next_delay()
        assert base * (1 - jitter) - 1e-9 <= delay <= base + 1e-9
        assert delay <= maximum + 1e-9
        base = min(base * factor, maximum)


@pytest.mark.parametrize("kwargs, message", [
    ({"initial": 0}, "initial"),
    ({"initial": 2, "maximum": 1}, "maximum"),
    ({"factor": 0.5}, "factor"),
    ({"jitter": 1.0}, "jitter"),
])
def test_bad_parameters_are_rejected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(random=random.random, **kwargs)
