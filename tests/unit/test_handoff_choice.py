"""The balancer's pure choice: the least-loaded process, the primary first among equals."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_typha.workers.handoff import least_loaded


def test_the_smallest_load_wins() -> None:
    assert least_loaded([3, 1, 2]) == 1
    assert least_loaded([0, 5]) == 0


def test_ties_go_to_the_first() -> None:
    assert least_loaded([2, 2, 2]) == 0
    assert least_loaded([4, 1, 1]) == 1


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=16))
def test_choice_is_a_minimum(loads: list[int]) -> None:
    i = least_loaded(loads)
    assert loads[i] == min(loads) and min(loads) not in loads[:i]


def test_counting_each_choice_spreads_evenly() -> None:
    # As the balancer does: the chosen process's load grows by one per connection.
    loads = [0, 0, 0]
    for _ in range(40):
        loads[least_loaded(loads)] += 1
    assert max(loads) - min(loads) <= 1
