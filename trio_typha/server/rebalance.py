"""``ConnectionRebalancingMode=kubernetes``: the connection limit follows the cluster.

Every ``K8sServicePollIntervalSecs`` (plus up to 10 % jitter; the first poll one period after
start, as Typha) the poller counts the Typha replicas behind the ``calico-typha`` Service's
EndpointSlices and the nodes the felix cache holds, computes Typha's target
(:func:`~.governor.max_conn_limit`) and hands it to the :class:`~.governor.Governor`, which
then sheds one connection per ``ConnectionDropIntervalSecs`` while above it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from ..cache.feed import CacheFeed
from ..datastore.k8s_errors import K8sError
from ..logs import fields
from ..model.endpoint_slices import SERVICE_NAME_LABEL, count_typhas
from ..model.keys import resource_key
from ..model.kv import SyncStatus
from .governor import Governor, max_conn_limit

if TYPE_CHECKING:
    from ..datastore.k8s_api import KubeApi

log = logging.getLogger(__name__)

#: Typha gives each EndpointSlice list this long.
LOOKUP_TIMEOUT = 30.0
_NODE_PREFIX = resource_key("Node", "")


class CountUnavailable(Exception):
    """A count the target needs cannot be had right now (the message says why)."""


def node_counter(felix: CacheFeed) -> Callable[[], int]:
    """Typha's node count: distinct Node resources in the felix cache, once it is in sync."""
    def count() -> int:
        if felix.status is not SyncStatus.IN_SYNC:
            raise CountUnavailable("node counter not yet in sync")
        return felix.cache.count_prefix(_NODE_PREFIX)
    return count


def _unavailable(why: str) -> CountUnavailable:
    log.error("Failed to get Typha EndpointSlice from Kubernetes: %s", why)
    return CountUnavailable(why)


def typha_counter(api: KubeApi, *, namespace: str, service: str, port_name: str
                  ) -> Callable[[], Awaitable[int]]:
    """Typha's replica count from the Service's EndpointSlices (see model.endpoint_slices)."""
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    params = {"labelSelector": f"{SERVICE_NAME_LABEL}={service}"}

    async def count() -> int:
        try:
            with trio.fail_after(LOOKUP_TIMEOUT):
                doc = await api.get_json(path, params)
        except trio.TooSlowError as exc:
            raise _unavailable(f"no answer within {LOOKUP_TIMEOUT:g}s") from exc
        except K8sError as exc:
            raise _unavailable(str(exc)) from exc
        items = doc.get("items")
        return count_typhas(items if isinstance(items, list) else [], port_name)
    return count


class RebalancePoller:
    """Recomputes the governor's limit from the cluster, one poll per interval."""

    def __init__(self, governor: Governor, *, count_typhas: Callable[[], Awaitable[int]],
                 count_nodes: Callable[[], int], syncer_types: int, lower: int, upper: int,
                 interval: float) -> None:
        self.governor = governor
        self.count_typhas = count_typhas
        self.count_nodes = count_nodes
        self.syncer_types = syncer_types
        self.lower = lower
        self.upper = upper
        self.interval = interval if interval > 0 else 30.0  # Typha's ticker needs one
        self.active_target = upper
        self.polls = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        log.info("Kubernetes poll task started.")
        task_status.started()
        while True:
            await trio.sleep(self.interval * (1 + random.random() * 0.1))
            await self.poll_once()

    async def poll_once(self) -> tuple[int, str]:
        """One poll: count, compute, and push a changed target to the governor."""
        self.polls += 1
        typhas = nodes = None
        try:
            typhas = await self.count_typhas()
        except CountUnavailable as exc:
            log.warning("Failed to get number of Typhas: %s", exc)
        else:
            if typhas <= 0:
                log.warning("Failed to get number of Typhas", extra=fields(numTyphas=typhas))
        try:
            nodes = self.count_nodes()
        except CountUnavailable as exc:
            log.warning("Failed to get number of nodes: %s", exc)
        else:
            if nodes <= 0:
                log.warning("Failed to get number of nodes", extra=fields(numNodes=nodes))
        target, reason = max_conn_limit(num_typhas=typhas, num_nodes=nodes,
                                        syncer_types=self.syncer_types, lower=self.lower,
                                        upper=self.upper)
        if target != self.active_target:
            log.info("Calculated new connection limit.", extra=fields(
                numTyphas=typhas, numNodes=nodes, numSyncerTypes=self.syncer_types,
                newLimit=target, reason=reason))
            self.governor.set_limit(target)
            self.active_target = target
        return target, reason
