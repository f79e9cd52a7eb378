"""Connection limit: Typha's rebalancing governor.

Typha never refuses a connection.  While more connections are open than the limit allows,
it closes one per ``ConnectionDropIntervalSecs`` (plus up to 10 % jitter), so the agents
reconnect, spread over the other Typhas.  With ``ConnectionRebalancingMode=kubernetes`` the
limit follows the cluster: ``max_conn_limit`` below is Typha's formula.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import trio

from ..logs import fields
from ..observe.health import Heartbeat
from ..sessions.connections import ConnectionRegistry

log = logging.getLogger(__name__)


def max_conn_limit(*, num_typhas: int | None, num_nodes: int | None, syncer_types: int,
                   lower: int, upper: int) -> tuple[int, str]:
    """Typha's CalculateMaxConnLimit: the target and the reason, in integer arithmetic.

    One connection per syncer type per node, spread over all Typhas but one (room for a
    rolling update), plus 20 % headroom, clamped to [lower, upper].
    """
    if num_typhas is None or num_nodes is None:
        return upper, "error"
    if num_typhas <= 1:
        return upper, "lone typha"
    candidate = syncer_types * (1 + ((num_nodes * 120) // (num_typhas - 1)) // 100)
    target, reason = (lower, "configured lower limit") if candidate < lower else (
        candidate, "fraction+20%")
    if target > upper:
        return upper, "configured upper limit"
    return target, reason


class Governor:
    """Drops one connection per interval while the registry is over its share of ``limit``.

    ``limit`` is the replica's (Typha's MaxConnections) and may be changed while it runs
    (Kubernetes rebalancing recomputes it).  With ServerWorkers the replica is ``processes``
    processes, each holding at most its :attr:`share` of it.
    """

    def __init__(self, connections: ConnectionRegistry, *, limit: int, interval: float,
                 on_drop: Callable[[], None] | None = None, processes: int = 1) -> None:
        self.connections = connections
        self.limit = limit
        self.processes = processes
        self.interval = interval
        self.on_drop = on_drop
        #: Beaten every tick: the SyncServer liveness reporter, as Typha's governor loop.
        self.heartbeat = Heartbeat()
        #: Called after the limit changes (the primary hands its workers their new share).
        self.on_limit: Callable[[], None] | None = None

    def set_limit(self, limit: int) -> None:
        if limit != self.limit:
            log.info("New target number of connections", extra=fields(
                oldMax=self.limit, newMax=limit, currentNum=self.connections.load))
            self.limit = limit
            if self.on_limit is not None:
                self.on_limit()

    @property
    def share(self) -> int:
        """Connections this process may hold: its part of the replica's limit."""
        return max(1, -(-self.limit // self.processes))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        while True:
            self.heartbeat.beat()
            await trio.sleep(self.interval * (1 + random.random() * 0.1))
            # Once the server drains, the drain decides who goes.
            if self.connections.listening and self.connections.load > self.share and self.connections.shed_one(
                    "re-balance load with other Typha instances") is not None \
                    and self.on_drop is not None:
                self.on_drop()
