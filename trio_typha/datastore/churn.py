"""Steady churn for the embedded datastore: pods relabelled and policies rewritten at a rate.

Each changed pod carries the label ``churn-ts`` (wall-clock nanoseconds at the write), so a
client can measure write-to-receipt delay from the value it receives; benchmarks use that.
"""

from __future__ import annotations

import copy
import logging
import random
import time

import trio

from ..model import kinds as K
from ..model.kinds import ResourceKind
from .memory import MemoryStore

log = logging.getLogger(__name__)

CHURN_LABEL = "churn-ts"


class Churn:
    """Writes ``rate`` changes per second to ``store`` (a fixed fraction are policy changes)."""

    def __init__(self, store: MemoryStore, rate: float, *, policy_fraction: float = 0.1,
                 seed: int = 7) -> None:
        if rate <= 0:
            raise ValueError("churn rate must be positive")
        self.store = store
        self.rate = rate
        self.policy_fraction = policy_fraction
        self.rng = random.Random(seed)
        self.writes = 0
        self._named: dict[ResourceKind, list[tuple[str, str]]] = {}

    def _names(self, kind: ResourceKind) -> list[tuple[str, str]]:
        """The objects of ``kind`` by (namespace, name), listed again only when their number
        changes (listing 10,000 pods per write would cost more than the write)."""
        names = self._named.get(kind)
        if names is None or len(names) != self.store.count(kind):
            names = self._named[kind] = [(ns, n) for ns, n, _ in self.store.objects(kind)]
        return names

    def step(self) -> None:
        """Make one change (synchronous)."""
        if self.rng.random() < self.policy_fraction and self.store.count(K.K8S_NETWORK_POLICY):
            kind = K.K8S_NETWORK_POLICY
        else:
            kind = K.POD
        names = self._names(kind)
        if not names:
            return
        ns, name = names[self.rng.randrange(len(names))]
        current = self.store.get(kind, ns, name)
        if current is None:
            return
        obj = copy.deepcopy(current)
        if kind is K.POD:
            obj["metadata"].setdefault("labels", {})[CHURN_LABEL] = str(time.time_ns())
        else:
            ports = obj["spec"].get("ingress", [{}])[0].setdefault("ports", [{}])
            ports[0]["port"] = 1024 + self.rng.randrange(60000)
        self.store.put(obj)
        self.writes += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        log.info("Churning the memory datastore at %.1f writes/s", self.rate)
        interval = 1.0 / self.rate
        task_status.started()
        deadline = trio.current_time()
        while True:
            deadline += interval
            self.step()
            while deadline <= trio.current_time():  # held up: make the writes now due
                deadline += interval
                self.step()
            await trio.sleep_until(deadline)
