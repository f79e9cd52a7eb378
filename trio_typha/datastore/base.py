"""The contract between a datastore and the syncer pipelines.

A datastore watches a set of resource kinds for one pipeline and sends it a stream of
events: every object it lists (``ResourceEvent``), ``KindSynced`` once a kind's initial
list is complete, then changes.  A relist (after a dropped watch, a 410 or an etcd
compaction) must send only the differences from what it already sent.  ``Connection`` events
report reachability so the pipeline can report sync status and readiness like Typha.

What a process may ask of a datastore besides its events is part of the protocol too, with
defaults for a datastore that has none of it: the datastore subclasses :class:`Datastore`
and overrides what it has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..model.kinds import CALICO_V3_GROUP, ResourceKind
from ..model.syncers import DatastoreMode
from .events import Connection, DatastoreEvent, KindSynced, ResourceEvent
from .known import StateError

if TYPE_CHECKING:
    from .k8s_api import KubeApi
    from .stall import WatchBoard

__all__ = ["Connection", "Datastore", "DatastoreEvent", "KindSynced", "ResourceEvent",
           "hand_over"]


class Datastore(Protocol):
    """Something the pipelines can list-watch."""

    name: str

    @property
    def mode(self) -> DatastoreMode:
        """How Calico's model reads this datastore's objects (KDD or etcd)."""
        return DatastoreMode.KDD

    @property
    def calico_group(self) -> str:
        """The API group of Calico's resources (passed to the model's conversions)."""
        return CALICO_V3_GROUP

    @property
    def watches(self) -> WatchBoard | None:
        """Each running watch stream's progress, if this datastore keeps it (readiness and
        ``typha_watch_progress_age_seconds`` show it)."""
        return None

    @property
    def kube_api(self) -> KubeApi | None:
        """The Kubernetes API this datastore talks to, if any (KDD initialization and
        connection rebalancing reuse it)."""
        return None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host what the pipelines share (the datastore's connections) until cancelled;
        the process starts it before anything else asks the datastore.  Returns at once
        when there is nothing to host or it runs already."""
        task_status.started()

    async def probe(self) -> str | None:
        """Why the datastore cannot be reached at all, or None (the start-up check)."""
        return None

    async def aclose(self) -> None:
        """Release what the datastore holds (its watches have been cancelled)."""
        return None

    def export_watch(self, name: str) -> dict[str, Any] | None:
        """Where the running :meth:`watch` called ``name`` stands, as data a sibling can
        resume from (:mod:`trio_typha.warm`): None if it cannot be exported.  Exact only
        while its pipeline holds no event not yet applied (the caller checks)."""
        return None

    def restore_watch(self, name: str, kinds: Sequence[ResourceKind], state: object) -> None:
        """Make the next :meth:`watch` called ``name`` resume from a sibling's
        :meth:`export_watch` instead of listing; :class:`StateError` (nothing changed)
        if it cannot."""
        raise StateError(f"the {self.name} datastore cannot resume a sibling's watch")

    async def watch(self, kinds: Sequence[ResourceKind],
                    send: trio.MemorySendChannel[DatastoreEvent], *, name: str = "",
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List then watch ``kinds`` forever, sending events to ``send``; ``name`` (the
        syncer type) prefixes the names of its watch streams.

        Reports ``task_status.started()`` once the watches are set up (not necessarily
        synced).  Never returns normally; outages are reported as ``Connection`` events and
        retried with backoff.
        """
        ...


async def hand_over(send: trio.MemorySendChannel[DatastoreEvent],
                    events: Iterable[DatastoreEvent]) -> None:
    """Send ``events`` downstream, waiting only while the pipeline's channel is full.

    Not one ``await send.send()`` per event: each is a scheduling point, and under fan-out
    load one pass of the scheduler costs a broadcast round's worth of other tasks, so a
    watcher that yields per event ingests a few dozen events a second whatever the
    datastore's rate (docs/performance.md).  Handing a burst over in one
    go lets the pipeline take it as one batch, so the cache publishes it in one breadcrumb.
    Callers reach a checkpoint anyway: their next read of the datastore.
    """
    for event in events:
        try:
            send.send_nowait(event)
        except trio.WouldBlock:
            await send.send(event)
