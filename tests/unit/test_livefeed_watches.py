"""The live feed's datastore side: what a replica's watch board says, sampled without I/O."""

from __future__ import annotations

from trio_typha.datastore.stall import WatchBoard
from trio_typha.server.livefeed import ReplicaSampler
from trio_typha.sessions.connections import ConnectionRegistry


def test_feed_reports_watch_count_staleness_and_longest_silence() -> None:
    now = [100.0]
    board = WatchBoard(lambda: now[0])
    board.add("felix/pods", deadline=30.0)
    quiet = board.add("felix/networkpolicies", deadline=30.0)
    dormant = board.add("felix/kubevirt", deadline=30.0)
    dormant.dormant = True  # a kind the API server does not serve: never stale
    sampler = ReplicaSampler("r", ConnectionRegistry(), {}, board.states)

    now[0] = 110.0
    assert sampler.sample(0.0)["watches"] == {"count": 3, "stale": [], "max_silent_s": 10.0}

    now[0] = 145.5
    board.add("felix/pods", deadline=30.0)  # the pods watch restarted: current again
    quiet.probed(True, now[0])  # the datastore has a change the stream never delivered
    assert sampler.sample(1.0)["watches"] == {
        "count": 3, "stale": ["felix/networkpolicies"], "max_silent_s": 45.5}


def test_feed_without_a_watch_board_reports_none() -> None:
    sample = ReplicaSampler("r", ConnectionRegistry(), {}).sample(0.0)
    assert sample["watches"] == {"count": 0, "stale": [], "max_silent_s": 0.0}
