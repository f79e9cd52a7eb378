"""Typha's connection-limit formula and the governor that enforces it."""

from __future__ import annotations

import pytest
import trio

from trio_typha.server.governor import Governor, max_conn_limit
from trio_typha.sessions.connections import ConnectionRegistry


@pytest.mark.parametrize(("typhas", "nodes", "expected"), [
    (3, 100, (400, "configured lower limit")),
    (2, 100, (484, "fraction+20%")),
    (3, 1000, (2404, "fraction+20%")),
    (1, 1000, (10000, "lone typha")),
    (0, 1000, (10000, "lone typha")),
    (None, 1000, (10000, "error")),
    (2, 100_000, (10000, "configured upper limit")),
])
def test_typha_worked_examples(typhas, nodes, expected) -> None:
    assert max_conn_limit(num_typhas=typhas, num_nodes=nodes, syncer_types=4, lower=400,
                          upper=10000) == expected


def test_typha_unit_test_case() -> None:
    assert max_conn_limit(num_typhas=5, num_nodes=100, syncer_types=3, lower=11,
                          upper=101)[0] == 93


async def test_governor_drops_one_per_interval_until_under_limit(autojump_clock) -> None:
    registry = ConnectionRegistry()
    registry.listening = True  # as while serving: the governor stands down once draining
    dropped: list[float] = []

    async def connection(task_status=trio.TASK_STATUS_IGNORED) -> None:
        with registry.track("peer"):
            task_status.started()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            await nursery.start(connection)
        gov = Governor(registry, limit=2, interval=1.0,
                       on_drop=lambda: dropped.append(trio.current_time()))
        await nursery.start(gov.run)
        await trio.sleep(10)
        assert len(registry) == 2
        assert len(dropped) == 3
        gaps = [b - a for a, b in zip(dropped, dropped[1:], strict=False)]
        assert all(1.0 <= g <= 1.1 for g in gaps)
        nursery.cancel_scope.cancel()


async def test_with_workers_each_process_holds_its_share_of_the_limit(autojump_clock) -> None:
    """ServerWorkers: the replica's limit (rebalanced or configured) is split over its
    processes; the primary holds its share and hands the workers theirs."""
    registry = ConnectionRegistry()
    registry.listening = True

    async def connection(task_status=trio.TASK_STATUS_IGNORED) -> None:
        with registry.track("peer"):
            task_status.started()
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            await nursery.start(connection)
        gov = Governor(registry, limit=10, interval=1.0, processes=3)
        assert gov.share == 4  # ceil(10 / 3)
        await nursery.start(gov.run)
        await trio.sleep(10)
        assert len(registry) == 4
        gov.set_limit(2)  # rebalancing lowered the replica's limit
        assert gov.share == 1
        await trio.sleep(10)
        assert len(registry) == 1
        nursery.cancel_scope.cancel()
    assert Governor(registry, limit=0, interval=1.0, processes=8).share == 1
