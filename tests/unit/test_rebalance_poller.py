"""The Kubernetes rebalancing poll: Typha's timing, its error rule, and the governor's limit."""

from __future__ import annotations

import logging

import pytest
import trio

from trio_typha.logs import TyphaFormatter
from trio_typha.server.governor import Governor
from trio_typha.server.rebalance import CountUnavailable, RebalancePoller
from trio_typha.sessions.connections import ConnectionRegistry


class Cluster:
    """What the two lookups would find; ``None`` makes that lookup fail."""

    def __init__(self, typhas: int | None, nodes: int | None) -> None:
        self.typhas = typhas
        self.nodes = nodes
        self.asked_at: list[float] = []

    async def count_typhas(self) -> int:
        self.asked_at.append(trio.current_time())
        if self.typhas is None:
            raise CountUnavailable("API server unreachable")
        return self.typhas

    def count_nodes(self) -> int:
        if self.nodes is None:
            raise CountUnavailable("node counter not yet in sync")
        return self.nodes


def poller(cluster: Cluster, **kw) -> tuple[RebalancePoller, Governor]:
    gov = Governor(ConnectionRegistry(), limit=10000, interval=1.0)
    return RebalancePoller(gov, count_typhas=cluster.count_typhas,
                           count_nodes=cluster.count_nodes, syncer_types=4, lower=400,
                           upper=10000, interval=kw.get("interval", 30.0)), gov


async def test_first_poll_one_period_after_start_then_every_period(autojump_clock) -> None:
    cluster = Cluster(3, 1000)
    p, gov = poller(cluster)
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(p.run)
        await trio.sleep(100)
        nursery.cancel_scope.cancel()
    times = [t - start for t in cluster.asked_at]
    assert len(times) == 3 and 30 <= times[0] <= 33
    assert all(30 <= b - a <= 33 for a, b in zip(times, times[1:], strict=False))
    assert gov.limit == 2404


@pytest.mark.parametrize(("typhas", "nodes", "limit", "reason"), [
    (3, 100, 400, "configured lower limit"),
    (2, 100, 484, "fraction+20%"),
    (3, 1000, 2404, "fraction+20%"),
    (1, 1000, 10000, "lone typha"),
    (None, 1000, 10000, "error"),
    (3, None, 10000, "error"),
])
async def test_worked_examples_reach_the_governor(typhas, nodes, limit, reason,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    p, gov = poller(Cluster(typhas, nodes))
    assert await p.poll_once() == (limit, reason)
    assert gov.limit == limit
    if limit != 10000:
        lines = "\n".join(TyphaFormatter().format(r) for r in caplog.records)
        assert f'newLimit={limit} numNodes=' in lines and f'reason="{reason}"' in lines
        assert ": New target number of connections currentNum=0 newMax=" in lines
        assert "oldMax=10000" in lines
    if reason == "error":
        assert "Failed to get number of" in caplog.text
