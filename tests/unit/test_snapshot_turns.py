"""The snapshot turns (pure): a bounded number at once, the rest first come first served."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_typha.sessions.snapshot_turns import SnapshotTurns


def test_the_first_come_at_once_the_rest_in_order() -> None:
    turns = SnapshotTurns(2)
    assert [turns.request(t, now=0.0) for t in "abcde"] == [True, True, False, False, False]
    assert turns.running == 2 and turns.waiting == 3
    assert turns.position("c") == 0 and turns.position("e") == 2 and turns.position("a") is None
    assert turns.finish("b", now=5.0) == ["c"]
    assert turns.holds("c") and not turns.holds("b")
    # A waiting ticket that gives up leaves the queue and starts nothing.
    assert turns.finish("d", now=6.0) == []
    assert turns.finish("a", now=7.0) == ["e"]
    assert turns.figures.granted == 4 and turns.figures.queued == 2
    assert turns.figures.longest_wait == 7.0 and turns.figures.deepest_queue == 3


def test_finishing_twice_or_unknown_is_harmless() -> None:
    turns = SnapshotTurns(1)
    turns.request("a", 0)
    turns.request("b", 0)
    assert turns.finish("a", 1) == ["b"]
    assert turns.finish("a", 2) == [] and turns.finish("zz", 2) == []
    assert turns.running == 1


def test_asking_twice_is_a_bug() -> None:
    turns = SnapshotTurns(1)
    turns.request("a", 0)
    turns.request("b", 0)
    for ticket in "ab":
        with pytest.raises(ValueError, match="already asked"):
            turns.request(ticket, 0)


def test_no_limit_and_a_new_limit() -> None:
    turns = SnapshotTurns(0)
    assert all(turns.request(i, 0) for i in range(100))
    turns = SnapshotTurns(1)
    for t in "abcd":
        turns.request(t, 0)
    assert turns.set_limit(3, now=1) == ["b", "c"]
    assert turns.set_limit(0, now=2) == ["d"]
    with pytest.raises(ValueError):
        turns.set_limit(-1, now=3)
    with pytest.raises(ValueError):
        SnapshotTurns(-2)


# A run: each step either asks for a new ticket or finishes one (running or waiting) chosen
# by index among the tickets still in play.
_steps = st.lists(st.tuples(st.booleans(), st.integers(0, 1000)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(limit=st.integers(0, 6), steps=_steps)
def test_bounded_fifo_and_nobody_forgotten(limit: int, steps: list[tuple[bool, int]]) -> None:
    turns = SnapshotTurns(limit)
    running: set[int] = set()
    waiting: list[int] = []  # the model: arrival order
    order: list[int] = []  # grants in the order they happened
    arrivals: list[int] = []
    nxt = 0
    for clock, (ask, pick) in enumerate(steps):
        if ask or not (running or waiting):
            ticket, nxt = nxt, nxt + 1
            arrivals.append(ticket)
            if turns.request(ticket, clock):
                running.add(ticket)
                order.append(ticket)
            else:
                waiting.append(ticket)
        else:
            in_play = sorted(running) + waiting
            ticket = in_play[pick % len(in_play)]
            started = turns.finish(ticket, clock)
            if ticket in running:
                running.discard(ticket)
            else:
                waiting.remove(ticket)
                assert started == []
            # Whoever starts is the head of the queue, in order.
            assert started == waiting[:len(started)]
            del waiting[:len(started)]
            running.update(started)
            order.extend(started)
        assert turns.running == len(running) and turns.waiting == len(waiting)
        if limit:
            assert len(running) <= limit
            # Nobody waits while there is room.
            assert not waiting or len(running) == limit
        else:
            assert not waiting
    # Grants follow arrival order (apart from tickets that gave up while waiting).
    assert order == [t for t in arrivals if t in set(order)]
    # Everyone still waiting gets a turn once the running ones finish.
    for ticket in sorted(running):
        for started in turns.finish(ticket, len(steps)):
            running.add(started)
    while running:
        ticket = running.pop()
        running.update(turns.finish(ticket, len(steps)))
    assert turns.running == 0 and turns.waiting == 0
